package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Message is one Raft message of one group.
type Message struct {
	// Group is the Raft group's ID; the transport does not interpret it.
	Group uint64
	Msg   *pb.Message
}

// Config configures a Transport.
type Config struct {
	// NodeID is this node's ID; it must not be 0.
	NodeID uint64
	// ClusterID names the cluster; both ends of a connection must have the
	// same. It must be 1 to 255 bytes.
	ClusterID string
	// ListenAddr is the host:port peers connect to; ":0" or
	// "127.0.0.1:0" picks a free port (see Transport.Addr).
	ListenAddr string
	// Peers maps the ID of every other node to its address (host:port). An
	// entry for NodeID itself is ignored. Only the addresses of peers with
	// a higher ID are dialed for the shared connection; every address is
	// dialed by SendStream, and kept for Stats.
	Peers map[uint64]string
	// TLS, when not nil, makes every connection TLS: it is the server's
	// configuration on accepted connections and the client's on dialed
	// ones, so it holds this node's certificate (Certificates), the CAs
	// that sign the other nodes' (RootCAs, and ClientCAs with ClientAuth
	// set to tls.RequireAndVerifyClientCert for mutual TLS). When its
	// ServerName is empty, the dialer verifies the peer's certificate
	// against the host part of the peer's address.
	TLS *tls.Config
	// Handler receives each batch read from a peer, on that connection's
	// reader goroutine, in the order sent on that connection. Calls for
	// one peer never overlap; calls for different peers may. It must not
	// block for long: the connection reads nothing meanwhile. msgs is the
	// handler's to keep. Required.
	Handler func(from uint64, msgs []Message)
	// Unreachable, if not nil, is called when messages to a peer are
	// dropped (no connection, queue full, isolated, too large, write
	// failed, not a peer), once per burst of drops: not again until a
	// write to the peer succeeds.
	Unreachable func(to uint64)
	// SnapshotStatus, if not nil, is called once for every MsgSnap passed
	// to Send: failed when it was dropped, not failed once it was written
	// to the connection. Snapshots still queued at Close get no call.
	//
	// Unreachable and SnapshotStatus run one call at a time on one
	// goroutine of the transport, never inside Send. They must not block
	// for long: the calls due wait meanwhile, and Close waits for them.
	SnapshotStatus func(to, group uint64, failed bool)
	// Down, if not nil, is called when the connection to a peer fails
	// (the peer's process ended, or the network between them failed),
	// not when Close or a replaced connection closes it. It runs on the
	// connection's reader goroutine and must not block.
	Down func(id uint64)
	// Stream, if not nil, receives the streamed messages of peers
	// (SendStream): m, and its data, read from data until io.EOF. It runs
	// on the stream connection's own goroutine and may block as long as it
	// reads. data returns io.EOF only after the whole data has arrived and
	// matched its checksum; any other error (connection lost, checksum
	// mismatch, frame too large, peer isolated, RemovePeer, Close) means
	// the data is incomplete. Returning nil accepts the stream: the
	// sender's SendStream returns nil. Returning an error refuses it: the
	// sender's SendStream returns an error carrying its text (its first
	// 4096 bytes). A nil Stream refuses every stream. The handler must not
	// keep data after returning, and must not call Close. The sender waits
	// for the answer for a minute after the end of the data: work that
	// takes longer after io.EOF loses the answer (SendStream fails).
	Stream func(from uint64, m Message, data io.Reader) error
	// Logger receives connection events and refusals; nil means
	// slog.Default().
	Logger *slog.Logger
}

// PeerStats are a peer's counters since it was added (New or SetPeer).
// Messages are counted one by one, and bytes as frame entries: the group
// and size uvarints and the message's protobuf encoding, without the
// frames' 4-byte length prefixes or TLS.
type PeerStats struct {
	// Addr is the peer's address as last set.
	Addr string
	// Connected says whether a connection is up; messages still drop
	// while the peer is isolated.
	Connected bool
	// Connections counts the connections established with the peer,
	// whichever side dialed: 1 for a pair that never broke.
	Connections uint64
	// MsgsSent and BytesSent count what was written to the connection.
	MsgsSent, BytesSent uint64
	// MsgsReceived and BytesReceived count what was read from the peer and
	// passed to Handler.
	MsgsReceived, BytesReceived uint64
	// MsgsDropped and BytesDropped count messages to the peer that were
	// never written: no connection, queue full, isolated, too large for a
	// frame, or the write failed.
	MsgsDropped, BytesDropped uint64
	// MsgsDroppedIn and BytesDroppedIn count messages read from the peer
	// and discarded because it was isolated.
	MsgsDroppedIn, BytesDroppedIn uint64
	// StreamsSent and StreamBytesSent count the streams to the peer
	// (SendStream) that it accepted, and their data bytes, without the
	// header, the frames' prefixes or the end frame.
	StreamsSent, StreamBytesSent uint64
	// StreamsReceived and StreamBytesReceived count the streams from the
	// peer that Config.Stream accepted, and the data bytes it read of them.
	StreamsReceived, StreamBytesReceived uint64
}

const (
	// maxQueueMsgs and maxQueueBytes bound a peer's outgoing queue; Send
	// drops what does not fit. A message larger than maxQueueBytes (a
	// snapshot) still goes into a queue holding less than that, and
	// counts for nothing against it.
	maxQueueMsgs  = 4096
	maxQueueBytes = 64 << 20

	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second

	dialTimeout      = 5 * time.Second
	handshakeTimeout = 10 * time.Second
	// writeTimeout bounds one write: a peer that reads nothing for this
	// long loses its connection. 64 MiB in 10 s is 6.4 MB/s.
	writeTimeout = 10 * time.Second

	// keepBuffer is the largest read or write buffer kept for the next
	// frame; a larger one, grown for a snapshot, is let go.
	keepBuffer = 4 << 20
)

// A Transport sends and receives the Raft messages of every group to and
// from the other nodes of a cluster. Its methods are safe for concurrent
// use.
type Transport struct {
	cfg  Config
	log  *slog.Logger
	ln   net.Listener
	stop chan struct{} // closed by Close

	mu        sync.RWMutex
	peers     map[uint64]*peer
	removed   map[uint64]bool       // by RemovePeer: their connections are refused as such
	accepting map[net.Conn]struct{} // accepted, in the handshake or carrying a stream
	closed    bool

	// isolated holds the isolated peers' IDs, replaced whole by Isolate
	// and Heal; nil when none is.
	isolated atomic.Pointer[map[uint64]bool]

	events events
	wg     sync.WaitGroup
}

// New validates cfg, listens on cfg.ListenAddr, and starts dialing every
// peer with an ID above cfg.NodeID at once. It returns an error if cfg is
// invalid (NodeID 0, a cluster ID empty or over 255 bytes, no Handler, a
// peer with ID 0) or the address cannot be listened on.
func New(cfg Config) (*Transport, error) {
	switch {
	case cfg.NodeID == 0:
		return nil, errors.New("node ID must not be 0")
	case cfg.ClusterID == "" || len(cfg.ClusterID) > maxClusterID:
		return nil, fmt.Errorf("cluster ID must be 1 to %d bytes, not %d", maxClusterID, len(cfg.ClusterID))
	case cfg.Handler == nil:
		return nil, errors.New("no Handler")
	}
	if _, ok := cfg.Peers[0]; ok {
		return nil, errors.New("peer ID must not be 0")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("peer listener: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	t := &Transport{
		cfg:       cfg,
		log:       log.With("node", cfg.NodeID),
		ln:        ln,
		stop:      make(chan struct{}),
		peers:     map[uint64]*peer{},
		removed:   map[uint64]bool{},
		accepting: map[net.Conn]struct{}{},
		events:    events{wake: make(chan struct{}, 1)},
	}
	t.wg.Add(2)
	go t.accept()
	go t.notify()
	for id, addr := range cfg.Peers {
		t.SetPeer(id, addr)
	}
	if testFaults != nil {
		testFaults(t)
	}
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *Transport) Addr() net.Addr { return t.ln.Addr() }

// Send queues msgs for the peer to and returns at once; the messages and
// what they point to are the transport's after the call, and the caller
// must not change them. Messages that cannot be queued are dropped (see
// the package doc), and so are messages with a nil Msg. A peer that is
// not known is unreachable. Send after Close drops everything.
func (t *Transport) Send(to uint64, msgs []Message) {
	if len(msgs) == 0 {
		return
	}
	t.mu.RLock()
	p := t.peers[to]
	t.mu.RUnlock()
	if p == nil {
		t.dropUnknown(to, msgs)
		return
	}
	p.send(msgs)
}

// dropUnknown drops msgs to a node that is not a peer.
func (t *Transport) dropUnknown(to uint64, msgs []Message) {
	for _, m := range msgs {
		if m.Msg.GetType() == pb.MessageType_MsgSnap {
			t.events.snapshot(to, m.Group, true)
		}
	}
	t.events.unreachable(to)
	t.log.Debug("dropping messages to an unknown node", "to", to, "msgs", len(msgs))
}

// SetPeer adds the peer id at addr, or changes its address. A dialer
// (this node's ID is the lower) dials the new peer at once, and redials a
// known one whose address changed. SetPeer of this node's own ID, of ID 0,
// of a removed peer (RemovePeer) or after Close does nothing.
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == t.cfg.NodeID || id == 0 {
		return
	}
	t.mu.Lock()
	if t.closed || t.removed[id] {
		t.mu.Unlock()
		return
	}
	if p := t.peers[id]; p != nil {
		t.mu.Unlock()
		p.setAddr(addr)
		return
	}
	p := newPeer(t, id, addr)
	t.peers[id] = p
	t.mu.Unlock()
	p.start()
}

// RemovePeer forgets the peer id for good: it closes its connection,
// drops what is queued for it (reporting queued snapshots as failed), and
// refuses its connections from then on, logging that it was removed from
// the cluster; SetPeer of it does nothing.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.removed[id] = true
	t.mu.Unlock()
	if p != nil {
		p.remove(true)
	}
}

// Connected reports whether a connection to the peer id is up.
func (t *Transport) Connected(id uint64) bool {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	return p != nil && p.connected()
}

// Stats returns the counters of every current peer, by ID.
func (t *Transport) Stats() map[uint64]PeerStats {
	t.mu.RLock()
	peers := slices.Collect(maps.Values(t.peers))
	t.mu.RUnlock()
	out := make(map[uint64]PeerStats, len(peers))
	for _, p := range peers {
		out[p.id] = p.stats()
	}
	return out
}

// Isolate drops every message to and from the peers ids, in both
// directions, until Heal; their connections stay up, but their streams
// fail at the next frame and new ones at once. It adds to the peers
// already isolated, and may name peers not yet added.
func (t *Transport) Isolate(ids ...uint64) {
	t.mu.Lock()
	next := map[uint64]bool{}
	if cur := t.isolated.Load(); cur != nil {
		maps.Copy(next, *cur)
	}
	for _, id := range ids {
		next[id] = true
	}
	t.isolated.Store(&next)
	t.mu.Unlock()
	t.log.Info("isolating peers", "peers", ids)
}

// Heal ends the isolation of every peer.
func (t *Transport) Heal() {
	t.mu.Lock() // against an Isolate's read-modify-write
	t.isolated.Store(nil)
	t.mu.Unlock()
	t.log.Info("healing isolated peers")
}

func (t *Transport) isIsolated(id uint64) bool {
	m := t.isolated.Load()
	return m != nil && (*m)[id]
}

// Close closes the listener and every connection, drops what is queued,
// and returns once every goroutine of the transport has ended; no callback
// runs after it returns. It returns the listener's close error, if any.
// Calls after the first return nil.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[uint64]*peer{}
	accepting := slices.Collect(maps.Keys(t.accepting))
	t.mu.Unlock()

	err := t.ln.Close()
	for _, p := range peers {
		p.remove(false)
	}
	for _, c := range accepting {
		rawConn(c).Close() // no TLS close_notify: nothing waits on the peer
	}
	close(t.stop)
	t.wg.Wait()
	if err != nil {
		return fmt.Errorf("close the peer listener: %w", err)
	}
	return nil
}

// accept accepts connections until the listener closes.
func (t *Transport) accept() {
	defer t.wg.Done()
	backoff := minBackoff
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, as net/http does.
			t.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-t.stop:
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			nc.Close()
			return
		}
		t.accepting[nc] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.handshake(nc)
	}
}

// maxStreamsIn bounds the streams one peer may send at once: each holds a
// connection and a goroutine, and its handler's work (a snapshot's
// install). A stream past it is refused before the hello is answered, so
// its SendStream fails, and raft sends the snapshot again later.
const maxStreamsIn = 16

// handshake checks an accepted connection's hello, answers it, and hands
// the connection to its peer, or receives the stream it carries; or closes
// it, logging why.
func (t *Transport) handshake(nc net.Conn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		delete(t.accepting, nc)
		t.mu.Unlock()
	}()
	remote := nc.RemoteAddr().String()
	kind := "peer" // or "stream", once the hello says so
	refuse := func(reason string, attrs ...any) {
		nc.Close()
		t.log.Warn("refusing a "+kind+" connection", append([]any{"remote", remote, "reason", reason}, attrs...)...)
	}
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			refuse("tls handshake failed", "err", err)
			return
		}
	}
	magic, id, cluster, err := readAnyHello(nc)
	stream := magic == streamMagic
	if stream {
		kind = "stream"
	}
	switch {
	case errors.Is(err, errBadHello):
		refuse(err.Error())
		return
	case err != nil:
		nc.Close()
		t.log.Debug("peer connection closed in its hello", "remote", remote, "err", err)
		return
	case cluster != t.cfg.ClusterID:
		refuse("cluster ID mismatch", "cluster", cluster, "want", t.cfg.ClusterID, "peer", id)
		return
	}
	t.mu.RLock()
	p, removed := t.peers[id], t.removed[id]
	t.mu.RUnlock()
	if removed {
		refuse(fmt.Sprintf("node %d was removed from the cluster; node IDs are never reused (start it with an empty data directory under a new node ID)", id), "peer", id)
		return
	}
	if p == nil {
		refuse("unknown node", "peer", id)
		return
	}
	if id > t.cfg.NodeID && !stream {
		refuse(fmt.Sprintf("node %d dialed node %d; the lower ID dials", id, t.cfg.NodeID), "peer", id)
		return
	}
	if stream {
		defer p.streamsIn.Add(-1)
		if p.streamsIn.Add(1) > maxStreamsIn {
			refuse(fmt.Sprintf("node %d has %d streams open already", id, maxStreamsIn), "peer", id)
			return
		}
	}
	if _, err := nc.Write(appendHelloOf(nil, magic, t.cfg.NodeID, t.cfg.ClusterID)); err != nil {
		nc.Close()
		t.log.Debug("peer connection closed in its hello", "remote", remote, "peer", id, "err", err)
		return
	}
	nc.SetDeadline(time.Time{})
	if stream {
		t.receiveStream(p, nc)
		return
	}
	p.attach(nc)
}

// dial connects to the peer id at addr and exchanges hellos opening with
// magic (helloMagic, or streamMagic for a stream connection); ctx ends the
// attempt early.
func (t *Transport) dial(ctx context.Context, id uint64, addr, magic string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if t.cfg.TLS != nil {
		cfg := t.cfg.TLS
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				nc.Close()
				return nil, err
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		nc = tc
	}
	if _, err := nc.Write(appendHelloOf(nil, magic, t.cfg.NodeID, t.cfg.ClusterID)); err != nil {
		nc.Close()
		return nil, err
	}
	gotMagic, got, cluster, err := readAnyHello(nc)
	switch {
	case err != nil:
		// An acceptor that refuses us closes without a word: look at its log.
		err = fmt.Errorf("hello: %w", err)
	case gotMagic != magic:
		err = fmt.Errorf("hello: answered %q to %q", gotMagic, magic)
	case cluster != t.cfg.ClusterID:
		err = fmt.Errorf("cluster ID mismatch: %q, want %q", cluster, t.cfg.ClusterID)
	case got != id:
		err = fmt.Errorf("the node at %s is %d, not %d", addr, got, id)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// events holds the callbacks due, for the notify goroutine.
type events struct {
	wake chan struct{} // cap 1

	mu    sync.Mutex
	down  []uint64 // for Unreachable, distinct
	snaps []snapshotStatus
}

type snapshotStatus struct {
	to, group uint64
	failed    bool
}

func (e *events) unreachable(to uint64) {
	e.mu.Lock()
	if !slices.Contains(e.down, to) {
		e.down = append(e.down, to)
	}
	e.mu.Unlock()
	e.signal()
}

func (e *events) snapshot(to, group uint64, failed bool) {
	e.mu.Lock()
	e.snaps = append(e.snaps, snapshotStatus{to, group, failed})
	e.mu.Unlock()
	e.signal()
}

func (e *events) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// notify runs the callbacks, one at a time, until Close.
func (t *Transport) notify() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			return
		case <-t.events.wake:
		}
		e := &t.events
		e.mu.Lock()
		down, snaps := e.down, e.snaps
		e.down, e.snaps = nil, nil
		e.mu.Unlock()
		if f := t.cfg.SnapshotStatus; f != nil {
			for _, s := range snaps {
				f(s.to, s.group, s.failed)
			}
		}
		if f := t.cfg.Unreachable; f != nil {
			for _, id := range down {
				f(id)
			}
		}
	}
}
