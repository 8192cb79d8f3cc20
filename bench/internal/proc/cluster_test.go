package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestNATSConfig(t *testing.T) {
	dir := t.TempDir()
	nodes := NATSCluster(dir, []int{4222, 4223, 4224}, []int{6222, 6223, 6224}, true)
	if len(nodes) != 3 {
		t.Fatalf("NATSCluster = %d nodes; want 3", len(nodes))
	}
	want := `server_name: n2
listen: 127.0.0.1:4223
max_payload: 8MB
jetstream {
  store_dir: "` + filepath.Join(dir, "n2") + `"
  sync_interval: always
}
cluster {
  name: fila-compare
  listen: 127.0.0.1:6223
  routes: [
    nats-route://127.0.0.1:6222
    nats-route://127.0.0.1:6224
  ]
}
`
	if got := nodes[1].Config(); got != want {
		t.Errorf("node 2 Config() =\n%s\nwant\n%s", got, want)
	}

	// nats-server itself reads each file as intended.
	for i, n := range nodes {
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(n.Config()), 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("node %d: nats-server rejects its configuration: %v\n%s", i+1, err, n.Config())
		}
		var routes []string
		for _, u := range o.Routes {
			routes = append(routes, u.Host)
		}
		if o.ServerName != n.Name || o.Port != n.Port || !o.JetStream || !o.SyncAlways ||
			o.Cluster.Name != "fila-compare" || o.Cluster.Port != n.RoutePort || len(routes) != 2 || slices.Contains(routes, "127.0.0.1:"+strconv.Itoa(n.RoutePort)) {
			t.Errorf("node %d: nats-server reads name %q, port %d, jetstream %v, sync always %v, cluster %q on %d, routes %v; want %q, %d, true, true, fila-compare on %d, the two others",
				i+1, o.ServerName, o.Port, o.JetStream, o.SyncAlways, o.Cluster.Name, o.Cluster.Port, routes, n.Name, n.Port, n.RoutePort)
		}
	}

	// A server alone has no name and no cluster block, as before.
	alone := NATSNode{Port: 4222, StoreDir: "/s"}.Config()
	if want := "listen: 127.0.0.1:4222\nmax_payload: 8MB\njetstream {\n  store_dir: \"/s\"\n}\n"; alone != want {
		t.Errorf("Config() of a server alone =\n%s\nwant\n%s", alone, want)
	}
}

func TestFilaClusterReady(t *testing.T) {
	status := func(addr2, leader string) string {
		return `{"clustered": true, "node_id": 1, "nodes": [
			{"node_id": 1, "addr": "127.0.0.1:1", "peer_addr": "127.0.0.1:11", "connected": true},
			{"node_id": 2, "addr": "` + addr2 + `", "peer_addr": "127.0.0.1:12", "connected": true},
			{"node_id": 3, "addr": "127.0.0.1:3", "peer_addr": "127.0.0.1:13", "connected": true}],
		"groups": [{"group_id": 1, "queue": "", "leader_node_id": ` + leader + `, "term": 2}]}`
	}
	tests := []struct {
		name, out string
		n         int
		want      bool
		err       string
	}{
		{"ready", status("127.0.0.1:2", "2"), 3, true, ""},
		{"no meta leader yet", status("127.0.0.1:2", "0"), 3, false, ""},
		{"an address not registered yet", status("", "2"), 3, false, ""},
		{"fewer members than started", status("127.0.0.1:2", "2"), 4, false, ""},
		{"a peer not connected", strings.Replace(status("127.0.0.1:2", "2"), `"connected": true}]`, `"connected": false}]`, 1), 3, false, ""},
		{"single node", `{"clustered": false, "node_id": 0, "nodes": [], "groups": []}`, 3, false, "runs alone"},
		{"not JSON", "node 1 answered", 3, false, "cluster status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := filaClusterReady([]byte(tt.out), tt.n)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("filaClusterReady = %v, %v; want %v, error containing %q", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestRabbitJoinSteps(t *testing.T) {
	var got []string
	for _, s := range rabbitJoinSteps([]string{"a@localhost", "b@localhost", "c@localhost"}) {
		got = append(got, strconv.Itoa(s.node)+": "+strings.Join(s.args, " "))
	}
	want := []string{
		"1: -n b@localhost stop_app",
		"1: -n b@localhost join_cluster a@localhost",
		"1: -n b@localhost start_app",
		"2: -n c@localhost stop_app",
		"2: -n c@localhost join_cluster a@localhost",
		"2: -n c@localhost start_app",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rabbitJoinSteps =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := rabbitJoinSteps([]string{"a@localhost"}); len(s) != 0 {
		t.Errorf("rabbitJoinSteps(one node) = %v; want none", s)
	}
}

func TestRabbitRunningNodes(t *testing.T) {
	out := "Cluster status of node a@localhost ...\n" +
		`{"alarms":[],"cluster_name":"a@vm","disk_nodes":["a@localhost","b@localhost"],"running_nodes":["b@localhost","a@localhost"]}`
	got, err := rabbitRunningNodes([]byte(out))
	if err != nil || !slices.Equal(got, []string{"b@localhost", "a@localhost"}) {
		t.Errorf("rabbitRunningNodes = %v, %v; want [b@localhost a@localhost]", got, err)
	}
	if _, err := rabbitRunningNodes([]byte("Error: unable to perform an operation on node")); err == nil {
		t.Error("rabbitRunningNodes(an error message) = nil error; want one")
	}
}

// TestJoinRabbitMQ runs the join against a stand-in rabbitmqctl that
// logs its calls and reports the nodes it was told to join as running.
func TestJoinRabbitMQ(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	ctl := filepath.Join(dir, "rabbitmqctl")
	script := `#!/bin/sh
echo "$(basename "$HOME") $ERL_EPMD_PORT $*" >> ` + calls + `
case "$3" in
join_cluster) echo "$2" >> ` + filepath.Join(dir, "joined") + ` ;;
cluster_status)
	echo "Cluster status of node $2 ..."
	printf '{"running_nodes":["%s"' "$2"
	[ -f ` + filepath.Join(dir, "joined") + ` ] && while read n; do printf ',"%s"' "$n"; done < ` + filepath.Join(dir, "joined") + `
	echo ']}' ;;
esac
`
	if err := os.WriteFile(ctl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var nodes []rabbitNode
	for _, n := range []string{"a", "b", "c"} {
		nodes = append(nodes, rabbitNode{dir: filepath.Join(dir, n), name: n + "@localhost", epmdPort: 4369})
		if err := os.Mkdir(nodes[len(nodes)-1].dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := joinRabbitMQ(ctx, ctl, nodes, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := `b 4369 -n b@localhost stop_app
b 4369 -n b@localhost join_cluster a@localhost
b 4369 -n b@localhost start_app
c 4369 -n c@localhost stop_app
c 4369 -n c@localhost join_cluster a@localhost
c 4369 -n c@localhost start_app
a 4369 -n a@localhost cluster_status --formatter json
`
	if string(b) != want {
		t.Errorf("rabbitmqctl calls (HOME, ERL_EPMD_PORT, arguments):\n%s\nwant\n%s", b, want)
	}

	// A node that never shows up as running fails the join in time.
	os.Remove(filepath.Join(dir, "joined"))
	os.WriteFile(ctl, []byte("#!/bin/sh\necho '{\"running_nodes\":[\"a@localhost\"]}'\n"), 0o755)
	err = joinRabbitMQ(ctx, ctl, nodes, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "running nodes [a@localhost]") {
		t.Errorf("joinRabbitMQ with nodes missing = %v; want an error naming the running nodes", err)
	}

	// A failing step stops the join with its output.
	os.WriteFile(ctl, []byte("#!/bin/sh\necho 'Error: unable to connect to node'; exit 69\n"), 0o755)
	err = joinRabbitMQ(ctx, ctl, nodes, time.Second)
	if err == nil || !strings.Contains(err.Error(), "stop_app") || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("joinRabbitMQ with a failing rabbitmqctl = %v; want the failing call and its output", err)
	}
}

// TestStartFilaCluster builds fila-server and fila and starts a cluster
// of three. It is skipped under -short.
func TestStartFilaCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: builds fila-server and starts three nodes")
	}
	bin := t.TempDir()
	srv, err := Build(".", "github.com/fila-mq/fila/broker/cmd/fila-server", filepath.Join(bin, "fila-server"))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Build(".", "github.com/fila-mq/fila/cli/cmd/fila", filepath.Join(bin, "fila"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartFilaCluster(srv, cli, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if addrs := strings.Split(c.Addr(), ","); len(addrs) != 3 || len(c.Nodes) != 3 {
		t.Errorf("Addr() = %q with %d nodes; want three addresses", c.Addr(), len(c.Nodes))
	}
	// The cluster takes a queue at once, through any node.
	if _, err := Run(context.Background(), cli, "--addr", c.Nodes[2].Addr, "queue", "create", "probe"); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Memory()
	if err != nil || len(ms) != 3 || ms[0].PeakRSS <= 0 {
		t.Errorf("Memory() = %v, %v; want three nodes' figures", ms, err)
	}
	c.Stop()
	for _, s := range c.Nodes {
		select {
		case <-s.done:
		default:
			t.Errorf("%s runs after Stop", s.Name)
		}
	}
}

// TestStartNATSCluster builds nats-server and starts a cluster of three.
// It is skipped under -short.
func TestStartNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: builds nats-server and starts three servers")
	}
	bin, err := Build(".", "github.com/nats-io/nats-server/v2", filepath.Join(t.TempDir(), "nats-server"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := StartNATSCluster("nats", bin, t.TempDir(), 3, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	// Each server routes to both others once the cluster formed.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		routed := 0
		for _, s := range c.Nodes {
			if strings.Count(s.Log(), "Route connection created") >= 2 {
				routed++
			}
		}
		if routed == 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("routes not all up after 30s:\n%s", c.Log())
		}
	}
}

// TestStartRabbitMQCluster starts a cluster of three RabbitMQ nodes,
// checks that Memory reports each Erlang VM and that Stop leaves no
// process behind. It is skipped where rabbitmq-server is not installed,
// and under -short.
func TestStartRabbitMQCluster(t *testing.T) {
	if _, err := LookRabbitMQ(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	if testing.Short() {
		t.Skip("skipped under -short: starts three RabbitMQ nodes")
	}
	c, err := StartRabbitMQCluster(t.TempDir(), 3)
	if errors.Is(err, ErrNoRabbitMQ) {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ms, err := c.Memory()
	if err != nil || len(ms) != 3 {
		t.Fatalf("Memory() = %v, %v; want three Erlang VMs", ms, err)
	}
	for i, m := range ms {
		if m.PeakRSS < 32<<20 {
			t.Errorf("node %d: Memory() = %+v; want the Erlang VM's, at least 32 MiB", i+1, m)
		}
	}
	var pgids []int
	for _, s := range c.Nodes {
		pgids = append(pgids, s.cmd.Process.Pid)
	}
	c.Stop()
	for i, pgid := range pgids {
		if members := groupMembers(pgid); len(members) > 0 {
			t.Errorf("node %d: after Stop, process group = %v; want none", i+1, members)
		}
	}
	for _, h := range c.helpers {
		select {
		case <-h.done:
		default:
			t.Errorf("%s runs after Stop", h.Name)
		}
	}
}
