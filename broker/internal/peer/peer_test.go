package peer

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Nothing here asserts a duration: waits poll a condition for up to
// waitLimit, which only keeps a broken test from hanging.
const waitLimit = time.Minute

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logBuffer keeps a transport's log for assertions and passes it to t.Log.
type logBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}

func (l *logBuffer) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

type snapStatus struct {
	to, group uint64
	failed    bool
}

// A node is a Transport and what its callbacks heard.
type node struct {
	*Transport
	log *logBuffer

	mu          sync.Mutex
	got         map[uint64][]Message // by sender
	unreachable map[uint64]int
	snaps       []snapStatus
}

func (n *node) received(from uint64) []Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Message(nil), n.got[from]...)
}

func (n *node) unreachableCount(to uint64) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unreachable[to]
}

func (n *node) snapshotStatuses() []snapStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]snapStatus(nil), n.snaps...)
}

// startNode starts a transport on 127.0.0.1 with the cluster ID "test",
// closed at the end of the test; edit changes its Config first.
func startNode(t testing.TB, id uint64, edit func(*Config)) *node {
	t.Helper()
	n := &node{log: &logBuffer{t: t}, got: map[uint64][]Message{}, unreachable: map[uint64]int{}}
	cfg := Config{
		NodeID:     id,
		ClusterID:  "test",
		ListenAddr: "127.0.0.1:0",
		Handler: func(from uint64, msgs []Message) {
			n.mu.Lock()
			n.got[from] = append(n.got[from], msgs...)
			n.mu.Unlock()
		},
		Unreachable: func(to uint64) {
			n.mu.Lock()
			n.unreachable[to]++
			n.mu.Unlock()
		},
		SnapshotStatus: func(to, group uint64, failed bool) {
			n.mu.Lock()
			n.snaps = append(n.snaps, snapStatus{to, group, failed})
			n.mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New(node %d) = %v", id, err)
	}
	n.Transport = tr
	t.Cleanup(func() { n.Close() })
	return n
}

// connect introduces every pair of nodes and waits for their connections.
func connect(t testing.TB, nodes ...*node) {
	t.Helper()
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.SetPeer(b.cfg.NodeID, b.Addr().String())
			}
		}
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				waitFor(t, fmt.Sprintf("node %d connected to %d", a.cfg.NodeID, b.cfg.NodeID), func() bool { return a.Connected(b.cfg.NodeID) })
			}
		}
	}
}

func raftMsg(typ pb.MessageType, from, to, index uint64) *pb.Message {
	return &pb.Message{Type: typ.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(1), Index: proto.Uint64(index)}
}

var groups = []uint64{0, 1, 7, 1 << 40}

// sendSeq sends count messages from a to b, of the groups in turn, with
// Index first, first+1, …, in Send calls of 1 to 5 messages.
func sendSeq(a *node, to uint64, first, count uint64) {
	var batch []Message
	for i := range count {
		idx := first + i
		batch = append(batch, Message{Group: groups[idx%uint64(len(groups))], Msg: raftMsg(pb.MessageType_MsgApp, a.cfg.NodeID, to, idx)})
		if len(batch) == int(idx%5)+1 || i == count-1 {
			a.Send(to, batch)
			batch = nil
		}
	}
}

// checkSeq checks that got holds the messages of sendSeq(first, count)
// from `from` to `to`, in order.
func checkSeq(t *testing.T, got []Message, from, to, first, count uint64) {
	t.Helper()
	if uint64(len(got)) != count {
		t.Fatalf("node %d got %d messages from %d; want %d", to, len(got), from, count)
	}
	for i, m := range got {
		idx := first + uint64(i)
		if m.Msg.GetIndex() != idx || m.Group != groups[idx%uint64(len(groups))] || m.Msg.GetFrom() != from || m.Msg.GetTo() != to {
			t.Fatalf("node %d: message %d from %d = group %d %v; want group %d index %d", to, i, from, m.Group, m.Msg, groups[idx%uint64(len(groups))], idx)
		}
	}
}

func TestThreeNodes(t *testing.T) {
	nodes := []*node{startNode(t, 1, nil), startNode(t, 2, nil), startNode(t, 3, nil)}
	connect(t, nodes...)
	const count = 300
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				sendSeq(a, b.cfg.NodeID, 0, count)
			}
		}
	}
	for _, b := range nodes {
		for _, a := range nodes {
			if a == b {
				continue
			}
			from, to := a.cfg.NodeID, b.cfg.NodeID
			waitFor(t, fmt.Sprintf("%d messages from %d at %d", count, from, to), func() bool { return len(b.received(from)) >= count })
			checkSeq(t, b.received(from), from, to, 0, count)
		}
	}
	// One connection per pair, carrying both directions: each side counts
	// the connections it attached, dialed or accepted.
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			// A writer counts what it wrote after the write returns, which
			// may be after the reader has handed it over.
			waitFor(t, "the writer's count", func() bool { return a.Stats()[b.cfg.NodeID].MsgsSent == count })
			s, back := a.Stats()[b.cfg.NodeID], b.Stats()[a.cfg.NodeID]
			if s.Connections != 1 || !s.Connected {
				t.Errorf("node %d: stats of %d: %d connections, connected %v; want 1, true", a.cfg.NodeID, b.cfg.NodeID, s.Connections, s.Connected)
			}
			if s.MsgsSent != count || s.MsgsDropped != 0 || back.MsgsReceived != count || back.BytesReceived != s.BytesSent {
				t.Errorf("%d to %d: sent %d (%d bytes), dropped %d, received %d (%d bytes); want %d sent and received, none dropped",
					a.cfg.NodeID, b.cfg.NodeID, s.MsgsSent, s.BytesSent, s.MsgsDropped, back.MsgsReceived, back.BytesReceived, count)
			}
		}
	}
}

func TestReconnectAfterAcceptorRestarts(t *testing.T) {
	n1, n2 := startNode(t, 1, nil), startNode(t, 2, nil)
	connect(t, n1, n2)
	addr := n2.Addr().String()
	sendSeq(n1, 2, 0, 10)
	waitFor(t, "10 messages at node 2", func() bool { return len(n2.received(1)) == 10 })

	if err := n2.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	waitFor(t, "node 1 to see node 2 gone", func() bool { return !n1.Connected(2) })
	// While it is down, messages drop: unreachable, and snapshots fail.
	n1.Send(2, []Message{{Group: 5, Msg: raftMsg(pb.MessageType_MsgSnap, 1, 2, 0)}, {Group: 1, Msg: raftMsg(pb.MessageType_MsgApp, 1, 2, 10)}})
	waitFor(t, "Unreachable(2)", func() bool { return n1.unreachableCount(2) == 1 })
	waitFor(t, "a failed snapshot", func() bool { return len(n1.snapshotStatuses()) == 1 })
	if got := n1.snapshotStatuses()[0]; got != (snapStatus{2, 5, true}) {
		t.Errorf("SnapshotStatus = %+v; want {2 5 true}", got)
	}

	n2 = startNode(t, 2, func(c *Config) {
		c.ListenAddr = addr
		c.Peers = map[uint64]string{1: n1.Addr().String()}
	})
	waitFor(t, "node 1 to reconnect", func() bool { return n1.Connected(2) && n2.Connected(1) })
	sendSeq(n1, 2, 100, 20)
	sendSeq(n2, 1, 0, 20)
	waitFor(t, "messages both ways", func() bool { return len(n2.received(1)) == 20 && len(n1.received(2)) == 20 })
	checkSeq(t, n2.received(1), 1, 2, 100, 20)
	checkSeq(t, n1.received(2), 2, 1, 0, 20)
	s := n1.Stats()[2]
	if s.Connections != 2 || s.MsgsDropped != 2 {
		t.Errorf("node 1's stats of 2: %d connections, %d dropped; want 2 and 2", s.Connections, s.MsgsDropped)
	}
}

// rawDial connects to n as a hand-written peer would and sends in.
func rawDial(t *testing.T, n *node, in []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", n.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write(in); err != nil {
		t.Fatal(err)
	}
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// frame wraps body in a frame.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func TestHandshakeRefusals(t *testing.T) {
	n2 := startNode(t, 2, func(c *Config) { c.Peers = map[uint64]string{1: "127.0.0.1:1", 3: "127.0.0.1:1"} })
	tests := []struct {
		name  string
		hello []byte
		log   string
	}{
		{"other cluster", appendHello(nil, 1, "prod"), "cluster ID mismatch"},
		{"unknown node", appendHello(nil, 9, "test"), "unknown node"},
		{"its own ID", appendHello(nil, 2, "test"), "unknown node"},
		{"higher ID dialing", appendHello(nil, 3, "test"), "the lower ID dials"},
		{"stray client", []byte("GET / HTTP/1.1\r\nHost: fila\r\n\r\n"), "not a fila peer hello"},
		{"other version", append([]byte(helloMagic), 9, 0, 0, 0, 0, 0, 0, 0, 1, 4, 't', 'e', 's', 't'), "version 9"},
	}
	for _, tt := range tests {
		// The refusal is a close without an answer, whatever follows (a
		// reset, if the frame was still unread).
		c := rawDial(t, n2, append(tt.hello, frame(encodeBatch(t, sampleBatch()))...))
		if got, err := io.ReadAll(c); len(got) != 0 || isTimeout(err) {
			t.Errorf("%s: read %q, %v; want the connection closed without a word", tt.name, got, err)
		}
		waitFor(t, fmt.Sprintf("%s: log saying %q", tt.name, tt.log), func() bool { return n2.log.has(tt.log) })
	}
	if got := n2.received(1); len(got) != 0 {
		t.Errorf("refused connections delivered %d messages", len(got))
	}
	if s := n2.Stats()[1]; s.Connections != 0 {
		t.Errorf("refused connections were counted: %+v", s)
	}
}

func TestRawPeer(t *testing.T) {
	n2 := startNode(t, 2, func(c *Config) { c.Peers = map[uint64]string{1: "127.0.0.1:1"} })
	// A peer written from the package doc: hello, answer, frames.
	c := rawDial(t, n2, appendHello(nil, 1, "test"))
	node, cluster, err := readHello(c)
	if err != nil || node != 2 || cluster != "test" {
		t.Fatalf("answer = %d, %q, %v; want 2, test", node, cluster, err)
	}
	want := sampleBatch()
	var out []byte
	out = append(out, frame(encodeBatch(t, want[:2]))...)
	out = append(out, frame(nil)...) // empty: delivers nothing
	out = append(out, frame(encodeBatch(t, want[2:]))...)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the messages", func() bool { return len(n2.received(1)) == len(want) })
	for i, m := range n2.received(1) {
		if m.Group != want[i].Group || !proto.Equal(m.Msg, want[i].Msg) {
			t.Errorf("message %d = %d %v; want %d %v", i, m.Group, m.Msg, want[i].Group, want[i].Msg)
		}
	}
	n2.Send(1, []Message{{Group: 3, Msg: raftMsg(pb.MessageType_MsgHeartbeatResp, 2, 1, 0)}})
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	if got, err := decodeBatch(body, nil); err != nil || len(got) != 1 || got[0].Group != 3 || got[0].Msg.GetType() != pb.MessageType_MsgHeartbeatResp {
		t.Errorf("frame from node 2 = %v, %v; want one MsgHeartbeatResp of group 3", got, err)
	}

	// Bad frames close the connection; what came before them was delivered.
	for _, tt := range []struct {
		name string
		in   []byte
		log  string
	}{
		{"too large", binary.BigEndian.AppendUint32(nil, MaxFrameSize+1), "over the limit"},
		{"malformed", frame([]byte{1, 9, 0}), "batch entry 0"},
	} {
		c := rawDial(t, n2, appendHello(nil, 1, "test"))
		if _, _, err := readHello(c); err != nil {
			t.Fatalf("%s: hello: %v", tt.name, err)
		}
		if _, err := c.Write(tt.in); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(c); isTimeout(err) {
			t.Errorf("%s: read %v; want the connection closed", tt.name, err)
		}
		waitFor(t, fmt.Sprintf("%s: log saying %q", tt.name, tt.log), func() bool { return n2.log.has(tt.log) })
	}
}

func TestClusterIDMismatch(t *testing.T) {
	n1 := startNode(t, 1, func(c *Config) { c.ClusterID = "blue" })
	n2 := startNode(t, 2, func(c *Config) { c.ClusterID = "green" })
	n2.SetPeer(1, n1.Addr().String())
	n1.SetPeer(2, n2.Addr().String())
	waitFor(t, "node 2 to refuse node 1", func() bool { return n2.log.has("cluster ID mismatch") })
	waitFor(t, "node 1 to give up a dial", func() bool { return n1.log.has("cannot reach peer") })
	if n1.Connected(2) || n2.Connected(1) || n1.Stats()[2].Connections != 0 {
		t.Errorf("nodes of two clusters connected: %+v", n1.Stats()[2])
	}
}

func TestMembership(t *testing.T) {
	n1 := startNode(t, 1, nil)
	n2 := startNode(t, 2, nil)
	// Node 2 does not know node 1 yet: it refuses it, and node 1 redials.
	n1.SetPeer(2, n2.Addr().String())
	waitFor(t, "node 2 to refuse an unknown node", func() bool { return n2.log.has("unknown node") })
	n2.SetPeer(1, n1.Addr().String())
	waitFor(t, "the connection", func() bool { return n1.Connected(2) && n2.Connected(1) })
	sendSeq(n2, 1, 0, 5)
	waitFor(t, "5 messages at node 1", func() bool { return len(n1.received(2)) == 5 })

	// Node 2 removes node 1: the connection closes and stays closed.
	n2.RemovePeer(1)
	if _, ok := n2.Stats()[1]; ok || n2.Connected(1) {
		t.Errorf("node 1 still a peer of node 2 after RemovePeer")
	}
	waitFor(t, "node 1 to see the connection close", func() bool { return !n1.Connected(2) })
	// Node 1 redials: node 2 refuses it as removed, for good.
	waitFor(t, "node 2 to refuse a removed node", func() bool { return n2.log.has("node 1 was removed from the cluster") })
	n2.SetPeer(1, n1.Addr().String())
	if _, ok := n2.Stats()[1]; ok {
		t.Errorf("SetPeer of a removed node made it a peer again")
	}
	n1.Send(2, []Message{{Group: 1, Msg: raftMsg(pb.MessageType_MsgApp, 1, 2, 0)}})
	waitFor(t, "Unreachable(2)", func() bool { return n1.unreachableCount(2) == 1 })
	n2.Send(1, []Message{{Group: 4, Msg: raftMsg(pb.MessageType_MsgSnap, 2, 1, 0)}})
	waitFor(t, "node 2 to drop a snapshot to a node it removed", func() bool {
		s := n2.snapshotStatuses()
		return len(s) == 1 && s[0] == snapStatus{1, 4, true}
	})
	waitFor(t, "node 2 to report node 1 unreachable", func() bool { return n2.unreachableCount(1) == 1 })

	// A new address for node 2: node 1 dials there.
	n3 := startNode(t, 2, func(c *Config) { c.Peers = map[uint64]string{1: n1.Addr().String()} })
	n1.SetPeer(2, n3.Addr().String())
	waitFor(t, "node 1 to reach node 2 at its new address", func() bool { return n1.Connected(2) && n3.Connected(1) })
	if got := n1.Stats()[2].Addr; got != n3.Addr().String() {
		t.Errorf("Stats()[2].Addr = %s; want %s", got, n3.Addr())
	}
}

func TestIsolateAndHeal(t *testing.T) {
	n1, n2 := startNode(t, 1, nil), startNode(t, 2, nil)
	connect(t, n1, n2)
	n1.Isolate(2)
	sendSeq(n1, 2, 0, 5)
	sendSeq(n2, 1, 0, 5)
	waitFor(t, "node 1 to discard 5 messages from node 2", func() bool { return n1.Stats()[2].MsgsDroppedIn == 5 })
	waitFor(t, "Unreachable(2) at node 1", func() bool { return n1.unreachableCount(2) == 1 })
	if s := n1.Stats()[2]; s.MsgsDropped != 5 || s.MsgsSent != 0 || !s.Connected {
		t.Errorf("node 1's stats of 2 while isolated: %+v; want 5 dropped, none sent, connected", s)
	}

	n1.Heal()
	// Order within the connection: when the markers arrive, anything sent
	// while isolated would have arrived before them.
	sendSeq(n1, 2, 100, 1)
	sendSeq(n2, 1, 100, 1)
	waitFor(t, "the markers", func() bool { return len(n1.received(2)) > 0 && len(n2.received(1)) > 0 })
	checkSeq(t, n2.received(1), 1, 2, 100, 1)
	checkSeq(t, n1.received(2), 2, 1, 100, 1)
	if s := n1.Stats()[2]; s.Connections != 1 {
		t.Errorf("isolation closed the connection: %d connections", s.Connections)
	}
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	n1 := startNode(t, 1, func(c *Config) { c.Peers = map[uint64]string{2: nobody} })
	snap := func(group uint64) []Message {
		return []Message{{Group: group, Msg: raftMsg(pb.MessageType_MsgSnap, 1, 2, 0)}, {Group: 1, Msg: raftMsg(pb.MessageType_MsgApp, 1, 2, 0)}}
	}
	n1.Send(2, snap(10))
	n1.Send(2, snap(11))
	// Callbacks run in order, snapshots first: once group 11's status is in,
	// every callback of both Sends has run.
	waitFor(t, "two failed snapshots", func() bool { return len(n1.snapshotStatuses()) == 2 })
	if got := n1.snapshotStatuses(); got[0] != (snapStatus{2, 10, true}) || got[1] != (snapStatus{2, 11, true}) {
		t.Errorf("SnapshotStatus calls = %+v; want groups 10 and 11 failed", got)
	}
	if got := n1.unreachableCount(2); got != 1 {
		t.Errorf("Unreachable(2) called %d times in one burst; want 1", got)
	}
	if s := n1.Stats()[2]; s.MsgsDropped != 4 || s.Connected {
		t.Errorf("stats: %+v; want 4 dropped, not connected", s)
	}
	waitFor(t, "a logged dial failure", func() bool { return n1.log.has("cannot reach peer") })

	// A node that is not a peer is unreachable too.
	n1.Send(9, snap(12))
	waitFor(t, "Unreachable(9)", func() bool { return n1.unreachableCount(9) == 1 })
}

func TestSnapshotWritten(t *testing.T) {
	n1, n2 := startNode(t, 1, nil), startNode(t, 2, nil)
	connect(t, n1, n2)
	m := raftMsg(pb.MessageType_MsgSnap, 2, 1, 0)
	m.Snapshot = &pb.Snapshot{Data: bytes.Repeat([]byte("s"), 1<<20), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(5), Term: proto.Uint64(1)}}
	n2.Send(1, []Message{{Group: 6, Msg: m}})
	waitFor(t, "the snapshot's status", func() bool { return len(n2.snapshotStatuses()) == 1 })
	if got := n2.snapshotStatuses()[0]; got != (snapStatus{1, 6, false}) {
		t.Errorf("SnapshotStatus = %+v; want {1 6 false}", got)
	}
	waitFor(t, "the snapshot at node 1", func() bool { return len(n1.received(2)) == 1 })
	if got := n1.received(2)[0]; got.Group != 6 || !proto.Equal(got.Msg, m) {
		t.Errorf("received group %d, %d bytes of snapshot; want group 6, %d", got.Group, len(got.Msg.GetSnapshot().GetData()), len(m.Snapshot.Data))
	}
}

func TestNewErrors(t *testing.T) {
	h := func(uint64, []Message) {}
	tests := []struct {
		name string
		cfg  Config
		say  string
	}{
		{"node 0", Config{ClusterID: "c", ListenAddr: "127.0.0.1:0", Handler: h}, "node ID"},
		{"no cluster", Config{NodeID: 1, ListenAddr: "127.0.0.1:0", Handler: h}, "cluster ID"},
		{"long cluster", Config{NodeID: 1, ClusterID: strings.Repeat("c", 256), ListenAddr: "127.0.0.1:0", Handler: h}, "cluster ID"},
		{"no handler", Config{NodeID: 1, ClusterID: "c", ListenAddr: "127.0.0.1:0"}, "Handler"},
		{"peer 0", Config{NodeID: 1, ClusterID: "c", ListenAddr: "127.0.0.1:0", Handler: h, Peers: map[uint64]string{0: "x:1"}}, "peer ID"},
		{"bad address", Config{NodeID: 1, ClusterID: "c", ListenAddr: "127.0.0.1:-1", Handler: h}, "listen"},
	}
	for _, tt := range tests {
		tr, err := New(tt.cfg)
		if err == nil {
			tr.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.say) {
			t.Errorf("%s: New() = %v; want an error saying %q", tt.name, err, tt.say)
		}
	}
	n := startNode(t, 1, nil)
	if err := n.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	n.Send(2, []Message{{Group: 1, Msg: raftMsg(pb.MessageType_MsgApp, 1, 2, 0)}}) // dropped, no callback
	n.SetPeer(2, "127.0.0.1:1")                                                    // ignored
	if len(n.Stats()) != 0 {
		t.Errorf("SetPeer after Close added a peer")
	}
}

// A testCA issues certificates for one test, as auth's tests do.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// nodeTLS returns the TLS configuration of a node whose certificate ca
// issues, for 127.0.0.1, usable as server and client; it trusts only
// trusted and requires the other side's certificate.
func (ca *testCA) nodeTLS(t *testing.T, name string, trusted *testCA) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      trusted.pool,
		ClientCAs:    trusted.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

func TestMutualTLS(t *testing.T) {
	ca, other := newCA(t, "fila cluster CA"), newCA(t, "other CA")
	n1 := startNode(t, 1, func(c *Config) { c.TLS = ca.nodeTLS(t, "node1", ca) })
	n2 := startNode(t, 2, func(c *Config) { c.TLS = ca.nodeTLS(t, "node2", ca) })
	connect(t, n1, n2)
	sendSeq(n1, 2, 0, 50)
	sendSeq(n2, 1, 0, 50)
	waitFor(t, "messages both ways", func() bool { return len(n2.received(1)) == 50 && len(n1.received(2)) == 50 })
	checkSeq(t, n2.received(1), 1, 2, 0, 50)
	checkSeq(t, n1.received(2), 2, 1, 0, 50)

	// A node 3 with a certificate from another CA is refused by node 2.
	n3 := startNode(t, 3, func(c *Config) { c.TLS = other.nodeTLS(t, "node3", ca) })
	n2.SetPeer(3, n3.Addr().String())
	n3.SetPeer(2, n2.Addr().String())
	waitFor(t, "node 3 to refuse node 2's certificate", func() bool { return n3.log.has("tls handshake failed") })
	waitFor(t, "node 2 to give up a dial", func() bool { return n2.log.has("cannot reach peer") })
	if n2.Connected(3) || n3.Connected(2) {
		t.Errorf("a node with a certificate from another CA connected")
	}
	// So is a client without TLS, and one without a certificate.
	c := rawDial(t, n2, appendHello(nil, 1, "test"))
	if got, _ := io.ReadAll(c); bytes.Contains(got, []byte(helloMagic)) {
		t.Errorf("a plain TCP client got a hello from a TLS node")
	}
	cfg := &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1"}
	tc, err := tls.Dial("tcp", n2.Addr().String(), cfg)
	if err == nil {
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(waitLimit))
		tc.Write(appendHello(nil, 1, "test"))
		if _, _, err := readHello(tc); err == nil {
			t.Errorf("a TLS client without a certificate got a hello")
		}
	}
}

// TestImports keeps the package a leaf, as archlint's layers say, and
// more: besides the standard library it may import only raftpb and
// protobuf.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.Split(p, "/")[0], ".")
			if !std && p != "go.etcd.io/raft/v3/raftpb" && !strings.HasPrefix(p, "google.golang.org/protobuf/") {
				t.Errorf("%s imports %s; want only the standard library, raftpb and protobuf", name, p)
			}
		}
	}
}

func BenchmarkSendToHandler(b *testing.B) {
	const window, batch = 2048, 64 // messages in flight (under the queue's 4096), per Send
	var received atomic.Int64
	room := make(chan struct{}, window)
	n2 := startNode(b, 2, func(c *Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Handler = func(_ uint64, msgs []Message) {
			received.Add(int64(len(msgs)))
			for range msgs {
				<-room
			}
		}
	})
	n1 := startNode(b, 1, func(c *Config) { c.Logger = slog.New(slog.DiscardHandler) })
	connect(b, n1, n2)
	payload := bytes.Repeat([]byte{'x'}, 1024)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	msgs := make([]Message, 0, batch)
	for i := range b.N {
		room <- struct{}{}
		m := raftMsg(pb.MessageType_MsgApp, 1, 2, uint64(i))
		m.Entries = []*pb.Entry{{Term: proto.Uint64(1), Index: proto.Uint64(uint64(i) + 1), Data: payload}}
		msgs = append(msgs, Message{Group: uint64(i % 16), Msg: m})
		if len(msgs) == batch || i == b.N-1 {
			n1.Send(2, msgs)
			msgs = msgs[:0]
		}
	}
	waitFor(b, "every message", func() bool { return received.Load() == int64(b.N) })
	b.StopTimer()
	if d := n1.Stats()[2].MsgsDropped; d != 0 {
		b.Fatalf("%d messages dropped", d)
	}
}

// TestLargeSnapshotChunked: a snapshot larger than a frame goes in chunk
// frames and arrives whole, in order with the messages around it.
func TestLargeSnapshotChunked(t *testing.T) {
	n1, n2 := startNode(t, 1, nil), startNode(t, 2, nil)
	connect(t, n1, n2)
	m := raftMsg(pb.MessageType_MsgSnap, 2, 1, 0)
	data := make([]byte, MaxFrameSize+chunkSize/2)
	for i := range data {
		data[i] = byte(i * 7)
	}
	m.Snapshot = &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(5), Term: proto.Uint64(1)}}
	before, after := raftMsg(pb.MessageType_MsgApp, 2, 1, 4), raftMsg(pb.MessageType_MsgApp, 2, 1, 6)
	n2.Send(1, []Message{{Group: 6, Msg: before}, {Group: 6, Msg: m}, {Group: 6, Msg: after}})
	waitFor(t, "three messages at node 1", func() bool { return len(n1.received(2)) == 3 })
	got := n1.received(2)
	for i, want := range []*pb.Message{before, m, after} {
		if got[i].Group != 6 || !proto.Equal(got[i].Msg, want) {
			t.Fatalf("message %d: group %d, type %v, %d bytes of snapshot; want %v", i, got[i].Group, got[i].Msg.GetType(), len(got[i].Msg.GetSnapshot().GetData()), want.GetType())
		}
	}
	if st := n2.snapshotStatuses(); len(st) != 1 || st[0] != (snapStatus{1, 6, false}) {
		t.Errorf("SnapshotStatus = %+v; want one {1 6 false}", st)
	}
}
