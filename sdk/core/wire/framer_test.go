package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func frames(t *testing.T) ([]byte, []Frame) {
	t.Helper()
	fs := []Frame{
		&Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "x"},
		&Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: bytes.Repeat([]byte("p"), 300)}}},
		&Ping{Nonce: 7},
		&UnsubscribeOk{},
	}
	var stream []byte
	for i, f := range fs {
		stream = AppendFrame(stream, uint32(i+1), f)
	}
	return stream, fs
}

func readAll(t *testing.T, fr *FrameReader) []Frame {
	t.Helper()
	var out []Frame
	for {
		h, body, ok, err := fr.Next()
		if err != nil {
			t.Fatalf("Next = %v", err)
		}
		if !ok {
			return out
		}
		f, err := DecodeFrame(h.Opcode, append([]byte(nil), body...))
		if err != nil {
			t.Fatalf("DecodeFrame(%v) = %v", h.Opcode, err)
		}
		out = append(out, f)
	}
}

// TestFrameReaderSplitAtEveryByte feeds a stream of frames cut at every
// possible boundary, in two pieces, and expects the same frames.
func TestFrameReaderSplitAtEveryByte(t *testing.T) {
	stream, want := frames(t)
	for cut := 0; cut <= len(stream); cut++ {
		fr := NewFrameReader(0, 0)
		fr.Feed(stream[:cut])
		got := readAll(t, fr)
		fr.Feed(stream[cut:])
		got = append(got, readAll(t, fr)...)
		if len(got) != len(want) {
			t.Fatalf("cut %d: got %d frames; want %d", cut, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].AppendTo(nil), want[i].AppendTo(nil)) {
				t.Fatalf("cut %d: frame %d = %+v; want %+v", cut, i, got[i], want[i])
			}
		}
	}
}

// TestFrameReaderRandomChunks feeds the stream in random chunk sizes,
// including one byte at a time.
func TestFrameReaderRandomChunks(t *testing.T) {
	stream, want := frames(t)
	seed := uint64(1)
	r := rand.New(rand.NewPCG(seed, seed))
	for iter := 0; iter < 200; iter++ {
		fr := NewFrameReader(0, 0)
		var got []Frame
		for rest := stream; len(rest) > 0; {
			n := 1 + r.IntN(min(len(rest), 40))
			if iter == 0 {
				n = 1
			}
			fr.Feed(rest[:n])
			rest = rest[n:]
			got = append(got, readAll(t, fr)...)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d iter %d: got %d frames; want %d", seed, iter, len(got), len(want))
		}
	}
}

// chunkReader returns its stream in reads of random sizes from 1 to 40
// bytes, at most the size asked for, and io.EOF at the end.
type chunkReader struct {
	rest []byte
	r    *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.rest[:min(len(c.rest), 1+c.r.IntN(40))])
	c.rest = c.rest[n:]
	return n, nil
}

// readInto reads once from r into fr through Room and Fed.
func readInto(fr *FrameReader, r io.Reader, room int) (int, error) {
	n, err := r.Read(fr.Room(room))
	fr.Fed(n)
	return n, err
}

// TestFrameReaderRoom reads a stream of frames, and a large frame of its
// own, through Room and Fed in random read sizes and with several rooms,
// including one byte, and expects the same frames as Feed gives; after a
// failure, Room still takes bytes, and Fed discards them.
func TestFrameReaderRoom(t *testing.T) {
	stream, want := frames(t)
	stream = AppendFrame(stream, 9, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: bytes.Repeat([]byte("L"), 3*keepBuffer)}}})
	want = append(want, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: bytes.Repeat([]byte("L"), 3*keepBuffer)}}})
	r := rand.New(rand.NewPCG(2, 2))
	for _, room := range []int{1, 7, 4096, 64 << 10} {
		fr := NewFrameReader(0, 0)
		src := &chunkReader{rest: stream, r: r}
		var got []Frame
		for {
			_, err := readInto(fr, src, room)
			got = append(got, readAll(t, fr)...)
			if err == io.EOF {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("room %d: got %d frames; want %d", room, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i].AppendTo(nil), want[i].AppendTo(nil)) {
				t.Fatalf("room %d: frame %d differs", room, i)
			}
		}
		if fr.Buffered() != 0 {
			t.Fatalf("room %d: %d bytes left buffered", room, fr.Buffered())
		}
	}

	fr := NewFrameReader(16, 0)
	bad := AppendFrame(nil, 1, &Ping{Nonce: 1})
	bad[1] = 0xFF // a length far over 16
	if _, err := readInto(fr, bytes.NewReader(bad), 64); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := fr.Next(); err == nil {
		t.Fatal("Next accepted a frame over the limit")
	}
	if n, err := readInto(fr, bytes.NewReader([]byte("more")), 64); n != 4 || err != nil || fr.Buffered() != 0 {
		t.Fatalf("after the failure a read into Room = %d, %v with %d buffered; want 4 bytes read and discarded", n, err, fr.Buffered())
	}
}

func TestFrameReaderRejectsOversizeBeforeBody(t *testing.T) {
	fr := NewFrameReader(1024, 0)
	// A header claiming 4 GiB - 1 and nothing else.
	fr.Feed(AppendHeader(nil, Header{Length: 0xFFFFFFFF, Opcode: OpEnqueue, RequestID: 1}))
	_, _, _, err := fr.Next()
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Code != CodeFrameTooLarge {
		t.Fatalf("Next = %v; want FRAME_TOO_LARGE", err)
	}
	if fr.Buffered() != 0 {
		t.Errorf("Buffered = %d after failure; want 0", fr.Buffered())
	}
	// Sticky.
	fr.Feed([]byte{1, 2, 3})
	if _, _, _, err2 := fr.Next(); err2 != err {
		t.Errorf("Next after failure = %v; want the same error", err2)
	}
}

func TestFrameReaderGrowsOnlyWithBytesFed(t *testing.T) {
	fr := NewFrameReader(16<<20, 0)
	// Claims 16 MiB, sends 10 bytes of it.
	fr.Feed(AppendHeader(nil, Header{Length: 16 << 20, Opcode: OpEnqueue, RequestID: 1}))
	fr.Feed(make([]byte, 10))
	if _, _, ok, err := fr.Next(); ok || err != nil {
		t.Fatalf("Next = %v, %v; want need more", ok, err)
	}
	if c := cap(fr.buf); c > 4096 {
		t.Errorf("buffer capacity %d after 22 bytes; the claimed length must not be allocated", c)
	}
}

func TestContinuationReassembly(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	in := &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: payload}}}
	stream := AppendFrames(nil, 9, in, 4096)
	stream = AppendFrame(stream, 10, &Ping{Nonce: 1})
	var nFrames int
	for rest := stream; len(rest) > 0; nFrames++ {
		h, _ := ParseHeader(rest)
		if int(h.Length) > 4096 {
			t.Fatalf("frame of %d bytes exceeds max 4096", h.Length)
		}
		rest = rest[HeaderSize+int(h.Length):]
	}
	if nFrames != 4 {
		t.Fatalf("split into %d frames; want 3 continued + 1 ping", nFrames)
	}
	fr := NewFrameReader(4096, 0)
	fr.Feed(stream)
	h, body, ok, err := fr.Next()
	if err != nil || !ok || h.Opcode != OpEnqueue || h.RequestID != 9 || h.Flags.Has(FlagContinued) {
		t.Fatalf("Next = %+v %v %v", h, ok, err)
	}
	var out Enqueue
	if err := out.Decode(body); err != nil || !bytes.Equal(out.Messages[0].Payload, payload) {
		t.Fatalf("reassembled decode = %v", err)
	}
	h, _, ok, err = fr.Next()
	if err != nil || !ok || h.Opcode != OpPing {
		t.Fatalf("frame after continuation = %+v %v %v", h, ok, err)
	}
}

func TestContinuationInterleavedIsViolation(t *testing.T) {
	var stream []byte
	stream = AppendHeader(stream, Header{Length: 1, Opcode: OpEnqueue, Flags: FlagContinued, RequestID: 1})
	stream = append(stream, 0)
	stream = AppendFrame(stream, 2, &Ping{})
	fr := NewFrameReader(0, 0)
	fr.Feed(stream)
	_, _, _, err := fr.Next()
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Code != CodeProtocolViolation {
		t.Fatalf("Next = %v; want PROTOCOL_VIOLATION", err)
	}
}

func TestContinuationLimit(t *testing.T) {
	fr := NewFrameReader(100, 250)
	var stream []byte
	for i := 0; i < 3; i++ {
		stream = AppendHeader(stream, Header{Length: 100, Opcode: OpEnqueue, Flags: FlagContinued, RequestID: 1})
		stream = append(stream, make([]byte, 100)...)
	}
	fr.Feed(stream)
	_, _, _, err := fr.Next()
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Code != CodeFrameTooLarge {
		t.Fatalf("Next = %v; want FRAME_TOO_LARGE", err)
	}
}

// TestFrameReaderSetLimits raises the limits between frames, as a server
// does once the handshake is done: the small limits refuse a large header
// at once; after SetLimits the same frame is read.
func TestFrameReaderSetLimits(t *testing.T) {
	big := AppendFrame(nil, 2, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 100<<10)}}})
	small := NewFrameReader(64<<10, 64<<10)
	small.Feed(big[:HeaderSize])
	var ce *ConnError
	if _, _, _, err := small.Next(); !errors.As(err, &ce) || ce.Code != CodeFrameTooLarge {
		t.Fatalf("Next under the small limits = %v; want FRAME_TOO_LARGE", err)
	}

	fr := NewFrameReader(64<<10, 64<<10)
	fr.Feed(AppendFrame(nil, 1, &Handshake{MaxVersion: 1, MinVersion: 1}))
	fr.Feed(big)
	if h, _, ok, err := fr.Next(); err != nil || !ok || h.Opcode != OpHandshake {
		t.Fatalf("first Next = %+v %v %v; want the Handshake", h, ok, err)
	}
	fr.SetLimits(16<<20, 0)
	if h, body, ok, err := fr.Next(); err != nil || !ok || h.Opcode != OpEnqueue || len(body) != len(big)-HeaderSize {
		t.Fatalf("Next after SetLimits = %+v %v %v; want the whole Enqueue", h, ok, err)
	}

	// The reassembly limit applies to continuations too.
	cont := NewFrameReader(64<<10, 64<<10)
	cont.Feed(AppendFrames(nil, 3, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 100<<10)}}}, 32<<10))
	if _, _, _, err := cont.Next(); !errors.As(err, &ce) || ce.Code != CodeFrameTooLarge {
		t.Fatalf("continuation over the small limits = %v; want FRAME_TOO_LARGE", err)
	}
}

// TestFrameReaderDropsLargeBuffer: after a large frame has been read, the
// reader does not keep its buffer.
func TestFrameReaderDropsLargeBuffer(t *testing.T) {
	fr := NewFrameReader(0, 0)
	fr.Feed(AppendFrame(nil, 1, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 4<<20)}}}))
	if _, _, ok, err := fr.Next(); !ok || err != nil {
		t.Fatalf("Next = %v %v", ok, err)
	}
	fr.Feed(AppendFrame(nil, 2, &Ping{}))
	if c := cap(fr.buf); c > keepBuffer {
		t.Fatalf("buffer capacity %d after a 4 MiB frame was read; want at most %d", c, keepBuffer)
	}
	if h, _, ok, err := fr.Next(); !ok || err != nil || h.Opcode != OpPing {
		t.Fatalf("Next = %+v %v %v; want the Ping", h, ok, err)
	}
}

// TestFrameReaderKeepsItsBuffer: frames of 66 KiB fed in reads of 64
// KiB, now and then piling up past keepBuffer, leave the reader with the
// buffer it had before the pile-up, not one regrown from nothing: after
// the first round, a round allocates nothing but (now and then) the
// pooled buffer.
func TestFrameReaderKeepsItsBuffer(t *testing.T) {
	frame := AppendFrame(nil, 1, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 66<<10)}}})
	stream := bytes.Repeat(frame, 5) // 330 KiB: more than keepBuffer at once
	ping := AppendFrame(nil, 2, &Ping{})
	fr := NewFrameReader(0, 0)
	round := func() {
		for off := 0; off < len(stream); off += 64 << 10 {
			fr.Feed(stream[off:min(off+64<<10, len(stream))])
		}
		for {
			_, _, ok, err := fr.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
		}
		fr.Feed(ping) // the reader is empty: gives up the pooled buffer
		if _, _, ok, _ := fr.Next(); !ok {
			t.Fatal("no Ping")
		}
	}
	round()
	if c := cap(fr.buf); c == 0 || c > keepBuffer {
		t.Fatalf("buffer capacity %d after a pile-up; want the small buffer back (at most %d)", c, keepBuffer)
	}
	if allocs := testing.AllocsPerRun(20, round); allocs > 2 {
		t.Errorf("%.1f allocations per round; want at most 2 (the pooled buffer, when the pool is empty)", allocs)
	}
}

// TestFrameReaderLargeFrameBuffer: a large frame fed in small reads ends in
// a buffer of its own size (rounded up to its size class, at most an
// eighth more), and Held reports the frame while it arrives.
func TestFrameReaderLargeFrameBuffer(t *testing.T) {
	frame := AppendFrame(nil, 1, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 3<<20)}}})
	fr := NewFrameReader(0, 0)
	for off := 0; off < len(frame)-1; off += 64 << 10 {
		fr.Feed(frame[off:min(off+64<<10, len(frame)-1)])
		if h := fr.Held(); h < fr.Buffered() || h > len(frame) {
			t.Fatalf("Held = %d with %d buffered; want between them and the frame's %d bytes", h, fr.Buffered(), len(frame))
		}
	}
	if c := cap(fr.buf); c < len(frame) || c > len(frame)+len(frame)/8 {
		t.Errorf("buffer capacity %d for a frame of %d bytes; want the frame's size, up to an eighth more", c, len(frame))
	}
	fr.Feed(frame[len(frame)-1:])
	if _, _, ok, err := fr.Next(); !ok || err != nil {
		t.Fatalf("Next = %v %v", ok, err)
	}
}

// TestFrameReaderHeldAnnounced: once the header of a large frame is in,
// Held reports the whole frame it announces, so a receiver can refuse it
// from the header instead of buffering its body first.
func TestFrameReaderHeldAnnounced(t *testing.T) {
	frame := AppendFrame(nil, 1, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 3<<20)}}})
	fr := NewFrameReader(0, 0)
	fr.Feed(frame[:HeaderSize+10])
	if _, _, ok, err := fr.Next(); ok || err != nil {
		t.Fatalf("Next = %v %v; want more bytes needed", ok, err)
	}
	if h := fr.Held(); h != len(frame) {
		t.Fatalf("Held = %d after the header; want the announced %d", h, len(frame))
	}
	small := AppendFrame(nil, 2, &Ping{})
	fr = NewFrameReader(0, 0)
	fr.Feed(small[:HeaderSize])
	if h := fr.Held(); h != HeaderSize {
		t.Fatalf("Held = %d for a small frame's header; want the %d bytes fed", h, HeaderSize)
	}
}

// TestSizeClass: a class's buffers hold what was asked, waste at most an
// eighth, and come back to the class they were taken from.
func TestSizeClass(t *testing.T) {
	last := -1
	for n := keepBuffer + 1; n <= maxPooledBuffer; n += 4093 {
		class, size := sizeClass(n)
		if size < n || size > n+n/8 || class < last {
			t.Fatalf("sizeClass(%d) = %d, %d; want a size from %d to %d, class not below %d", n, class, size, n, n+n/8, last)
		}
		if c2, s2 := sizeClass(size); c2 != class || s2 != size {
			t.Fatalf("sizeClass(%d) = %d, %d; want its own class %d", size, c2, s2, class)
		}
		last = class
	}
	b := getLarge(3 << 20)
	if len(b) < 3<<20 {
		t.Fatalf("getLarge(3 MiB) has length %d", len(b))
	}
	putLarge(b)
	putLarge(make([]byte, 3<<20+1)) // not a class size: dropped, no panic
}

// BenchmarkFrameReaderLargeFrames reads 8 MiB frames arriving in 64 KiB
// reads, as a producer of large batches sends them.
func BenchmarkFrameReaderLargeFrames(b *testing.B) {
	frame := AppendFrame(nil, 1, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 8<<20)}}})
	fr := NewFrameReader(16<<20, 0)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(frame); off += 64 << 10 {
			fr.Feed(frame[off:min(off+64<<10, len(frame))])
		}
		if _, _, ok, err := fr.Next(); !ok || err != nil {
			b.Fatalf("Next = %v %v", ok, err)
		}
	}
}
