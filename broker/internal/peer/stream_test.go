package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A streamed is what a Stream handler got: the message, the data it read,
// and the error that ended its reading (nil for io.EOF).
type streamed struct {
	from uint64
	m    Message
	data []byte
	err  error
}

// recorder returns a Stream handler that reads the whole data, reports
// what it got on the channel, and returns reply(err of the read).
func recorder(reply func(err error) error) (func(uint64, Message, io.Reader) error, chan streamed) {
	ch := make(chan streamed, 16)
	return func(from uint64, m Message, data io.Reader) error {
		b, err := io.ReadAll(data)
		ch <- streamed{from, m, b, err}
		return reply(err)
	}, ch
}

// next returns the next stream a recorder got.
func next(t *testing.T, ch chan streamed) streamed {
	t.Helper()
	return recv(t, ch, "a stream")
}

// recv returns the next value of ch, or fails the test after waitLimit.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// pattern returns n bytes that repeat only after 251*256 of them.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251) ^ byte(i>>8)
	}
	return b
}

// writeOdd writes data to w in writes of odd sizes, some smaller than a
// frame and some larger.
func writeOdd(w io.Writer, data []byte) error {
	sizes := []int{1, 7, 4093, 65537, streamChunk + 3, 333333, streamChunk - 1, 2*streamChunk + 5}
	for i := 0; len(data) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(data))
		if k, err := w.Write(data[:n]); err != nil || k != n {
			return fmt.Errorf("write of %d: %d, %w", n, k, err)
		}
		data = data[n:]
	}
	return nil
}

// writeFrames writes up to frames frames' worth of data to w, one at a
// time, and returns nil, or the first write's error; after the first
// frame it calls then, if not nil.
func writeFrames(w io.Writer, frames int, then func()) error {
	chunk := pattern(streamChunk)
	for i := range frames {
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		if i == 0 && then != nil {
			then()
		}
	}
	return nil
}

func snapMsg(from, to uint64) Message {
	m := raftMsg(pb.MessageType_MsgSnap, from, to, 0)
	m.Snapshot = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(77), Term: proto.Uint64(4), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
	}}
	return Message{Group: 1<<40 + 3, Msg: m}
}

func accept(error) error { return nil }

// TestStream: 20 MiB of data, written in odd sizes, arrive byte for byte
// with their message, whichever ID is the lower, over TCP and TLS, and
// both ends count the stream.
func TestStream(t *testing.T) {
	for _, tt := range []struct {
		name     string
		from, to uint64
		tls      bool
	}{
		{"lower to higher", 1, 2, false},
		{"higher to lower", 2, 1, false},
		{"TLS, higher to lower", 2, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ca *testCA
			if tt.tls {
				ca = newCA(t, "fila cluster CA")
			}
			handler, got := recorder(func(err error) error { return err })
			nodes := map[uint64]*node{}
			for _, id := range []uint64{1, 2} {
				nodes[id] = startNode(t, id, func(c *Config) {
					c.Stream = handler
					if ca != nil {
						c.TLS = ca.nodeTLS(t, fmt.Sprint("node", id), ca)
					}
				})
			}
			connect(t, nodes[1], nodes[2])
			from, to := nodes[tt.from], nodes[tt.to]

			want := pattern(20 << 20)
			m := snapMsg(tt.from, tt.to)
			n, err := from.SendStream(context.Background(), tt.to, m, func(w io.Writer) error { return writeOdd(w, want) })
			if err != nil || n != int64(len(want)) {
				t.Fatalf("SendStream() = %d, %v; want %d, nil", n, err, len(want))
			}
			s := next(t, got)
			if s.err != nil || s.from != tt.from || s.m.Group != m.Group || !proto.Equal(s.m.Msg, m.Msg) {
				t.Errorf("handler got from %d, group %d, %v, read error %v; want from %d, group %d, %v", s.from, s.m.Group, s.m.Msg, s.err, tt.from, m.Group, m.Msg)
			}
			if !bytes.Equal(s.data, want) {
				t.Errorf("handler read %d bytes, not the %d sent", len(s.data), len(want))
			}
			sent, recv := from.Stats()[tt.to], to.Stats()[tt.from]
			if sent.StreamsSent != 1 || sent.StreamBytesSent != uint64(len(want)) || recv.StreamsReceived != 1 || recv.StreamBytesReceived != uint64(len(want)) {
				t.Errorf("stats: sent %d streams of %d bytes, received %d of %d; want 1 of %d", sent.StreamsSent, sent.StreamBytesSent, recv.StreamsReceived, recv.StreamBytesReceived, len(want))
			}
			// The stream took a connection of its own.
			if sent.Connections != 1 || recv.Connections != 1 {
				t.Errorf("peer connections: %d and %d; want 1", sent.Connections, recv.Connections)
			}

			// An empty stream is a stream too.
			n, err = from.SendStream(context.Background(), tt.to, m, func(io.Writer) error { return nil })
			if s := next(t, got); err != nil || n != 0 || s.err != nil || len(s.data) != 0 {
				t.Errorf("empty stream: SendStream() = %d, %v; handler read %d bytes, %v", n, err, len(s.data), s.err)
			}
		})
	}
}

// TestStreamBesideMessages: a stream stalled halfway does not hold up the
// messages of the shared connection, in either direction.
func TestStreamBesideMessages(t *testing.T) {
	handler, got := recorder(accept)
	n1 := startNode(t, 1, func(c *Config) { c.Stream = handler })
	n2 := startNode(t, 2, nil)
	connect(t, n1, n2)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // before Close, should the test fail early
	done := make(chan error, 1)
	want := pattern(3*streamChunk + 17)
	go func() {
		_, err := n2.SendStream(context.Background(), 1, snapMsg(2, 1), func(w io.Writer) error {
			if _, err := w.Write(want[:2*streamChunk]); err != nil {
				return err
			}
			<-release
			_, err := w.Write(want[2*streamChunk:])
			return err
		})
		done <- err
	}()
	sendSeq(n1, 2, 0, 20)
	sendSeq(n2, 1, 0, 20)
	waitFor(t, "messages both ways while the stream waits", func() bool { return len(n2.received(1)) == 20 && len(n1.received(2)) == 20 })
	unblock()
	if err := recv(t, done, "SendStream"); err != nil {
		t.Fatalf("SendStream() = %v", err)
	}
	if s := next(t, got); s.err != nil || !bytes.Equal(s.data, want) {
		t.Errorf("handler read %d bytes, %v; want the %d sent", len(s.data), s.err, len(want))
	}
}

// TestStreamRefused: the handler's error comes back, in its text, as
// SendStream's; and nothing counts as streamed.
func TestStreamRefused(t *testing.T) {
	var mode atomic.Value // string: how the handler refuses
	reason := "group 9: snapshot at index 77 is stale"
	long := strings.Repeat("why ", 3000)
	handler := func(_ uint64, _ Message, data io.Reader) error {
		switch mode.Load() {
		case "after reading":
			if _, err := io.Copy(io.Discard, data); err != nil {
				return err
			}
			return errors.New(reason)
		case "long reason":
			return errors.New(long)
		}
		return errors.New(reason) // without reading
	}
	n1 := startNode(t, 1, func(c *Config) { c.Stream = handler })
	n2 := startNode(t, 2, nil) // no Stream: refuses every stream
	connect(t, n1, n2)
	small := pattern(10 << 10)
	for _, m := range []string{"after reading", "before reading"} {
		mode.Store(m)
		_, err := n2.SendStream(context.Background(), 1, snapMsg(2, 1), func(w io.Writer) error { return writeOdd(w, small) })
		if err == nil || !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: SendStream() = %v; want a refusal saying %q", m, err, reason)
		}
	}
	mode.Store("long reason")
	_, err := n2.SendStream(context.Background(), 1, snapMsg(2, 1), func(w io.Writer) error { return writeOdd(w, small) })
	if err == nil || !strings.Contains(err.Error(), long[:maxStreamReason]) || strings.Contains(err.Error(), long[:maxStreamReason+1]) {
		t.Errorf("long reason: SendStream() = %.100s…; want the reason's first %d bytes", err, maxStreamReason)
	}
	// A refusal before reading more than the connection holds: the write
	// fails, or the refusal comes back; either way SendStream fails.
	mode.Store("before reading")
	if _, err := n2.SendStream(context.Background(), 1, snapMsg(2, 1), func(w io.Writer) error { return writeFrames(w, 64, nil) }); err == nil {
		t.Errorf("large stream refused at once: SendStream() = nil")
	}
	if _, err := n1.SendStream(context.Background(), 2, snapMsg(1, 2), func(w io.Writer) error { return writeOdd(w, small) }); err == nil || !strings.Contains(err.Error(), "takes no streams") {
		t.Errorf("to a node without Stream: SendStream() = %v; want a refusal", err)
	}
	if s, r := n2.Stats()[1], n1.Stats()[2]; s.StreamsSent != 0 || r.StreamsReceived != 0 || s.StreamBytesSent != 0 || r.StreamBytesReceived != 0 {
		t.Errorf("refused streams counted: sent %+v, received %+v", s, r)
	}
}

// rawStream connects to n as node from would for a stream, and checks
// the answer; it returns the connection and a reader of it.
func rawStream(t *testing.T, n *node, from uint64) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := rawDial(t, n, appendHelloOf(nil, streamMagic, from, "test"))
	r := bufio.NewReader(c)
	magic, id, cluster, err := readAnyHello(r)
	if err != nil || magic != streamMagic || id != n.cfg.NodeID || cluster != "test" {
		t.Fatalf("answer = %q, %d, %q, %v; want %q, %d, test", magic, id, cluster, err, streamMagic, n.cfg.NodeID)
	}
	return c, r
}

// encodeStream returns the frames of a stream of m and data, as
// SendStream writes them.
func encodeStream(t testing.TB, m Message, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	hdr, err := appendStreamHeader(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(hdr)
	w := newStreamWriter(&b, nil)
	if err := writeOdd(w, data); err != nil {
		t.Fatal(err)
	}
	if err := w.end(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestStreamCorrupt: a byte changed on the way, or a length that does not
// match, fails the handler's read, and its refusal reaches the sender;
// frames that break the layout close the connection without a reply.
func TestStreamCorrupt(t *testing.T) {
	handler, got := recorder(func(err error) error { return err })
	n2 := startNode(t, 2, func(c *Config) {
		c.Peers = map[uint64]string{1: "127.0.0.1:1"}
		c.Stream = handler
	})
	m := snapMsg(1, 2)
	hdr, err := appendStreamHeader(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(3*streamChunk + 100)
	good := encodeStream(t, m, data)
	end := len(good) - 8 - uvarintLen(uint64(len(data))) // the end frame's offset

	flipped := bytes.Clone(good)
	flipped[len(hdr)+4+streamChunk/2] ^= 0x10 // in the first data frame
	wrongLen := append(bytes.Clone(good[:end+8]), binary.AppendUvarint(nil, uint64(len(data)-1))...)
	for _, tt := range []struct {
		name string
		in   []byte
	}{{"a byte flipped", flipped}, {"a wrong length", wrongLen}} {
		c, r := rawStream(t, n2, 1)
		if _, err := c.Write(tt.in); err != nil {
			t.Fatal(err)
		}
		s := next(t, got)
		if s.err == nil || !errors.Is(s.err, errStreamCorrupt) {
			t.Errorf("%s: the handler's read ended with %v; want a corruption error", tt.name, s.err)
		}
		refused, reason, err := decodeStreamReply(r)
		if err != nil || !refused || !strings.Contains(reason, "corrupt") {
			t.Errorf("%s: reply = refused %v, %q, %v; want a refusal saying corrupt", tt.name, refused, reason, err)
		}
	}
	waitFor(t, "the corruption logged", func() bool { return n2.log.has("stream data corrupt") })

	// Bytes that are not a stream close the connection without a reply.
	tooLong := append(bytes.Clone(hdr), binary.BigEndian.AppendUint32(nil, streamChunk+1)...)
	for _, tt := range []struct {
		name    string
		in      []byte
		handled bool // the handler saw the stream
		log     string
	}{
		{"data frame too large", tooLong, true, "over the limit of 1048576"},
		{"header too large", binary.BigEndian.AppendUint32(nil, MaxFrameSize+1), false, "header of 67108865 bytes"},
		{"header not a message", frame([]byte{7, 0x0f}), false, "header (group 7)"},
	} {
		c, r := rawStream(t, n2, 1)
		if _, err := c.Write(tt.in); err != nil {
			t.Fatal(err)
		}
		if tt.handled {
			if s := next(t, got); !errors.Is(s.err, errStreamProtocol) {
				t.Errorf("%s: the handler's read ended with %v; want a protocol error", tt.name, s.err)
			}
		}
		if b, err := io.ReadAll(r); len(b) != 0 || isTimeout(err) {
			t.Errorf("%s: read %q, %v; want the connection closed without a reply", tt.name, b, err)
		}
		waitFor(t, fmt.Sprintf("%s: log saying %q", tt.name, tt.log), func() bool { return n2.log.has(tt.log) })
	}
	if s := n2.Stats()[1]; s.StreamsReceived != 0 {
		t.Errorf("%d broken streams counted", s.StreamsReceived)
	}
}

// TestStreamFailures: what cannot be sent fails at once, and what breaks
// a stream in flight fails it at both ends; nothing hangs.
func TestStreamFailures(t *testing.T) {
	handler, got := recorder(func(err error) error { return err })
	n1 := startNode(t, 1, func(c *Config) { c.Stream = handler })
	n2 := startNode(t, 2, func(c *Config) { c.Stream = handler })
	connect(t, n1, n2)
	ctx := context.Background()
	never := func(io.Writer) error {
		t.Error("data called for a stream that cannot be sent")
		return nil
	}

	if _, err := n1.SendStream(ctx, 9, snapMsg(1, 9), never); err == nil || !strings.Contains(err.Error(), "not a peer") {
		t.Errorf("to an unknown node: SendStream() = %v; want not a peer", err)
	}
	if _, err := n1.SendStream(ctx, 2, Message{Group: 1}, never); err == nil {
		t.Errorf("a nil message: SendStream() = nil")
	}
	big := raftMsg(pb.MessageType_MsgSnap, 1, 2, 0)
	big.Context = make([]byte, MaxFrameSize)
	if _, err := n1.SendStream(ctx, 2, Message{Group: 1, Msg: big}, never); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("a header over MaxFrameSize: SendStream() = %v; want over the limit", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := n1.SendStream(done, 2, snapMsg(1, 2), never); !errors.Is(err, context.Canceled) {
		t.Errorf("ctx done: SendStream() = %v; want context.Canceled", err)
	}
	n1.Isolate(2)
	if _, err := n1.SendStream(ctx, 2, snapMsg(1, 2), never); !errors.Is(err, errStreamIsolated) {
		t.Errorf("to an isolated peer: SendStream() = %v; want isolated", err)
	}
	n1.Heal()

	// In flight: after the sender's first frame, abort breaks the stream,
	// which would otherwise go through.
	for _, tt := range []struct {
		name  string
		abort func(cancel func())
		want  error // wrapped by SendStream's error, when not nil
	}{
		{"sender isolates", func(func()) { n1.Isolate(2) }, errStreamIsolated},
		{"receiver isolates", func(func()) { n2.Isolate(1) }, nil},
		{"ctx canceled", func(cancel func()) { cancel() }, context.Canceled},
	} {
		ctx, cancel := context.WithCancel(ctx)
		_, err := n1.SendStream(ctx, 2, snapMsg(1, 2), func(w io.Writer) error {
			return writeFrames(w, 32, func() { tt.abort(cancel) })
		})
		cancel()
		if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: SendStream() = %v; want an error wrapping %v", tt.name, err, tt.want)
		}
		if s := next(t, got); s.err == nil {
			t.Errorf("%s: the handler's read ended with io.EOF", tt.name)
		}
		n1.Heal()
		n2.Heal()
	}
	if s := n2.Stats()[1]; s.StreamsReceived != 0 || n1.Stats()[2].StreamsSent != 0 {
		t.Errorf("aborted streams counted: %+v", s)
	}
}

// TestStreamClose: Close, or RemovePeer, at either end aborts the
// streams in flight at both, and returns.
func TestStreamClose(t *testing.T) {
	for _, tt := range []struct {
		node  uint64
		close bool // Close, not RemovePeer
	}{{1, true}, {2, true}, {1, false}, {2, false}} {
		t.Run(fmt.Sprintf("node %d, close %v", tt.node, tt.close), func(t *testing.T) {
			reading := make(chan struct{})
			read := make(chan error, 1)
			n2 := startNode(t, 2, func(c *Config) {
				c.Stream = func(_ uint64, _ Message, data io.Reader) error {
					_, err := io.ReadFull(data, make([]byte, 1))
					close(reading)
					if err == nil {
						_, err = io.Copy(io.Discard, data)
					}
					read <- err
					return err
				}
			})
			n1 := startNode(t, 1, nil)
			connect(t, n1, n2)
			sent := make(chan error, 1)
			go func() {
				// 1 GiB only bounds the test should the abort fail.
				_, err := n1.SendStream(context.Background(), 2, snapMsg(1, 2), func(w io.Writer) error { return writeFrames(w, 1024, nil) })
				sent <- err
			}()
			recv(t, reading, "the handler's first byte")
			nodes := map[uint64]*node{1: n1, 2: n2}
			n, other := nodes[tt.node], nodes[3-tt.node]
			if tt.close {
				if err := n.Close(); err != nil {
					t.Errorf("Close() = %v", err)
				}
			} else {
				n.RemovePeer(other.cfg.NodeID)
			}
			if err := recv(t, sent, "SendStream"); err == nil {
				t.Errorf("SendStream() = nil; want an error")
			} else if tt.node == 1 && !errors.Is(err, errTransportClosed) {
				t.Errorf("SendStream() = %v; want %v", err, errTransportClosed)
			}
			if err := recv(t, read, "the handler's read"); err == nil {
				t.Errorf("the handler's read ended with io.EOF")
			}
			if _, err := n.SendStream(context.Background(), other.cfg.NodeID, snapMsg(n.cfg.NodeID, other.cfg.NodeID), nil); err == nil {
				t.Errorf("SendStream() after Close or RemovePeer = nil")
			}
		})
	}
}

// TestStreamTimeouts: a sender that goes silent fails the receiver's read,
// and a receiver that does not answer fails SendStream, each after its
// deadline (lowered here).
func TestStreamTimeouts(t *testing.T) {
	handler, got := recorder(accept)
	release := make(chan struct{})
	defer close(release) // before Close, which waits for the handler
	n1 := startNode(t, 1, func(c *Config) {
		c.Stream = func(from uint64, m Message, data io.Reader) error {
			err := handler(from, m, data)
			if m.Group == 2 {
				<-release // answers only once SendStream has given up
			}
			return err
		}
	})
	n2 := startNode(t, 2, nil)
	connect(t, n1, n2)

	idle := streamIdleTimeout
	streamIdleTimeout = 20 * time.Millisecond
	c, _ := rawStream(t, n1, 2)
	hdr, err := appendStreamHeader(nil, snapMsg(2, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(encodeStream(t, snapMsg(2, 1), pattern(100))[:len(hdr)+10]); err != nil { // the header and some data
		t.Fatal(err)
	}
	if s := next(t, got); !isTimeout(s.err) {
		t.Errorf("a silent sender: the handler's read ended with %v; want a timeout", s.err)
	}
	streamIdleTimeout = idle

	reply := streamReplyTimeout
	streamReplyTimeout = 20 * time.Millisecond
	defer func() { streamReplyTimeout = reply }()
	m := snapMsg(2, 1)
	m.Group = 2
	_, err = n2.SendStream(context.Background(), 1, m, func(w io.Writer) error { return writeOdd(w, pattern(100)) })
	if !isTimeout(err) {
		t.Errorf("no answer: SendStream() = %v; want a timeout", err)
	}
	if s := next(t, got); s.err != nil {
		t.Errorf("the handler's read ended with %v", s.err)
	}
}

// TestStreamDataError: data's error aborts the stream, comes back from
// SendStream as it was, and fails the receiver's read.
func TestStreamDataError(t *testing.T) {
	handler, got := recorder(func(err error) error { return err })
	n1 := startNode(t, 1, func(c *Config) { c.Stream = handler })
	n2 := startNode(t, 2, nil)
	connect(t, n1, n2)
	errDisk := errors.New("reading the queue's segment 12: input/output error")
	n, err := n2.SendStream(context.Background(), 1, snapMsg(2, 1), func(w io.Writer) error {
		if err := writeOdd(w, pattern(3*streamChunk+5)); err != nil {
			return err
		}
		return errDisk
	})
	if err != errDisk || n != 3*streamChunk {
		t.Errorf("SendStream() = %d, %v; want %d (the whole frames), %v", n, err, 3*streamChunk, errDisk)
	}
	s := next(t, got)
	if s.err == nil || len(s.data) > 3*streamChunk {
		t.Errorf("the handler read %d bytes, %v; want at most %d and an error", len(s.data), s.err, 3*streamChunk)
	}
	if st := n2.Stats()[1]; st.StreamsSent != 0 {
		t.Errorf("an aborted stream counted: %+v", st)
	}
}

// TestStreamRefusedConnections: a stream connection from another cluster
// or an unknown node is refused like a peer connection; one from a peer
// with a higher ID is not.
func TestStreamRefusedConnections(t *testing.T) {
	handler, got := recorder(accept)
	n2 := startNode(t, 2, func(c *Config) {
		c.ClusterID = "green"
		c.Stream = handler
	})
	n1 := startNode(t, 1, func(c *Config) {
		c.ClusterID = "blue"
		c.Peers = map[uint64]string{2: n2.Addr().String()}
	})
	n2.SetPeer(1, n1.Addr().String())
	if _, err := n1.SendStream(context.Background(), 2, snapMsg(1, 2), func(w io.Writer) error { return writeOdd(w, pattern(100)) }); err == nil {
		t.Errorf("SendStream() to another cluster = nil")
	}
	waitFor(t, "node 2 to refuse the stream", func() bool { return n2.log.has("refusing a stream connection") && n2.log.has("cluster ID mismatch") })

	n3 := startNode(t, 3, func(c *Config) { c.Stream = handler; c.Peers = map[uint64]string{5: "127.0.0.1:1"} })
	c := rawDial(t, n3, appendHelloOf(nil, streamMagic, 9, "test"))
	if b, err := io.ReadAll(c); len(b) != 0 || isTimeout(err) {
		t.Errorf("unknown node: read %q, %v; want the connection closed without a word", b, err)
	}
	waitFor(t, "node 3 to refuse an unknown node", func() bool { return n3.log.has("unknown node") })
	c, r := rawStream(t, n3, 5) // a higher ID may stream
	if _, err := c.Write(encodeStream(t, snapMsg(5, 3), pattern(10))); err != nil {
		t.Fatal(err)
	}
	if refused, _, err := decodeStreamReply(r); err != nil || refused {
		t.Errorf("a stream from a higher ID: reply refused %v, %v; want accepted", refused, err)
	}
	if s := next(t, got); s.from != 5 || s.err != nil || !bytes.Equal(s.data, pattern(10)) {
		t.Errorf("handler got %d bytes from %d, %v", len(s.data), s.from, s.err)
	}
	select {
	case s := <-got:
		t.Errorf("the handler got a refused connection's stream from %d", s.from)
	default:
	}
}

// TestStreamFrames: the writer cuts data into frames of at most
// streamChunk bytes, and the reader gives it back whole, in reads of any
// size, then io.EOF for good.
func TestStreamFrames(t *testing.T) {
	for _, size := range []int{0, 1, streamChunk - 1, streamChunk, streamChunk + 1, 3*streamChunk + 7} {
		want := pattern(size)
		in := encodeStream(t, Message{Group: 5, Msg: &pb.Message{}}, want)
		hdr, _ := appendStreamHeader(nil, Message{Group: 5, Msg: &pb.Message{}})
		r := bufio.NewReader(bytes.NewReader(in))
		m, err := readStreamHeader(r)
		if err != nil || m.Group != 5 || m.Msg == nil {
			t.Fatalf("%d bytes: readStreamHeader() = %v, %v", size, m, err)
		}
		// The frames, as the writer cut them.
		frames := 0
		for rest := in[len(hdr):]; ; frames++ {
			n := binary.BigEndian.Uint32(rest)
			if n == 0 {
				break
			}
			if n > streamChunk || int(n) != min(streamChunk, size-frames*streamChunk) {
				t.Fatalf("%d bytes: frame %d of %d bytes", size, frames, n)
			}
			rest = rest[4+n:]
		}
		if frames != (size+streamChunk-1)/streamChunk {
			t.Errorf("%d bytes in %d frames", size, frames)
		}
		sr := &streamReader{r: r}
		var got []byte
		buf := make([]byte, 70001)
		for i := 1; ; i++ {
			n, err := sr.Read(buf[:i%len(buf)])
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%d bytes: Read() = %v after %d bytes", size, err, len(got))
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes: read %d bytes that differ", size, len(got))
		}
		if n, err := sr.Read(buf); n != 0 || err != io.EOF {
			t.Errorf("%d bytes: Read() after the end = %d, %v", size, n, err)
		}
	}
}

// TestStreamSlowWrites: data written slowly does not wait in the writer
// for a whole frame: with streamFlushAfter at 0, every Write is a frame.
func TestStreamSlowWrites(t *testing.T) {
	defer func(d time.Duration) { streamFlushAfter = d }(streamFlushAfter)
	streamFlushAfter = 0
	var b bytes.Buffer
	w := newStreamWriter(&b, nil)
	for _, n := range []int{1, 300, streamChunk + 5} {
		b.Reset()
		if _, err := w.Write(pattern(n)); err != nil {
			t.Fatal(err)
		}
		want := append(binary.BigEndian.AppendUint32(nil, uint32(min(n, streamChunk))), pattern(n)[:min(n, streamChunk)]...)
		if n > streamChunk {
			want = append(want, 0, 0, 0, 5)
			want = append(want, pattern(n)[streamChunk:]...)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("a Write of %d bytes wrote %d bytes of frames; want %d", n, b.Len(), len(want))
		}
	}
}

// TestStreamReaderErrors: a stream cut short, or whose end frame does not
// match, never reads as whole.
func TestStreamReaderErrors(t *testing.T) {
	data := pattern(100)
	good := encodeStream(t, Message{Group: 1, Msg: &pb.Message{}}, data)
	hdr, _ := appendStreamHeader(nil, Message{Group: 1, Msg: &pb.Message{}})
	body := good[len(hdr):]
	crc := crc32.Checksum(data, castagnoli)
	frame100 := append(binary.BigEndian.AppendUint32(nil, 100), data...)
	for _, tt := range []struct {
		name string
		in   []byte
		want error
	}{
		{"no end frame", frame100, io.ErrUnexpectedEOF},
		{"cut in a frame", body[:50], io.ErrUnexpectedEOF},
		{"cut in the end frame", body[:len(body)-2], io.ErrUnexpectedEOF},
		{"wrong checksum", appendStreamEnd(bytes.Clone(frame100), crc+1, 100), errStreamCorrupt},
		{"wrong length", appendStreamEnd(bytes.Clone(frame100), crc, 101), errStreamCorrupt},
		{"length not in its shortest form", append(binary.BigEndian.AppendUint32(append(bytes.Clone(frame100), 0, 0, 0, 0), crc), 0xe4, 0x80, 0x00), errStreamProtocol},
		{"length over 64 bits", append(binary.BigEndian.AppendUint32(append(bytes.Clone(frame100), 0, 0, 0, 0), crc), bytes.Repeat([]byte{0xff}, 11)...), errStreamProtocol},
		{"frame too large", binary.BigEndian.AppendUint32(nil, streamChunk+1), errStreamProtocol},
	} {
		sr := &streamReader{r: bufio.NewReader(bytes.NewReader(tt.in))}
		_, err := io.ReadAll(sr)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: read = %v; want %v", tt.name, err, tt.want)
		}
		if _, again := sr.Read(make([]byte, 1)); again != err {
			t.Errorf("%s: the error is not sticky: %v, then %v", tt.name, err, again)
		}
	}
	// A before error stops the reader at the next frame.
	errCut := errors.New("cut")
	sr := &streamReader{r: bufio.NewReader(bytes.NewReader(body)), before: func() error { return errCut }}
	if _, err := io.ReadAll(sr); err != errCut {
		t.Errorf("before's error: read = %v; want %v", err, errCut)
	}
}

func TestStreamReply(t *testing.T) {
	for _, err := range []error{nil, errors.New("stale"), errors.New("")} {
		refused, reason, rerr := decodeStreamReply(bufio.NewReader(bytes.NewReader(appendStreamReply(nil, err))))
		if rerr != nil || refused != (err != nil) || err != nil && reason != err.Error() {
			t.Errorf("reply of %v = %v, %q, %v", err, refused, reason, rerr)
		}
	}
	for _, tt := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"bad status", []byte{2, 0}, errStreamProtocol},
		{"reason too long", binary.AppendUvarint([]byte{1}, maxStreamReason+1), errStreamProtocol},
		{"reason cut short", []byte{1, 5, 'a'}, io.ErrUnexpectedEOF},
	} {
		if _, _, err := decodeStreamReply(bufio.NewReader(bytes.NewReader(tt.in))); !errors.Is(err, tt.want) {
			t.Errorf("%s: decodeStreamReply() = %v; want %v", tt.name, err, tt.want)
		}
	}
}

// FuzzStreamFrames: whatever follows a stream's hello, the receiver's
// reader never panics, and ends with io.EOF only right after an end
// frame carrying the CRC-32C and the length of the data it gave.
func FuzzStreamFrames(f *testing.F) {
	m := snapMsg(1, 2)
	for _, size := range []int{0, 1, 100, 300} {
		f.Add(encodeStream(f, m, pattern(size)))
	}
	hdr, _ := appendStreamHeader(nil, Message{Group: 1, Msg: &pb.Message{}})
	two := append(bytes.Clone(hdr), 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 1, 'c')
	f.Add(appendStreamEnd(bytes.Clone(two), crc32.Checksum([]byte("abc"), castagnoli), 3))
	f.Add(appendStreamEnd(bytes.Clone(two), crc32.Checksum([]byte("abc"), castagnoli), 4))
	f.Add(appendStreamEnd(bytes.Clone(two), 0, 3))
	f.Add(append(bytes.Clone(hdr), 0, 0x10, 0, 1))
	f.Add([]byte{0, 0, 0, 1, 0x80})
	f.Fuzz(func(t *testing.T, in []byte) {
		src := bytes.NewReader(in)
		r := bufio.NewReaderSize(src, 16)
		if _, err := readStreamHeader(r); err != nil {
			return
		}
		sr := &streamReader{r: r}
		data, err := io.ReadAll(sr)
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("read ended with %v", err)
			}
			return
		}
		consumed := in[:len(in)-src.Len()-r.Buffered()]
		end := appendStreamEnd(nil, crc32.Checksum(data, castagnoli), int64(len(data)))
		if !bytes.HasSuffix(consumed, end) {
			t.Fatalf("io.EOF after %d bytes of data, but the stream read ends in %x, not %x", len(data), consumed[max(0, len(consumed)-len(end)):], end)
		}
		if n, err := sr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("Read() after the end = %d, %v", n, err)
		}
	})
}

// TestStreamLimit: a peer may send maxStreamsIn streams at once; one
// more is refused before its hello is answered, and goes through once a
// stream ends.
func TestStreamLimit(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Int32
	n2 := startNode(t, 2, func(c *Config) {
		c.Stream = func(_ uint64, _ Message, data io.Reader) error {
			held.Add(1)
			<-release
			_, err := io.Copy(io.Discard, data)
			return err
		}
	})
	n1 := startNode(t, 1, nil)
	connect(t, n1, n2)
	send := func() error {
		_, err := n1.SendStream(context.Background(), 2, snapMsg(1, 2), func(w io.Writer) error { return writeFrames(w, 1, nil) })
		return err
	}
	sent := make(chan error, maxStreamsIn)
	for range maxStreamsIn {
		go func() { sent <- send() }()
	}
	waitFor(t, "the streams held", func() bool { return held.Load() == maxStreamsIn })
	if err := send(); err == nil {
		t.Fatalf("stream %d accepted; want it refused", maxStreamsIn+1)
	}
	waitFor(t, "the refusal logged", func() bool { return n2.log.has("streams open already") })
	close(release)
	for range maxStreamsIn {
		if err := recv(t, sent, "a held stream"); err != nil {
			t.Errorf("held stream: %v", err)
		}
	}
	if err := send(); err != nil {
		t.Errorf("a stream after the others ended: %v", err)
	}
}
