package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A peer is one other node: its address, its connection, its outgoing
// queue, and its goroutines: a writer, a dialer when this node dials it,
// and a reader per connection.
type peer struct {
	t     *Transport
	id    uint64
	dials bool // this node has the lower ID: it dials
	log   *slog.Logger

	ctx    context.Context // done once the peer is removed
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: the queue has messages for the writer
	redial chan struct{} // cap 1: the address changed; the dialer skips its backoff

	mu     sync.Mutex
	addr   string
	conn   *conn // nil while down
	queue  []queued
	qbytes int  // entry bytes in queue
	burst  bool // Unreachable reported since the last write that succeeded
	// reader is closed when the reader of the latest connection returns;
	// the next connection's reader waits for it, so that Handler calls
	// for one peer never overlap.
	reader  chan struct{}
	removed bool

	// streamsIn counts the peer's incoming streams being received
	// (maxStreamsIn at most).
	streamsIn atomic.Int32

	n counters
}

type queued struct {
	group uint64
	msg   *pb.Message // nil once dropped by the writer
	size  int         // proto.Size(msg)
}

type counters struct {
	connections                   atomic.Uint64
	msgsSent, bytesSent           atomic.Uint64
	msgsReceived, bytesReceived   atomic.Uint64
	msgsDropped, bytesDropped     atomic.Uint64
	msgsDroppedIn, bytesDroppedIn atomic.Uint64

	streamsSent, streamBytesSent         atomic.Uint64
	streamsReceived, streamBytesReceived atomic.Uint64
}

// A conn is one connection with a peer, after the hellos.
type conn struct {
	nc   net.Conn      // what is read and written: TCP, or TLS over it
	raw  net.Conn      // the TCP connection under nc
	done chan struct{} // closed by shut
	once sync.Once
}

func newConn(nc net.Conn) *conn {
	return &conn{nc: nc, raw: rawConn(nc), done: make(chan struct{})}
}

// rawConn returns the TCP connection under nc.
func rawConn(nc net.Conn) net.Conn {
	if tc, ok := nc.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return nc
}

// shut closes the connection. It closes the TCP connection under TLS
// without a close_notify, which could wait on a peer that reads nothing.
func (c *conn) shut() {
	c.once.Do(func() {
		c.raw.Close()
		close(c.done)
	})
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	return &peer{
		t:      t,
		id:     id,
		dials:  t.cfg.NodeID < id,
		log:    t.log.With("peer", id),
		ctx:    ctx,
		cancel: cancel,
		wake:   make(chan struct{}, 1),
		redial: make(chan struct{}, 1),
		addr:   addr,
	}
}

// start starts the writer and, on the dialing side, the dialer. The
// caller holds no lock.
func (p *peer) start() {
	p.t.wg.Add(1)
	go p.write()
	if p.dials {
		p.t.wg.Add(1)
		go p.dial()
	}
}

// remove stops the peer's goroutines, closes its connection and drops its
// queue; report says whether queued snapshots are reported as failed.
func (p *peer) remove(report bool) {
	p.cancel()
	p.mu.Lock()
	p.removed = true
	c, batch := p.conn, p.queue
	p.conn, p.queue, p.qbytes = nil, nil, 0
	p.mu.Unlock()
	if c != nil {
		c.shut()
	}
	if report {
		p.drop(batch, false)
	}
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	changed := addr != p.addr
	p.addr = addr
	c := p.conn
	p.mu.Unlock()
	if !changed || !p.dials {
		return
	}
	p.log.Info("peer address changed; redialing", "addr", addr)
	if c != nil {
		p.detach(c, fmt.Errorf("address changed to %s", addr))
	}
	select {
	case p.redial <- struct{}{}:
	default:
	}
}

func (p *peer) connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn != nil
}

func (p *peer) stats() PeerStats {
	p.mu.Lock()
	addr, up := p.addr, p.conn != nil
	p.mu.Unlock()
	return PeerStats{
		Addr:           addr,
		Connected:      up,
		Connections:    p.n.connections.Load(),
		MsgsSent:       p.n.msgsSent.Load(),
		BytesSent:      p.n.bytesSent.Load(),
		MsgsReceived:   p.n.msgsReceived.Load(),
		BytesReceived:  p.n.bytesReceived.Load(),
		MsgsDropped:    p.n.msgsDropped.Load(),
		BytesDropped:   p.n.bytesDropped.Load(),
		MsgsDroppedIn:  p.n.msgsDroppedIn.Load(),
		BytesDroppedIn: p.n.bytesDroppedIn.Load(),

		StreamsSent:         p.n.streamsSent.Load(),
		StreamBytesSent:     p.n.streamBytesSent.Load(),
		StreamsReceived:     p.n.streamsReceived.Load(),
		StreamBytesReceived: p.n.streamBytesReceived.Load(),
	}
}

// send queues msgs, or drops those that cannot be queued. It never blocks
// on I/O.
func (p *peer) send(msgs []Message) {
	isolated := p.t.isIsolated(p.id)
	var failedSnaps []uint64 // groups
	var dropped, droppedBytes, tooLarge int
	anyQueued := false
	p.mu.Lock()
	up := p.conn != nil && !isolated
	for _, m := range msgs {
		if m.Msg == nil {
			continue
		}
		size := proto.Size(m.Msg)
		n := entryLen(m.Group, size)
		// A message larger than the queue's bound (a snapshot, which
		// raft sends one at a time per follower and group) goes into a
		// queue not yet full, and counts for nothing against it: the
		// heartbeats and appends sent with it must get through too.
		large := n > maxQueueBytes
		full := large && p.qbytes >= maxQueueBytes || !large && p.qbytes+n > maxQueueBytes
		if !up || len(p.queue) >= maxQueueMsgs || full || size > MaxMessageSize {
			dropped++
			droppedBytes += n
			if size > MaxMessageSize {
				tooLarge++
			}
			if m.Msg.GetType() == pb.MessageType_MsgSnap {
				failedSnaps = append(failedSnaps, m.Group)
			}
			continue
		}
		p.queue = append(p.queue, queued{group: m.Group, msg: m.Msg, size: size})
		if !large {
			p.qbytes += n
		}
		anyQueued = true
	}
	report := dropped > 0 && !p.burst
	if report {
		p.burst = true
	}
	p.mu.Unlock()

	if anyQueued {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	if dropped == 0 {
		return
	}
	p.n.msgsDropped.Add(uint64(dropped))
	p.n.bytesDropped.Add(uint64(droppedBytes))
	for _, g := range failedSnaps {
		p.t.events.snapshot(p.id, g, true)
	}
	if report {
		p.t.events.unreachable(p.id)
	}
	if tooLarge > 0 {
		p.log.Error("dropping messages too large to send", "msgs", tooLarge, "max_message", MaxMessageSize)
	}
}

// drop counts the messages of batch not yet dropped as dropped, reports
// its snapshots as failed and, if unreachable and no drop did since the
// last successful write, the peer as unreachable.
func (p *peer) drop(batch []queued, unreachable bool) {
	var msgs, bytes int
	for _, q := range batch {
		if q.msg == nil {
			continue
		}
		msgs++
		bytes += entryLen(q.group, q.size)
		if q.msg.GetType() == pb.MessageType_MsgSnap {
			p.t.events.snapshot(p.id, q.group, true)
		}
	}
	if msgs == 0 {
		return
	}
	p.n.msgsDropped.Add(uint64(msgs))
	p.n.bytesDropped.Add(uint64(bytes))
	if !unreachable {
		return
	}
	p.mu.Lock()
	report := !p.burst
	p.burst = true
	p.mu.Unlock()
	if report {
		p.t.events.unreachable(p.id)
	}
}

// write is the peer's writer goroutine: it takes everything queued and
// writes it with one write, until the peer is removed.
func (p *peer) write() {
	defer p.t.wg.Done()
	var spare []queued
	var buf []byte
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		batch, c := p.queue, p.conn
		p.queue, p.qbytes = spare[:0], 0
		p.mu.Unlock()
		switch {
		case len(batch) == 0:
		case c == nil || p.t.isIsolated(p.id):
			p.drop(batch, true)
		default:
			buf = p.writeBatch(c, buf[:0], batch)
		}
		clear(batch) // let the messages go
		spare = batch[:0]
	}
}

// writeBatch writes batch in order: runs of messages that fit in frames
// with one write each (writeFrames), a larger one in chunk frames
// (writeChunked). After a failed write the rest of the batch drops. It
// returns buf for reuse.
func (p *peer) writeBatch(c *conn, buf []byte, batch []queued) []byte {
	for len(batch) > 0 {
		i := 0
		for i < len(batch) && entryLen(batch[i].group, batch[i].size) <= MaxFrameSize {
			i++
		}
		ok := true
		if i > 0 {
			buf, ok = p.writeFrames(c, buf[:0], batch[:i])
		} else {
			i = 1
			ok = p.writeChunked(c, &batch[0])
		}
		if !ok {
			p.drop(batch[i:], false)
			return buf
		}
		batch = batch[i:]
	}
	return buf
}

// writeChunked writes q, whose entry is too large for a frame, as chunk
// frames, with one write each, then counts it and reports it if it is a
// snapshot; a message that does not encode drops. It returns false, the
// connection detached and q dropped, when a write fails.
func (p *peer) writeChunked(c *conn, q *queued) bool {
	entry, err := appendEntry(nil, q.group, q.msg, q.size)
	if err != nil {
		p.log.Error("dropping a message", "group", q.group, "type", q.msg.GetType().String(), "err", err)
		p.drop([]queued{*q}, true)
		return true
	}
	hdr := make([]byte, 0, frameHeaderLen+2*binary.MaxVarintLen64)
	for off := 0; off < len(entry); off += chunkSize {
		part := entry[off:min(off+chunkSize, len(entry))]
		hdr = hdr[:frameHeaderLen]
		hdr = binary.AppendUvarint(hdr, chunkGroup)
		hdr = binary.AppendUvarint(hdr, uint64(len(part)))
		binary.BigEndian.PutUint32(hdr, uint32(len(hdr)-frameHeaderLen+len(part)))
		c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		bufs := net.Buffers{hdr, part}
		if _, err := bufs.WriteTo(c.nc); err != nil {
			p.detach(c, fmt.Errorf("write: %w", err))
			p.drop([]queued{*q}, true)
			return false
		}
	}
	p.n.msgsSent.Add(1)
	p.n.bytesSent.Add(uint64(len(entry)))
	if q.msg.GetType() == pb.MessageType_MsgSnap {
		p.t.events.snapshot(p.id, q.group, false)
	}
	p.mu.Lock()
	p.burst = false
	p.mu.Unlock()
	return true
}

// writeFrames encodes batch into frames in buf and writes them with one
// write, then counts them and reports the snapshots written; a message that
// does not encode, or a failed write, drops. It returns buf for reuse, and
// false when the write failed.
func (p *peer) writeFrames(c *conn, buf []byte, batch []queued) ([]byte, bool) {
	hdr, body, entries := -1, 0, 0
	var bad []queued
	for i := range batch {
		q := &batch[i]
		n := entryLen(q.group, q.size)
		if hdr < 0 || body+n > MaxFrameSize || entries == maxFrameEntries {
			if hdr >= 0 {
				binary.BigEndian.PutUint32(buf[hdr:], uint32(body))
			}
			hdr, body, entries = len(buf), 0, 0
			buf = append(buf, 0, 0, 0, 0)
		}
		start := len(buf)
		var err error
		if buf, err = appendEntry(buf, q.group, q.msg, q.size); err != nil {
			p.log.Error("dropping a message", "group", q.group, "type", q.msg.GetType().String(), "err", err)
			buf = buf[:start]
			bad = append(bad, *q)
			q.msg = nil
			continue
		}
		body += n
		entries++
	}
	if entries == 0 {
		buf = buf[:hdr] // the last frame started holds nothing
	} else {
		binary.BigEndian.PutUint32(buf[hdr:], uint32(body))
	}
	if len(bad) > 0 {
		p.drop(bad, true)
	}
	if len(buf) == 0 {
		return buf, true
	}
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(buf); err != nil {
		p.detach(c, fmt.Errorf("write: %w", err))
		p.drop(batch, true)
		return shrink(buf), false
	}
	var msgs, bytes int
	for _, q := range batch {
		if q.msg == nil {
			continue
		}
		msgs++
		bytes += entryLen(q.group, q.size)
		if q.msg.GetType() == pb.MessageType_MsgSnap {
			p.t.events.snapshot(p.id, q.group, false)
		}
	}
	p.n.msgsSent.Add(uint64(msgs))
	p.n.bytesSent.Add(uint64(bytes))
	p.mu.Lock()
	p.burst = false
	p.mu.Unlock()
	return shrink(buf), true
}

// shrink lets go of a buffer grown past keepBuffer.
func shrink(buf []byte) []byte {
	if cap(buf) > keepBuffer {
		return nil
	}
	return buf
}

// dial is the dialer goroutine of a peer with a higher ID: it keeps one
// connection up, redialing with backoff, until the peer is removed.
func (p *peer) dial() {
	defer p.t.wg.Done()
	backoff := minBackoff
	failing := false
	for {
		p.mu.Lock()
		addr := p.addr
		p.mu.Unlock()
		nc, err := p.t.dial(p.ctx, p.id, addr, helloMagic)
		switch {
		case p.ctx.Err() != nil:
			if nc != nil {
				nc.Close()
			}
			return
		case err != nil:
			// The first failure in a row is news; the rest are not.
			level := slog.LevelInfo
			if failing {
				level = slog.LevelDebug
			}
			p.log.Log(p.ctx, level, "cannot reach peer; redialing", "addr", addr, "err", err, "backoff", backoff)
			failing = true
		default:
			failing = false
			backoff = minBackoff
			c := p.attach(nc)
			if c == nil {
				return
			}
			select {
			case <-c.done:
			case <-p.ctx.Done():
				return
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-p.redial:
		case <-time.After(backoff):
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// attach makes nc the peer's connection, closing the one it replaces, and
// starts its reader. It returns nil, having closed nc, if the peer was
// removed.
func (p *peer) attach(nc net.Conn) *conn {
	c := newConn(nc)
	done := make(chan struct{})
	p.mu.Lock()
	if p.removed {
		p.mu.Unlock()
		c.shut()
		return nil
	}
	old, prev := p.conn, p.reader
	p.conn, p.reader = c, done
	p.mu.Unlock()
	if old != nil {
		old.shut()
	}
	p.n.connections.Add(1)
	p.log.Info("peer connected", "remote", nc.RemoteAddr().String(), "dialed", p.dials)
	p.t.wg.Add(1)
	go p.read(c, prev, done)
	return c
}

// detach closes c and, if it is the peer's connection, marks the peer
// down.
func (p *peer) detach(c *conn, err error) {
	c.shut()
	p.mu.Lock()
	current := p.conn == c
	if current {
		p.conn = nil
	}
	p.mu.Unlock()
	if current && p.ctx.Err() == nil {
		p.log.Info("peer disconnected", "err", err)
		if down := p.t.cfg.Down; down != nil {
			down(p.id)
		}
	}
}

// read is the reader goroutine of connection c. It waits for the reader of
// the connection before it (prev) to return, reads until c fails, and
// closes done.
func (p *peer) read(c *conn, prev, done chan struct{}) {
	defer p.t.wg.Done()
	defer close(done)
	if prev != nil {
		<-prev
	}
	err := p.readFrames(c)
	p.detach(c, err)
}

// readFrames reads frames from c and hands their batches to the Handler
// until a read fails or a frame is bad.
func (p *peer) readFrames(c *conn) error {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var hdr [frameHeaderLen]byte
	var buf []byte
	var big reassembly
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > MaxFrameSize {
			return fmt.Errorf("frame of %d bytes, over the limit of %d", n, MaxFrameSize)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		body := buf[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if chunk, ok, err := chunkEntry(body); err != nil {
			return err
		} else if ok {
			// add copies the chunk, so buf is free for the next frame.
			if body, err = big.add(chunk); err != nil {
				return err
			}
			if body == nil {
				continue // the entry is not whole yet
			}
		}
		msgs, err := decodeBatch(body, nil)
		if err != nil {
			return err
		}
		if p.t.isIsolated(p.id) {
			p.n.msgsDroppedIn.Add(uint64(len(msgs)))
			p.n.bytesDroppedIn.Add(uint64(n))
		} else if len(msgs) > 0 {
			p.n.msgsReceived.Add(uint64(len(msgs)))
			p.n.bytesReceived.Add(uint64(n))
			p.t.cfg.Handler(p.id, msgs)
		}
		buf = shrink(buf)
	}
}
