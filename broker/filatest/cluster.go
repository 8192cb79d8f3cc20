package filatest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Cluster is a cluster of fila-server processes on 127.0.0.1, each with
// its own client port, peer port and data directory.
type Cluster struct {
	// Nodes are the servers; Nodes[i] has Raft node ID i+1.
	Nodes []*Server
	// PeerAddrs are their peer transport addresses, host:port.
	PeerAddrs []string
	// isolate[i] is node i's FILA_TEST_ISOLATE_FILE.
	isolate []string
	// slow[i] is node i's FILA_TEST_SLOW_FSYNC_FILE.
	slow []string
}

// StartCluster starts n fila-server processes as one cluster (Raft node
// IDs 1 to n) and stops them when the test ends. opts apply to every
// node; a failing test logs every node's log.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	return StartClusterJoining(t, n, 0, opts...)
}

// StartClusterJoining is StartCluster of n nodes whose last joining ones
// are not members at first: each starts with cluster.join set and waits
// until a member adds it (Administrator.AddNode, with its PeerAddr).
func StartClusterJoining(t testing.TB, n, joining int, opts ...Option) *Cluster {
	t.Helper()
	ports := FreePorts(t, 2*n)
	client, peer := ports[:n], ports[n:]
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("%d@%s", i+1, peer[i]))
	}
	members := n - joining
	c := &Cluster{}
	faults := t.TempDir()
	// The nodes' data directories outlive a failing test, for a look at
	// what the nodes held.
	base, err := os.MkdirTemp("", "fila-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		s := &Server{Addr: client[i]}
		for _, o := range opts {
			o(s)
		}
		if s.DataDir == "" {
			s.DataDir = filepath.Join(base, fmt.Sprintf("node-%d", i+1))
			if err := os.Mkdir(s.DataDir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		known := peers[:members]
		if i >= members {
			known = peers
			s.Env = append(s.Env, "FILA_CLUSTER_JOIN=true")
		}
		s.Env = append(s.Env,
			fmt.Sprintf("FILA_SERVER_NODE_ID=node-%d", i+1),
			fmt.Sprintf("FILA_CLUSTER_NODE_ID=%d", i+1),
			"FILA_CLUSTER_PEERS="+strings.Join(known, ","),
			"FILA_CLUSTER_PEER_LISTEN_ADDR="+peer[i],
			"FILA_CLUSTER_ADVERTISE_ADDR="+client[i],
			"FILA_TEST_ISOLATE_FILE="+c.isolateFile(faults, i),
			"FILA_TEST_SLOW_FSYNC_FILE="+c.slowFile(faults, i),
		)
		c.Nodes = append(c.Nodes, s)
		c.PeerAddrs = append(c.PeerAddrs, peer[i])
	}
	// A node listens before its groups have a quorum: start them in
	// turn.
	for _, s := range c.Nodes {
		s.start(t)
	}
	t.Cleanup(func() {
		for _, s := range c.Nodes {
			s.Stop(t)
		}
		for i, s := range c.Nodes {
			if bad := s.undeclared(); bad != "" {
				t.Errorf("node %d answered with codes the spec does not declare for their operations:\n%s", i+1, bad)
			}
			if t.Failed() {
				t.Logf("node %d log:\n%s", i+1, s.Log())
			}
		}
		if t.Failed() {
			t.Logf("the nodes' data directories are kept in %s", base)
		} else {
			os.RemoveAll(base)
		}
	})
	return c
}

func (c *Cluster) isolateFile(dir string, i int) string {
	p := filepath.Join(dir, fmt.Sprintf("isolate-%d", i+1))
	c.isolate = append(c.isolate, p)
	return p
}

func (c *Cluster) slowFile(dir string, i int) string {
	p := filepath.Join(dir, fmt.Sprintf("slow-fsync-%d", i+1))
	c.slow = append(c.slow, p)
	return p
}

// SlowFsync makes every fsync of node i's storage take d longer, until
// FastFsync, as a disk that slows down. It needs a fila-server built
// with -tags filafaults (WithBinary); other builds ignore it.
func (c *Cluster) SlowFsync(t testing.TB, i int, d time.Duration) {
	t.Helper()
	if err := os.WriteFile(c.slow[i], []byte(d.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FastFsync ends node i's SlowFsync.
func (c *Cluster) FastFsync(t testing.TB, i int) {
	t.Helper()
	if err := os.Remove(c.slow[i]); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// Isolate cuts node i off from every peer, both ways, until Heal; the
// node and its clients keep running. It needs a fila-server built with
// -tags filafaults (WithBinary); other builds ignore it.
func (c *Cluster) Isolate(t testing.TB, i int) {
	t.Helper()
	if err := os.WriteFile(c.isolate[i], nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Heal ends node i's isolation.
func (c *Cluster) Heal(t testing.TB, i int) {
	t.Helper()
	if err := os.Remove(c.isolate[i]); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// Addrs returns the nodes' client addresses, comma-separated, as the Go
// SDK's Connect takes seed addresses.
func (c *Cluster) Addrs() string {
	var a []string
	for _, s := range c.Nodes {
		a = append(a, s.Addr)
	}
	return strings.Join(a, ",")
}
