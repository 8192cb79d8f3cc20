package peer

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Stream connections (package doc, "Streams"): one per SendStream, carrying
// one message and its data, cut into frames, to a peer's Config.Stream.

const (
	// streamChunk is the most data bytes one data frame carries (1 MiB);
	// the sender cuts the data there.
	streamChunk = 1 << 20
	// maxStreamReason is the longest reason a refusal carries, in bytes.
	maxStreamReason = 4096

	// The reply's status byte.
	streamAccepted = 0
	streamRefused  = 1
)

var (
	// streamIdleTimeout bounds every read of a stream's receiver from
	// its connection, after the header: a sender that sends nothing for
	// this long loses the stream. A var so that tests may lower it.
	streamIdleTimeout = 30 * time.Second
	// streamReplyTimeout bounds the sender's wait for the reply after the
	// end frame: the Stream handler's work after io.EOF. A var so that
	// tests may lower it.
	streamReplyTimeout = time.Minute
	// streamFlushAfter is how long the sender may hold data that does not
	// fill a frame yet: a Write that finds the last frame older writes
	// what is buffered, so that data written slowly (rate-limited) still
	// reaches the receiver within its streamIdleTimeout. A var so that
	// tests may set it to 0, a frame for every Write.
	streamFlushAfter = 5 * time.Second
)

// castagnoli is the CRC-32C table of the end frame's checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// errStreamProtocol is wrapped by the errors of bytes that break a
	// stream's layout: a frame or a reason over its bound, a header that
	// is not a message, a bad uvarint, a bad status. The connection closes
	// without a reply and the event is logged at Warn.
	errStreamProtocol = errors.New("stream protocol error")
	// errStreamCorrupt is wrapped by the error of an end frame whose
	// checksum or length does not match the data that came.
	errStreamCorrupt = errors.New("stream data corrupt")
	// errStreamIsolated is wrapped by the errors of a stream cut because
	// its peer is isolated (Isolate).
	errStreamIsolated = errors.New("peer isolated")
	// errTransportClosed is the error of SendStream after Close, or when
	// Close or RemovePeer aborts it.
	errTransportClosed = errors.New("transport closed or peer removed")
)

// SendStream sends m, and the data that data writes, to the peer to over a
// connection of its own, and returns once the peer's Config.Stream has
// accepted or refused them. Bulk data thus never delays the messages of
// the shared connection. Either node may stream to the other, whatever
// their IDs.
//
// data is called once, on the calling goroutine, with a writer that cuts
// what it is given into frames of up to 1 MiB (sending a frame not yet
// full when it has held data for 5 s); it must not keep the writer after
// returning, nor write from other goroutines. A nil data sends no data.
// An error from data aborts the stream (the connection closes; the
// receiver's reader fails) and SendStream returns that error. The
// writer's errors are those of the connection, of a peer isolated in the
// meantime, or of ctx done, Close or RemovePeer(to), which all abort the
// stream.
//
// SendStream returns the data bytes written to the connection, and nil
// once the peer accepted the stream. It returns an error carrying the
// peer's reason when its handler refused it; an error at once when m.Msg
// is nil, m's header (the group's uvarint and the message's encoding) is
// over MaxFrameSize, to is not a known peer, to is isolated, ctx is done
// or the transport is closed; and the I/O error when the connection fails,
// a frame's write takes more than 10 s, or the reply takes more than a
// minute. It calls neither Unreachable nor SnapshotStatus. Close waits for
// SendStreams in flight to return, so data must return once its writes
// fail.
func (t *Transport) SendStream(ctx context.Context, to uint64, m Message, data func(w io.Writer) error) (int64, error) {
	if m.Msg == nil {
		return 0, errors.New("stream of a nil message")
	}
	hdr, err := appendStreamHeader(nil, m)
	if err != nil {
		return 0, err
	}
	t.mu.RLock()
	closed, p := t.closed, t.peers[to]
	if !closed && p != nil {
		t.wg.Add(1) // Close waits for the stream
	}
	t.mu.RUnlock()
	switch {
	case closed:
		return 0, errTransportClosed
	case p == nil:
		return 0, fmt.Errorf("stream to node %d: not a peer", to)
	}
	defer t.wg.Done()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("stream to node %d: %w", to, err)
	}
	if t.isIsolated(to) {
		return 0, fmt.Errorf("stream to node %d: %w", to, errStreamIsolated)
	}

	// Close and RemovePeer cancel p.ctx; either, or the caller's ctx,
	// aborts the stream by closing its connection.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	cause := func(err error) error {
		switch {
		case p.ctx.Err() != nil:
			return errTransportClosed
		case ctx.Err() != nil:
			return fmt.Errorf("stream to node %d: %w", to, ctx.Err())
		}
		return err
	}

	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	nc, err := t.dial(sctx, to, addr, streamMagic)
	if err != nil {
		return 0, cause(fmt.Errorf("stream to node %d at %s: %w", to, addr, err))
	}
	raw := rawConn(nc)
	defer raw.Close() // no TLS close_notify: the reply is in, or nothing is due
	defer context.AfterFunc(sctx, func() { raw.Close() })()

	n, err := t.sendStream(p, nc, hdr, data)
	if err != nil {
		return n, cause(err)
	}
	p.n.streamsSent.Add(1)
	p.n.streamBytesSent.Add(uint64(n))
	p.log.Debug("sent a stream", "group", m.Group, "type", m.Msg.GetType().String(), "bytes", n)
	return n, nil
}

// sendStream writes a stream's header (hdr, a whole frame), data and end
// frame to nc, and reads the reply. It returns the data bytes written, and
// an error unless the peer accepted.
func (t *Transport) sendStream(p *peer, nc net.Conn, hdr []byte, data func(w io.Writer) error) (int64, error) {
	before := func() error {
		if t.isIsolated(p.id) {
			return fmt.Errorf("stream to node %d: %w", p.id, errStreamIsolated)
		}
		return nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	if err := before(); err != nil {
		return 0, err
	}
	if _, err := nc.Write(hdr); err != nil {
		return 0, fmt.Errorf("stream to node %d: write: %w", p.id, err)
	}
	w := newStreamWriter(nc, before)
	var err error
	if data != nil {
		err = data(w)
	}
	if err == nil {
		err = w.end()
	}
	if err != nil {
		// A receiver that refused before reading everything closes the
		// connection: our write fails, but its reason may be in.
		if w.err != nil && !errors.Is(w.err, errStreamIsolated) && !timedOut(w.err) {
			if refused, reason, rerr := t.readStreamReply(p, nc); rerr == nil && refused {
				return w.n, refusal(p.id, reason)
			}
		}
		return w.n, err
	}
	if t.isIsolated(p.id) {
		return w.n, fmt.Errorf("stream to node %d: %w", p.id, errStreamIsolated)
	}
	refused, reason, err := t.readStreamReply(p, nc)
	switch {
	case err != nil:
		return w.n, err
	case refused:
		return w.n, refusal(p.id, reason)
	}
	return w.n, nil
}

// refusal is SendStream's error when node id refused the stream for
// reason.
func refusal(id uint64, reason string) error {
	return fmt.Errorf("node %d refused the stream: %s", id, reason)
}

// timedOut says whether err is a deadline's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readStreamReply reads the reply to a stream from nc, waiting for it up
// to streamReplyTimeout, and logs a malformed one at Warn.
func (t *Transport) readStreamReply(p *peer, nc net.Conn) (refused bool, reason string, err error) {
	nc.SetReadDeadline(time.Now().Add(streamReplyTimeout))
	refused, reason, err = decodeStreamReply(bufio.NewReaderSize(nc, 64))
	if errors.Is(err, errStreamProtocol) {
		p.log.Warn("closing a stream connection", "err", err)
	}
	if err != nil {
		return false, "", fmt.Errorf("stream to node %d: reply: %w", p.id, err)
	}
	return refused, reason, nil
}

// appendStreamHeader appends the header frame of m to b: length, group
// uvarint, message. It fails, marshaling nothing, when the frame's body
// would exceed MaxFrameSize, or when m.Msg does not marshal.
func appendStreamHeader(b []byte, m Message) ([]byte, error) {
	if n := uvarintLen(m.Group) + proto.Size(m.Msg); n > MaxFrameSize {
		return nil, fmt.Errorf("stream header of %d bytes, over the limit of %d", n, MaxFrameSize)
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.AppendUvarint(b, m.Group)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m.Msg)
	if err != nil {
		return nil, fmt.Errorf("marshal stream message: %w", err)
	}
	n := len(b) - start - frameHeaderLen
	if n > MaxFrameSize { // changed while marshaled
		return nil, fmt.Errorf("stream header of %d bytes, over the limit of %d", n, MaxFrameSize)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// readStreamHeader reads a stream's header frame from r. Its error wraps
// errStreamProtocol for a header over MaxFrameSize or one that is not a
// group and a message, or is r's (io.ErrUnexpectedEOF for a header cut
// short, io.EOF for none).
func readStreamHeader(r *bufio.Reader) (Message, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Message{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return Message{}, fmt.Errorf("%w: header of %d bytes, over the limit of %d", errStreamProtocol, n, MaxFrameSize)
	}
	// Grown as the bytes come, not allocated whole on the sender's word.
	body, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return Message{}, err
	}
	if len(body) < int(n) {
		return Message{}, io.ErrUnexpectedEOF
	}
	group, g := binary.Uvarint(body)
	if g <= 0 {
		return Message{}, fmt.Errorf("%w: header: bad group uvarint", errStreamProtocol)
	}
	msg := new(pb.Message)
	if err := proto.Unmarshal(body[g:], msg); err != nil {
		return Message{}, fmt.Errorf("%w: header (group %d): %w", errStreamProtocol, group, err)
	}
	return Message{Group: group, Msg: msg}, nil
}

// A streamWriter cuts the data written to it into data frames of up to
// streamChunk bytes, keeping their CRC-32C and length for the end frame.
// It writes a frame when streamChunk bytes are buffered, or at the end of
// a Write when the last frame is streamFlushAfter old. Its errors are
// sticky: after a failed write every call returns the same error.
type streamWriter struct {
	w io.Writer
	// before runs before each frame's write (a write deadline, a check of
	// the peer's isolation); its error fails the write. nil for none.
	before func() error
	buf    []byte    // the frame: length prefix, then up to streamChunk bytes
	crc    uint32    // of the data written
	n      int64     // data bytes written
	last   time.Time // when the last frame was written, or the writer made
	err    error
}

// newStreamWriter returns a writer of data frames to w, with a 1 MiB
// buffer; before is its before hook, nil for none.
func newStreamWriter(w io.Writer, before func() error) *streamWriter {
	return &streamWriter{w: w, before: before, buf: make([]byte, frameHeaderLen, frameHeaderLen+streamChunk), last: time.Now()}
}

// Write buffers p, writing a data frame each time streamChunk bytes are
// buffered, and what is left when the last frame is streamFlushAfter
// old. It returns the bytes of p taken, len(p) unless it fails.
func (s *streamWriter) Write(p []byte) (int, error) {
	taken := 0
	for len(p) > 0 && s.err == nil {
		k := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
		taken += k
		if len(s.buf) == cap(s.buf) {
			s.flush()
		}
	}
	if len(s.buf) > frameHeaderLen && time.Since(s.last) >= streamFlushAfter {
		s.flush()
	}
	return taken, s.err
}

// flush writes what is buffered as a data frame, if anything is.
func (s *streamWriter) flush() {
	body := s.buf[frameHeaderLen:]
	if len(body) == 0 || s.err != nil {
		return
	}
	if s.before != nil {
		if s.err = s.before(); s.err != nil {
			return
		}
	}
	binary.BigEndian.PutUint32(s.buf, uint32(len(body)))
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = fmt.Errorf("stream: write: %w", err)
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, body)
	s.n += int64(len(body))
	s.buf = s.buf[:frameHeaderLen]
	s.last = time.Now()
}

// end writes what is buffered, then the end frame.
func (s *streamWriter) end() error {
	s.flush()
	if s.err != nil {
		return s.err
	}
	if s.before != nil {
		if s.err = s.before(); s.err != nil {
			return s.err
		}
	}
	b := appendStreamEnd(s.buf[:0], s.crc, s.n)
	if _, err := s.w.Write(b); err != nil {
		s.err = fmt.Errorf("stream: write: %w", err)
		return s.err
	}
	s.buf = nil
	s.err = errors.New("stream: write after the end")
	return nil
}

// appendStreamEnd appends the end frame of data whose CRC-32C is crc and
// length n to b.
func appendStreamEnd(b []byte, crc uint32, n int64) []byte {
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, crc)
	return binary.AppendUvarint(b, uint64(n))
}

// A streamReader reads a stream's data from its data frames, after the
// header, until the end frame, which it checks. It returns io.EOF only
// once the end frame's checksum and length matched the data; its other
// errors are sticky, and wrap errStreamProtocol (a data frame over
// streamChunk, a bad length uvarint), errStreamCorrupt (a checksum or
// length that does not match), or the error of r or before
// (io.ErrUnexpectedEOF for a stream cut short).
type streamReader struct {
	r *bufio.Reader
	// before runs before each frame is read (a check of the peer's
	// isolation); its error fails the read. nil for none.
	before func() error
	left   int    // bytes left of the current data frame
	crc    uint32 // of the data read
	n      int64  // data bytes read
	err    error
}

// Read reads data into p, from one data frame: straight from r, without
// another copy when r's buffer is empty and p is larger.
func (s *streamReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for s.left == 0 {
		if err := s.next(); err != nil {
			s.err = err
			return 0, err
		}
	}
	p = p[:min(len(p), s.left)]
	n, err := s.r.Read(p)
	s.crc = crc32.Update(s.crc, castagnoli, p[:n])
	s.left -= n
	s.n += int64(n)
	if err != nil {
		s.err = fmt.Errorf("stream: read: %w", noEOF(err))
		return n, s.err
	}
	return n, nil
}

// next reads the next frame's length and, for the end frame, the rest of
// it; it returns io.EOF after an end frame that matched.
func (s *streamReader) next() error {
	if s.before != nil {
		if err := s.before(); err != nil {
			return err
		}
	}
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return fmt.Errorf("stream: read: %w", noEOF(err))
	}
	switch n := binary.BigEndian.Uint32(hdr[:]); {
	case n > streamChunk:
		return fmt.Errorf("%w: data frame of %d bytes, over the limit of %d", errStreamProtocol, n, streamChunk)
	case n > 0:
		s.left = int(n)
		return nil
	}
	var sum [4]byte
	if _, err := io.ReadFull(s.r, sum[:]); err != nil {
		return fmt.Errorf("stream: read: %w", noEOF(err))
	}
	total, err := readUvarint(s.r)
	if err != nil {
		return err
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != s.crc {
		return fmt.Errorf("%w: checksum %08x, want %08x", errStreamCorrupt, s.crc, got)
	}
	if total != uint64(s.n) {
		return fmt.Errorf("%w: %d bytes, the sender wrote %d", errStreamCorrupt, s.n, total)
	}
	return io.EOF
}

// readUvarint reads a uvarint in its shortest encoding from r. Its error
// wraps errStreamProtocol for a longer encoding or one over 64 bits, or
// is r's (io.ErrUnexpectedEOF for none).
func readUvarint(r io.ByteReader) (uint64, error) {
	var b [binary.MaxVarintLen64]byte
	for i := range b {
		c, err := r.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("stream: read: %w", noEOF(err))
		}
		b[i] = c
		if c < 0x80 {
			v, n := binary.Uvarint(b[:i+1])
			if n <= 0 || uvarintLen(v) != n {
				return 0, fmt.Errorf("%w: bad uvarint %x", errStreamProtocol, b[:i+1])
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: bad uvarint %x", errStreamProtocol, b)
}

// noEOF turns io.EOF, the end of a connection where more was due, into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendStreamReply appends the reply to a stream to b: accepted when err
// is nil, else refused with the first maxStreamReason bytes of its text.
func appendStreamReply(b []byte, err error) []byte {
	if err == nil {
		return append(b, streamAccepted, 0)
	}
	reason := err.Error()
	reason = reason[:min(len(reason), maxStreamReason)]
	b = append(b, streamRefused)
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

// decodeStreamReply reads a stream's reply from r. Its error wraps
// errStreamProtocol for a bad status, a bad reason length or one over
// maxStreamReason, or is r's (io.ErrUnexpectedEOF when the connection
// closed before a whole reply).
func decodeStreamReply(r *bufio.Reader) (refused bool, reason string, err error) {
	status, err := r.ReadByte()
	if err != nil {
		return false, "", noEOF(err)
	}
	if status != streamAccepted && status != streamRefused {
		return false, "", fmt.Errorf("%w: reply status %d", errStreamProtocol, status)
	}
	n, err := readUvarint(r)
	if err != nil {
		return false, "", err
	}
	if n > maxStreamReason {
		return false, "", fmt.Errorf("%w: reason of %d bytes, over the limit of %d", errStreamProtocol, n, maxStreamReason)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return false, "", noEOF(err)
	}
	return status == streamRefused, string(b), nil
}

// idleReader reads from nc, each read within idle of its start when idle
// is not 0: a deadline on silence, not on the whole stream.
type idleReader struct {
	nc   net.Conn
	idle time.Duration
}

// Read reads from nc, after setting its read deadline idle ahead.
func (r *idleReader) Read(p []byte) (int, error) {
	if r.idle > 0 {
		r.nc.SetReadDeadline(time.Now().Add(r.idle))
	}
	return r.nc.Read(p)
}

// receiveStream receives the stream on nc, an accepted connection from p
// after the hellos: it reads the header within handshakeTimeout, hands
// the message and a reader of the data to Config.Stream, writes the reply
// and closes nc. A protocol error, the peer's isolation, RemovePeer or
// Close close nc without a reply.
func (t *Transport) receiveStream(p *peer, nc net.Conn) {
	raw := rawConn(nc)
	defer raw.Close() // no TLS close_notify, which could wait on the peer
	defer context.AfterFunc(p.ctx, func() { raw.Close() })()
	log := p.log.With("remote", nc.RemoteAddr().String())

	ir := &idleReader{nc: nc}
	r := bufio.NewReaderSize(ir, 64<<10)
	nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	m, err := readStreamHeader(r)
	if err != nil {
		level := slog.LevelDebug
		if errors.Is(err, errStreamProtocol) {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "closing a stream connection", "err", err)
		return
	}
	ir.idle = streamIdleTimeout
	data := &streamReader{r: r, before: func() error {
		if t.isIsolated(p.id) {
			return fmt.Errorf("stream from node %d: %w", p.id, errStreamIsolated)
		}
		return nil
	}}
	log = log.With("group", m.Group, "type", m.Msg.GetType().String())
	var herr error
	if h := t.cfg.Stream; h != nil {
		herr = h(p.id, m, data)
	} else {
		herr = fmt.Errorf("node %d takes no streams", t.cfg.NodeID)
	}
	switch {
	case errors.Is(data.err, errStreamProtocol):
		log.Warn("closing a stream connection", "err", data.err)
		return
	case errors.Is(data.err, errStreamCorrupt):
		log.Warn("stream data corrupt", "err", data.err)
	case p.ctx.Err() != nil:
		return // Close or RemovePeer
	case errors.Is(data.err, errStreamIsolated) || t.isIsolated(p.id):
		log.Info("closing a stream connection: peer isolated", "bytes", data.n)
		return
	case data.err != nil && data.err != io.EOF:
		// The connection failed: no reply would get through.
		log.Info("stream cut short", "bytes", data.n, "err", data.err, "handler_err", herr)
		return
	}
	if herr == nil {
		p.n.streamsReceived.Add(1)
		p.n.streamBytesReceived.Add(uint64(data.n))
		log.Info("received a stream", "bytes", data.n)
	} else {
		log.Info("refused a stream", "bytes", data.n, "err", herr)
	}
	nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := nc.Write(appendStreamReply(nil, herr)); err != nil {
		log.Debug("stream reply not written", "err", err)
	}
}
