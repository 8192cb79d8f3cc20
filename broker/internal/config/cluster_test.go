package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// TestClusterSingleNodeByDefault: with no [cluster] keys the broker is a
// single node, and nothing about the cluster is resolved, not even the host
// name for advertise_addr.
func TestClusterSingleNodeByDefault(t *testing.T) {
	opts := setup(t, "[server]\nnode_id = \"n1\"\n", nil)
	opts.Hostname = func() (string, error) { t.Error("Hostname called in single-node mode"); return "", nil }
	c, src := mustLoad(t, opts)
	if c.Cluster.Enabled() {
		t.Errorf("Cluster.Enabled() = true with no [cluster] keys; want false")
	}
	if c.Cluster.AdvertiseAddr != "" || c.Cluster.Peers != nil {
		t.Errorf("Cluster = %+v; want no advertise_addr and no peers", c.Cluster)
	}
	if got := src.Of("cluster.advertise_addr"); got != (Source{FromDefault, ""}) {
		t.Errorf("Sources.Of(cluster.advertise_addr) = %v; want default", got)
	}
}

// TestClusterLayers sets the section from the file and the environment.
func TestClusterLayers(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		env       env
		listen    string // server.listen_addr; "" for the default
		want      ClusterConfig
		advertise Source
	}{
		{
			name: "file",
			file: "[cluster]\nnode_id = 1\npeers = [\"1@10.0.0.1:5556\", \"2@10.0.0.2:5556\", \"3@10.0.0.3:5556\"]\n",
			want: ClusterConfig{NodeID: 1, AdvertiseAddr: "host-1:5555",
				Peers: map[uint64]string{1: "10.0.0.1:5556", 2: "10.0.0.2:5556", 3: "10.0.0.3:5556"}},
			advertise: Source{FromDefault, "hostname"},
		},
		{
			name: "environment",
			env: env{"FILA_CLUSTER_NODE_ID": "3", "FILA_CLUSTER_PEERS": " 1@a:1, 2@b:2 ,3@c:3",
				"FILA_CLUSTER_ELECTION_TICKS": "30", "FILA_CLUSTER_TICK_INTERVAL": "20ms",
				"FILA_CLUSTER_ADVERTISE_ADDR": "lb.example.com:7000", "FILA_CLUSTER_CLUSTER_ID": "staging"},
			want: ClusterConfig{NodeID: 3, ClusterID: "staging", AdvertiseAddr: "lb.example.com:7000",
				Peers: map[uint64]string{1: "a:1", 2: "b:2", 3: "c:3"}, ElectionTicks: 30, TickInterval: 20e6},
			advertise: Source{FromEnv, "FILA_CLUSTER_ADVERTISE_ADDR"},
		},
		{
			name: "environment over file",
			file: "[cluster]\nnode_id = 1\npeers = [\"1@a:1\"]\nreplication_factor = 1\n",
			env:  env{"FILA_CLUSTER_PEERS": "1@a:1,2@b:2", "FILA_CLUSTER_REPLICATION_FACTOR": "2"},
			want: ClusterConfig{NodeID: 1, AdvertiseAddr: "host-1:5555",
				Peers: map[uint64]string{1: "a:1", 2: "b:2"}, ReplicationFactor: 2},
			advertise: Source{FromDefault, "hostname"},
		},
		{
			name:   "advertise_addr from a specific listen_addr",
			env:    env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": "1@10.0.0.1:5556"},
			listen: "10.0.0.1:5555",
			want: ClusterConfig{NodeID: 1, AdvertiseAddr: "10.0.0.1:5555",
				Peers: map[uint64]string{1: "10.0.0.1:5556"}},
			advertise: Source{FromDefault, "server.listen_addr"},
		},
		{
			name:   "advertise_addr from the host name when listening on ::",
			env:    env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": "1@10.0.0.1:5556"},
			listen: "[::]:7000",
			want: ClusterConfig{NodeID: 1, AdvertiseAddr: "host-1:7000",
				Peers: map[uint64]string{1: "10.0.0.1:5556"}},
			advertise: Source{FromDefault, "hostname"},
		},
		{
			name:   "peer listener on another host may share the port",
			env:    env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": "1@10.0.0.2:5555", "FILA_CLUSTER_PEER_LISTEN_ADDR": "10.0.0.2:5555"},
			listen: "10.0.0.1:5555",
			want: ClusterConfig{NodeID: 1, AdvertiseAddr: "10.0.0.1:5555", PeerListenAddr: "10.0.0.2:5555",
				Peers: map[uint64]string{1: "10.0.0.2:5555"}},
			advertise: Source{FromDefault, "server.listen_addr"},
		},
		{
			name: "empty peers variable in single-node mode",
			env:  env{"FILA_CLUSTER_PEERS": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.env
			if tt.listen != "" {
				e = env{"FILA_SERVER_LISTEN_ADDR": tt.listen}
				for k, v := range tt.env {
					e[k] = v
				}
			}
			c, src := mustLoad(t, setup(t, tt.file, e))
			want := withClusterDefaults(tt.want)
			if !reflect.DeepEqual(c.Cluster, want) {
				t.Errorf("Cluster = %+v; want %+v", c.Cluster, want)
			}
			if c.Cluster.Enabled() != (want.NodeID != 0) {
				t.Errorf("Enabled() = %v; want %v", c.Cluster.Enabled(), want.NodeID != 0)
			}
			if got := src.Of("cluster.advertise_addr"); got != tt.advertise {
				t.Errorf("Sources.Of(cluster.advertise_addr) = %v; want %v", got, tt.advertise)
			}
		})
	}
}

// withClusterDefaults fills c's zero fields with their defaults.
func withClusterDefaults(c ClusterConfig) ClusterConfig {
	d := Default().Cluster
	if c.ClusterID == "" {
		c.ClusterID = d.ClusterID
	}
	if c.PeerListenAddr == "" {
		c.PeerListenAddr = d.PeerListenAddr
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = d.ReplicationFactor
	}
	if c.TickInterval == 0 {
		c.TickInterval = d.TickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = d.ElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = d.HeartbeatTicks
	}
	if c.SnapshotLogSize == 0 {
		c.SnapshotLogSize = d.SnapshotLogSize
	}
	if c.MetaSnapshotEntries == 0 {
		c.MetaSnapshotEntries = d.MetaSnapshotEntries
	}
	return c
}

// manyPeers returns a FILA_CLUSTER_PEERS value of n distinct members.
func manyPeers(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("%d@10.0.%d.%d:5556", i+1, i/250, i%250+1)
	}
	return strings.Join(ps, ",")
}

// TestClusterPeersBound: the most members a cluster may list is the most
// nodes a ClusterStatusResult may carry.
func TestClusterPeersBound(t *testing.T) {
	for _, b := range []struct {
		list string
		max  int
	}{{"ClusterStatusResult.nodes", wire.MaxClusterStatusResultNodes}, {"ClusterGroup.replicas", wire.MaxClusterGroupReplicas}} {
		if maxPeers != b.max {
			t.Errorf("maxPeers = %d; want the protocol's bound on %s, %d", maxPeers, b.list, b.max)
		}
	}
	opts := setup(t, "", env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": manyPeers(maxPeers)})
	if c, _, err := Load(opts); err != nil || len(c.Cluster.Peers) != maxPeers {
		t.Fatalf("Load with %d peers = %d peers, %v; want them all", maxPeers, len(c.Cluster.Peers), err)
	}
}

// TestClusterErrors covers each value of [cluster] that is refused: each
// error names the key, the value and what is wanted.
func TestClusterErrors(t *testing.T) {
	const members = "peers = [\"1@10.0.0.1:5556\", \"2@10.0.0.2:5556\"]\n"
	tests := []struct {
		name string
		file string
		env  env
		want []string
	}{
		{"negative node_id", "[cluster]\nnode_id = -1\n", nil,
			[]string{"cluster.node_id = -1", "want an integer from 0 (single-node mode) to 9223372036854775807"}},
		{"node_id as string", "[cluster]\nnode_id = \"1\"\n", nil,
			[]string{`cluster.node_id = "1"`, "want an integer"}},
		{"node_id not a number in env", "", env{"FILA_CLUSTER_NODE_ID": "one"},
			[]string{`cluster.node_id = "one" (env FILA_CLUSTER_NODE_ID): want an integer`}},
		{"cluster mode without peers", "[cluster]\nnode_id = 1\n", nil,
			[]string{"cluster.peers = [] (default): want the initial members, this node (cluster.node_id = 1) included", "required in cluster mode"}},
		{"peers without node_id", "[cluster]\n" + members, nil,
			[]string{`cluster.peers = ["1@10.0.0.1:5556", "2@10.0.0.2:5556"]`, "no peers while cluster.node_id is 0 (single-node mode)"}},
		{"peers without this node", "[cluster]\nnode_id = 3\n" + members, nil,
			[]string{"cluster.peers = ", "an entry for cluster.node_id = 3"}},
		{"peers not an array", "[cluster]\nnode_id = 1\npeers = \"1@a:1\"\n", nil,
			[]string{`cluster.peers = "1@a:1"`, `want an array of "ID@host:port" strings`}},
		{"peers of integers", "[cluster]\nnode_id = 1\npeers = [1, 2]\n", nil,
			[]string{"cluster.peers = [1, 2]", `want an array of "ID@host:port" strings`}},
		{"peer without ID", "[cluster]\nnode_id = 1\npeers = [\"10.0.0.1:5556\"]\n", nil,
			[]string{`"10.0.0.1:5556" is not "ID@host:port" with a positive integer ID`}},
		{"peer ID not a number", "", env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": "1@a:1,x@b:2"},
			[]string{`cluster.peers = "1@a:1,x@b:2" (env FILA_CLUSTER_PEERS): want a comma-separated list of ID@host:port`, `"x@b:2" is not`}},
		{"peer ID zero", "[cluster]\nnode_id = 1\npeers = [\"0@a:1\", \"1@b:1\"]\n", nil,
			[]string{"want peer IDs from 1 to 9223372036854775807; 0 is not"}},
		{"peer ID too large", "[cluster]\nnode_id = 1\npeers = [\"1@a:1\", \"18446744073709551615@b:1\"]\n", nil,
			[]string{"18446744073709551615 is not"}},
		{"duplicate peer ID", "[cluster]\nnode_id = 1\npeers = [\"1@a:1\", \"2@b:1\", \"1@c:1\"]\n", nil,
			[]string{"cluster.peers = ", "with distinct IDs; ID 1 is listed twice"}},
		{"too many peers", "", env{"FILA_CLUSTER_NODE_ID": "1", "FILA_CLUSTER_PEERS": manyPeers(maxPeers + 1)},
			[]string{"want at most 1000 members; 1001 are listed"}},
		{"duplicate peer address", "[cluster]\nnode_id = 1\npeers = [\"1@a:1\", \"2@a:1\"]\n", nil,
			[]string{`distinct peer addresses; "a:1" is listed for IDs 1 and 2`}},
		{"peer address without port", "[cluster]\nnode_id = 1\npeers = [\"1@a\"]\n", nil,
			[]string{`want peer addresses host:port`, `"a" (ID 1) is not`}},
		{"peer address with port 0", "[cluster]\nnode_id = 1\npeers = [\"1@a:0\"]\n", nil,
			[]string{`"a:0" (ID 1) is not`}},
		{"peer address unspecified", "[cluster]\nnode_id = 1\npeers = [\"1@0.0.0.0:5556\"]\n", nil,
			[]string{`"0.0.0.0:5556" (ID 1) is not`}},
		{"peer host with a space", "[cluster]\nnode_id = 1\npeers = [\"1@a b:1\"]\n", nil,
			[]string{`"a b:1" (ID 1) is not`}},
		{"bad cluster_id", "[cluster]\ncluster_id = \"\"\n", nil,
			[]string{`cluster.cluster_id = ""`, `want 1 to 255 bytes of letters, digits and ".-_:"`}},
		{"bad peer_listen_addr", "[cluster]\npeer_listen_addr = \"5556\"\n", nil,
			[]string{`cluster.peer_listen_addr = "5556"`, "want host:port"}},
		{"peer port is the client port", "[cluster]\nnode_id = 1\npeer_listen_addr = \"0.0.0.0:5555\"\n" + members, nil,
			[]string{`cluster.peer_listen_addr = "0.0.0.0:5555"`, "a port other than server.listen_addr's (5555)"}},
		{"peer port is the client port on the same address", "[server]\nlisten_addr = \"10.0.0.1:7000\"\n[cluster]\nnode_id = 1\npeer_listen_addr = \"10.0.0.1:7000\"\n" + members, nil,
			[]string{`cluster.peer_listen_addr = "10.0.0.1:7000"`, "a port other than server.listen_addr's (7000)"}},
		{"peer port is the client port, specific under unspecified", "[server]\nlisten_addr = \"[::]:7000\"\n[cluster]\nnode_id = 1\npeer_listen_addr = \"127.0.0.1:7000\"\n" + members, nil,
			[]string{`cluster.peer_listen_addr = "127.0.0.1:7000"`, "(7000)"}},
		{"advertise_addr unspecified", "[cluster]\nadvertise_addr = \"0.0.0.0:5555\"\n", nil,
			[]string{`cluster.advertise_addr = "0.0.0.0:5555"`, "want host:port that clients can reach"}},
		{"advertise_addr from a listen port of 0", "[server]\nlisten_addr = \"127.0.0.1:0\"\n[cluster]\nnode_id = 1\n" + members, nil,
			[]string{`cluster.advertise_addr = "127.0.0.1:0" (default (server.listen_addr))`, "server.listen_addr's port is 0, so set it explicitly"}},
		{"replication_factor zero", "[cluster]\nreplication_factor = 0\n", nil,
			[]string{"cluster.replication_factor = 0", "want an integer from 1 to 7"}},
		{"replication_factor eight", "", env{"FILA_CLUSTER_REPLICATION_FACTOR": "8"},
			[]string{`cluster.replication_factor = "8" (env FILA_CLUSTER_REPLICATION_FACTOR): want an integer from 1 to 7`}},
		{"tick_interval too short", "[cluster]\ntick_interval = \"500us\"\n", nil,
			[]string{`cluster.tick_interval = "500us"`, "want a duration from 1ms to 10s"}},
		{"tick_interval too long", "[cluster]\ntick_interval = \"1m\"\n", nil,
			[]string{`cluster.tick_interval = "1m"`, "want a duration from 1ms to 10s"}},
		{"election_ticks one", "[cluster]\nelection_ticks = 1\n", nil,
			[]string{"cluster.election_ticks = 1", "want an integer from 2 to 1000, more than heartbeat_ticks (1)"}},
		{"election_ticks not above heartbeat_ticks", "[cluster]\nelection_ticks = 5\nheartbeat_ticks = 5\n", nil,
			[]string{"cluster.election_ticks = 5", "more than heartbeat_ticks (5)"}},
		{"heartbeat_ticks too many", "[cluster]\nheartbeat_ticks = 101\nelection_ticks = 1000\n", nil,
			[]string{"cluster.heartbeat_ticks = 101", "want an integer from 1 to 100"}},
		{"unknown key", "[cluster]\npeer = [\"1@a:1\"]\n", nil,
			[]string{`unknown key cluster.peer = ["1@a:1"]`, "did you mean peers?"}},
		{"unknown variable", "", env{"FILA_CLUSTER_NODEID": "1"},
			[]string{"unknown key cluster.nodeid", "did you mean node_id (FILA_CLUSTER_NODE_ID)?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := Load(setup(t, tt.file, tt.env))
			if err == nil {
				t.Fatalf("Load(%q, %v) = %+v, nil; want an error", tt.file, tt.env, c.Cluster)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load(%q, %v) error =\n%v\nwant it to contain %q", tt.file, tt.env, err, w)
				}
			}
			var ke *KeyError
			if !errors.As(err, &ke) || !strings.HasPrefix(ke.Key, "cluster.") {
				t.Errorf("Load(%q, %v) error = %v; want a *KeyError for a cluster key", tt.file, tt.env, err)
			}
		})
	}
}

// TestClusterHostnameUnavailable: in cluster mode with a listener on every
// address, advertise_addr needs the host name; its failure names the key.
func TestClusterHostnameUnavailable(t *testing.T) {
	opts := setup(t, "[server]\nnode_id = \"n1\"\n[cluster]\nnode_id = 1\npeers = [\"1@a:1\"]\n", nil)
	opts.Hostname = func() (string, error) { return "", errors.New("no uts namespace") }
	_, _, err := Load(opts)
	if err == nil || !strings.Contains(err.Error(), "cluster.advertise_addr (default (hostname))") ||
		!strings.Contains(err.Error(), "no uts namespace") {
		t.Errorf("Load() error = %v; want one naming cluster.advertise_addr and the cause", err)
	}
	calls := 0
	opts = setup(t, "[cluster]\nnode_id = 1\npeers = [\"1@a:1\"]\n", nil)
	opts.Hostname = func() (string, error) { calls++; return "h", nil }
	c, _ := mustLoad(t, opts)
	if calls != 1 || c.Server.NodeID != "h" || c.Cluster.AdvertiseAddr != "h:5555" {
		t.Errorf("Load() called Hostname %d times, node_id %q, advertise_addr %q; want 1, \"h\", \"h:5555\"",
			calls, c.Server.NodeID, c.Cluster.AdvertiseAddr)
	}
}

// TestClusterPrint: --print-config writes peers as a sorted array and the
// resolved advertise_addr with its source, and loads back.
func TestClusterPrint(t *testing.T) {
	opts := setup(t, "", env{"FILA_CLUSTER_NODE_ID": "2", "FILA_CLUSTER_PEERS": "3@c:3,1@a:1,2@[::1]:2"})
	c, src := mustLoad(t, opts)
	var out bytes.Buffer
	if err := c.Print(&out, src); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n[cluster]\nnode_id = 2",
		`peers = ["1@a:1", "2@[::1]:2", "3@c:3"]  # env FILA_CLUSTER_PEERS`,
		`advertise_addr = "host-1:5555"`, "# default (hostname)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Print() =\n%s\nwant it to contain %q", out.String(), want)
		}
	}
	back, _ := mustLoad(t, setup(t, out.String(), nil))
	if !reflect.DeepEqual(back, c) {
		t.Errorf("Load(Print(c)) = %+v; want %+v", back.Cluster, c.Cluster)
	}
}

func TestHostsOverlap(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"", "10.0.0.1", true},
		{"0.0.0.0", "10.0.0.1", true},
		{"10.0.0.1", "::", true},
		{"10.0.0.1", "10.0.0.1", true},
		{"10.0.0.1", "::ffff:10.0.0.1", true},
		{"10.0.0.1", "10.0.0.2", false},
		{"Broker-1", "broker-1", true},
		{"broker-1", "broker-2", false},
	} {
		if got := hostsOverlap(tt.a, tt.b); got != tt.want {
			t.Errorf("hostsOverlap(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
