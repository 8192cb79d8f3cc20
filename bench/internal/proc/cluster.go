package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Cluster is the nodes of one broker, each its own process on
// 127.0.0.1. A Cluster of one node, built from a Server, is how the
// harness holds a broker run alone.
type Cluster struct {
	// Name is what the harness calls the broker, such as "nats (sync
	// always)".
	Name string
	// Nodes are the broker's processes, in the order of their node IDs
	// (Nodes[i] is node i+1).
	Nodes []*Server
	// helpers are processes the nodes share, stopped after them:
	// RabbitMQ's port mapper.
	helpers []*Server
	// rabbit, for RabbitMQ, are the nodes' setups, and ctl the
	// rabbitmqctl that joined them.
	rabbit []rabbitNode
	ctl    string
}

// Addr returns the nodes' client addresses, comma-separated: the seed
// list that fila's --addr, the Go SDK's Connect and natsbench take.
func (c *Cluster) Addr() string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr
	}
	return strings.Join(a, ",")
}

// Stop stops every node at once (see Server.Stop), then the processes
// they shared. It returns once all have exited.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, s := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Stop()
		}()
	}
	wg.Wait()
	for _, h := range c.helpers {
		h.Stop()
	}
}

// Memory returns each node's memory (see Server.Memory), in the order
// of Nodes. It fails if any node's cannot be read.
func (c *Cluster) Memory() ([]Memory, error) {
	ms := make([]Memory, len(c.Nodes))
	for i, s := range c.Nodes {
		m, err := s.Memory()
		if err != nil {
			return nil, err
		}
		ms[i] = m
	}
	return ms, nil
}

// Log returns what every node has written, each node's log after a
// header line naming it.
func (c *Cluster) Log() string {
	var b strings.Builder
	for _, s := range c.Nodes {
		fmt.Fprintf(&b, "==> %s <==\n%s", s.Name, s.Log())
	}
	return b.String()
}

// StartFilaCluster starts n fila-server processes (bin) as one cluster
// on 127.0.0.1: node IDs 1 to n, each with a client port and a peer port
// that were free, its data in dir/node<ID>, and every queue replicated on
// all n nodes (cluster.replication_factor = n, at most 7). env adds
// FILA_* settings to every node. Nodes start in turn, each once the one
// before listens; StartFilaCluster then waits, for at most a minute,
// until every node answers "cluster status" (run with cli, a fila CLI)
// with the meta group's leader and every node's client address, so that
// queues can be created at once.
func StartFilaCluster(bin, cli, dir string, n int, env ...string) (*Cluster, error) {
	if n < 1 || n > 7 {
		return nil, fmt.Errorf("proc: fila cluster of %d nodes: want 1 to 7", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	client, peer := ports[:n], ports[n:]
	peers := make([]string, n)
	for i := range n {
		peers[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, peer[i])
	}
	c := &Cluster{Name: "fila"}
	for i := range n {
		nd := filepath.Join(dir, "node"+strconv.Itoa(i+1))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", client[i])
		cmd := exec.Command(bin)
		cmd.Dir = nd
		cmd.Env = append(os.Environ(),
			"FILA_SERVER_LISTEN_ADDR="+addr,
			"FILA_STORAGE_DATA_DIR="+filepath.Join(nd, "data"),
			"FILA_SERVER_NODE_ID=bench-"+strconv.Itoa(i+1),
			"FILA_LOG_LEVEL=info",
			"FILA_CLUSTER_NODE_ID="+strconv.Itoa(i+1),
			fmt.Sprintf("FILA_CLUSTER_PEER_LISTEN_ADDR=127.0.0.1:%d", peer[i]),
			"FILA_CLUSTER_ADVERTISE_ADDR="+addr,
			"FILA_CLUSTER_PEERS="+strings.Join(peers, ","),
			"FILA_CLUSTER_REPLICATION_FACTOR="+strconv.Itoa(n),
		)
		cmd.Env = append(cmd.Env, env...)
		s, err := start(fmt.Sprintf("fila node %d", i+1), cmd, filaListening)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	if err := waitFilaCluster(cli, c, time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitFilaCluster polls each node of c with "fila cluster status" until
// every one is ready (filaClusterReady) or d has passed.
func waitFilaCluster(cli string, c *Cluster, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, s := range c.Nodes {
		for {
			out, err := Run(ctx, cli, "--addr", s.Addr, "--timeout", "5s", "-o", "json", "cluster", "status")
			if err == nil {
				var ok bool
				if ok, err = filaClusterReady(out, len(c.Nodes)); ok {
					break
				}
			}
			select {
			case <-ctx.Done():
				if err == nil {
					err = errors.New("not ready")
				}
				return fmt.Errorf("proc: %s: cluster not ready in %v: %w\n%s", s.Name, d, err, c.Log())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// filaClusterReady reads the output of "fila -o json cluster status" and
// reports whether the answering node is a member of a cluster of n nodes
// connected to every other, knows the client address of each (so its
// NOT_LEADER answers can name the leader) and knows the meta group's
// leader (so queues can be created). The error is for output that is
// not such a status.
func filaClusterReady(out []byte, n int) (bool, error) {
	var st struct {
		Clustered bool `json:"clustered"`
		Nodes     []struct {
			NodeID    uint64 `json:"node_id"`
			Addr      string `json:"addr"`
			Connected bool   `json:"connected"`
		} `json:"nodes"`
		Groups []struct {
			Queue  string `json:"queue"`
			Leader uint64 `json:"leader_node_id"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return false, fmt.Errorf("proc: cluster status: %w", err)
	}
	if !st.Clustered {
		return false, errors.New("proc: cluster status: the node runs alone, not in a cluster")
	}
	if len(st.Nodes) != n {
		return false, nil
	}
	for _, nd := range st.Nodes {
		if nd.Addr == "" || !nd.Connected {
			return false, nil
		}
	}
	for _, g := range st.Groups {
		if g.Queue == "" { // the meta group
			return g.Leader != 0, nil
		}
	}
	return false, nil
}

// NATSNode is one nats-server's configuration (see Config).
type NATSNode struct {
	// Name is the server's name (server_name), which a cluster needs;
	// empty for the default.
	Name string
	// Port is the client port, on 127.0.0.1.
	Port int
	// StoreDir holds JetStream's store.
	StoreDir string
	// SyncAlways sets sync_interval: always (an fsync per write);
	// otherwise JetStream's default applies (fsync every two minutes).
	SyncAlways bool
	// Cluster names the cluster the server belongs to; empty for a
	// server alone, which ignores RoutePort and Routes.
	Cluster string
	// RoutePort is the port, on 127.0.0.1, on which the server accepts
	// routes from the other members.
	RoutePort int
	// Routes are the route ports, on 127.0.0.1, of the other members.
	Routes []int
}

// Config returns the node's nats-server configuration file: a client
// listener, a maximum payload of 8 MB, JetStream and, for a member of a
// cluster, the cluster's route listener and routes to each other member.
func (n NATSNode) Config() string {
	var b strings.Builder
	if n.Name != "" {
		fmt.Fprintf(&b, "server_name: %s\n", n.Name)
	}
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nmax_payload: 8MB\njetstream {\n  store_dir: %q\n", n.Port, n.StoreDir)
	if n.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if n.Cluster != "" {
		fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  routes: [\n", n.Cluster, n.RoutePort)
		for _, p := range n.Routes {
			fmt.Fprintf(&b, "    nats-route://127.0.0.1:%d\n", p)
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// NATSCluster returns the configurations of n nats-servers forming
// cluster "fila-compare": server i (from 0) is named n<i+1>, listens for
// clients on clientPorts[i] and for routes on routePorts[i], routes to
// every other server, and keeps its JetStream store in dir/n<i+1>.
func NATSCluster(dir string, clientPorts, routePorts []int, syncAlways bool) []NATSNode {
	nodes := make([]NATSNode, len(clientPorts))
	for i := range nodes {
		name := "n" + strconv.Itoa(i+1)
		var routes []int
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, p)
			}
		}
		nodes[i] = NATSNode{
			Name: name, Port: clientPorts[i], StoreDir: filepath.Join(dir, name), SyncAlways: syncAlways,
			Cluster: "fila-compare", RoutePort: routePorts[i], Routes: routes,
		}
	}
	return nodes
}

// StartNATSCluster starts n nats-server processes (bin) as one
// JetStream cluster on 127.0.0.1 (see NATSCluster), on ports that were
// free, with their stores under dir, and returns once each accepts
// client connections. JetStream elects its meta leader afterwards: a
// stream created at once may fail until it has one.
func StartNATSCluster(name, bin, dir string, n int, syncAlways bool) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name}
	for i, nd := range NATSCluster(dir, ports[:n], ports[n:], syncAlways) {
		s, err := startNATS(fmt.Sprintf("%s node %d", name, i+1), bin, nd)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	return c, nil
}
