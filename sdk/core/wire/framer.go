package wire

import (
	"fmt"
	"math/bits"
	"sync"
)

// A FrameReader splits a byte stream into frames. Bytes go in with Feed in
// pieces of any size (a frame may arrive one byte at a time, or many frames
// in one read); complete frames come out of Next.
//
// It enforces the receiver's limits before buffering: a header whose Length
// exceeds MaxFrame fails at once with FRAME_TOO_LARGE, so a forged length
// never causes an allocation, and the buffer only ever grows by the bytes
// actually fed. Frames flagged FlagContinued are reassembled, up to
// MaxReassembled bytes in all.
//
// After Next returns an error the reader is failed and returns it again.
// The zero value is not usable; make one with NewFrameReader.
type FrameReader struct {
	maxFrame       int
	maxReassembled int

	buf   []byte // buf[start:] holds unread bytes
	start int
	// small is the buffer of at most keepBuffer bytes that buf replaced
	// when it grew into a pooled one, taken back when that one is given
	// up: a stream of frames that now and then overflows keepBuffer does
	// not regrow the reader's buffer from nothing each time.
	small []byte

	// cont holds copies of the bodies of a continuation so far, contLen
	// their total: they are joined once, at the last frame, so a long
	// continuation costs its length twice at most, not the garbage of a
	// buffer grown by doubling.
	cont    [][]byte
	contLen int
	contHdr Header
	inCont  bool

	err error
	// scratch is where Room lets bytes be read once the reader has
	// failed, to be discarded.
	scratch []byte
}

// NewFrameReader returns a reader that accepts frame bodies of at most
// maxFrame bytes and reassembled bodies of at most maxReassembled bytes.
// Non-positive values take the protocol defaults (DefaultMaxFrameSize and
// MaxReassembledSize).
func NewFrameReader(maxFrame, maxReassembled int) *FrameReader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if maxReassembled <= 0 {
		maxReassembled = MaxReassembledSize
	}
	return &FrameReader{maxFrame: maxFrame, maxReassembled: maxReassembled}
}

// SetMaxFrame changes the largest accepted frame body, as agreed at
// handshake.
func (fr *FrameReader) SetMaxFrame(n int) {
	if n > 0 {
		fr.maxFrame = n
	}
}

// SetLimits changes both limits, for the frames whose headers Next has
// not read yet: a server accepts small frames until the handshake is done
// and its configured sizes after. Non-positive values take the protocol
// defaults, as in NewFrameReader.
func (fr *FrameReader) SetLimits(maxFrame, maxReassembled int) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if maxReassembled <= 0 {
		maxReassembled = MaxReassembledSize
	}
	fr.maxFrame, fr.maxReassembled = maxFrame, maxReassembled
}

// Reassembling returns the bytes the reader holds for a body being
// reassembled from continuation frames (the capacity of its buffer), 0
// when none is; a receiver bounding memory across connections charges it.
func (fr *FrameReader) Reassembling() int { return fr.contLen }

// Buffered returns the number of bytes fed and not yet returned as frames.
// After Next has reported that it needs more bytes, they are the bytes of
// the frame (or continuation) still arriving.
func (fr *FrameReader) Buffered() int { return len(fr.buf) - fr.start + fr.contLen }

// Held returns the memory the reader holds, or is about to hold, for
// input still arriving, in bytes: Buffered, or, once the header of a
// large frame is in, that whole frame as its header announces it (its
// buffer grows to it as the bytes arrive), plus a continuation's bodies
// so far. A receiver bounding memory across connections charges it, so
// a frame that could not fit in the budget is refused from its header,
// before its body is read.
func (fr *FrameReader) Held() int {
	n := fr.Buffered()
	if avail := fr.buf[fr.start:]; len(avail) >= HeaderSize {
		h, _ := ParseHeader(avail)
		if h.Length > keepBuffer && int64(h.Length) <= int64(fr.maxFrame) {
			n = max(n, HeaderSize+int(h.Length)+fr.contLen)
		}
	}
	return n
}

// keepBuffer is the largest buffer the reader keeps once it is empty; a
// larger one, grown for a large frame, is dropped, so a connection that
// once sent a large frame does not hold its memory while idle.
const keepBuffer = 256 << 10

// Feed appends p to the reader's buffer. p is copied. After Next has
// failed, Feed discards p.
func (fr *FrameReader) Feed(p []byte) {
	if fr.err != nil {
		return
	}
	fr.reclaim()
	if need := len(fr.buf) + len(p); need > cap(fr.buf) {
		fr.grow(need)
	}
	fr.buf = append(fr.buf, p...)
}

// Room returns at least n bytes of free space after the bytes buffered,
// for the caller to read into straight from its source; Fed(k) then
// takes the first k of them as fed. Bytes arrive without the copy Feed
// makes from the caller's buffer, and a receiver that reads a socket this
// way holds one buffer per connection instead of two. The space is valid
// until the next call of any method. After Next has failed, Room returns
// scratch space and Fed discards, as Feed does. n must be positive.
func (fr *FrameReader) Room(n int) []byte {
	if fr.err != nil {
		if len(fr.scratch) < n {
			fr.scratch = make([]byte, min(n, 4096))
		}
		return fr.scratch[:min(n, len(fr.scratch))]
	}
	fr.reclaim()
	if need := len(fr.buf) + n; need > cap(fr.buf) {
		fr.grow(need)
	}
	return fr.buf[len(fr.buf):cap(fr.buf)]
}

// Fed takes the first n bytes of the space Room returned as fed, as Feed
// would take them. n must be at most the length of that space.
func (fr *FrameReader) Fed(n int) {
	if fr.err != nil || n <= 0 {
		return
	}
	fr.buf = fr.buf[:len(fr.buf)+n]
}

// reclaim makes the space of the bytes Next has returned free again:
// an empty buffer starts over (a large one is given back for the small
// one it replaced), and unread bytes past half the buffer move to its
// front.
func (fr *FrameReader) reclaim() {
	if fr.start > 0 && fr.start == len(fr.buf) {
		if cap(fr.buf) > keepBuffer {
			putLarge(fr.buf)
			fr.buf, fr.small = fr.small, nil
		}
		fr.buf = fr.buf[:0]
		fr.start = 0
	} else if fr.start > 0 && fr.start >= cap(fr.buf)/2 {
		n := copy(fr.buf, fr.buf[fr.start:])
		fr.buf = fr.buf[:n]
		fr.start = 0
	}
}

// grow makes room for need bytes in buf. The capacity doubles (a large
// frame arriving in reads of a few KiB then costs about twice its size in
// allocations, where append's gentler growth for large slices costs four
// or five times), but, for a large frame whose header is in, never past
// its end: the buffer grows with the bytes fed, not with the length a
// header claims, and a complete large frame is held in a buffer of its
// own size.
func (fr *FrameReader) grow(need int) {
	c := max(2*cap(fr.buf), need, 4096)
	if avail := fr.buf[fr.start:]; len(avail) >= HeaderSize {
		h, _ := ParseHeader(avail)
		if int64(h.Length) <= int64(fr.maxFrame) && h.Length > keepBuffer {
			end := fr.start + HeaderSize + int(h.Length)
			c = max(min(c, end), need)
		}
	}
	nb := getLarge(c)[:len(fr.buf)]
	copy(nb, fr.buf)
	if cap(fr.buf) > keepBuffer {
		putLarge(fr.buf)
	} else if cap(nb) > keepBuffer && cap(fr.buf) > 0 {
		fr.small = fr.buf[:0]
	}
	fr.buf = nb
}

// Buffers larger than keepBuffer are recycled across readers, by size
// class: under a stream of large frames each would otherwise be a fresh,
// zeroed allocation of the frame's size (and its growth steps), garbage a
// moment later. A class spans an eighth of a power of two, so a buffer is
// at most an eighth larger than asked for; buffers over maxPooledBuffer
// are not kept. An idle pool empties at the garbage collector's pace
// (sync.Pool), so memory is not held for frames that stopped coming.
const (
	classesPerDoubling = 8
	maxPooledBuffer    = 64 << 20
)

var largeBufs [64 * classesPerDoubling]sync.Pool // of *[]byte, indexed by sizeClass

// sizeClass returns the class of a buffer of n bytes (n > keepBuffer) and
// the capacity of that class's buffers, the least class size >= n.
func sizeClass(n int) (class, size int) {
	shift := bits.Len(uint(n-1)) - 1 // 2^shift < n <= 2^(shift+1)
	step := 1 << (shift - 3)
	k := (n - 1 - 1<<shift) / step // 0..7
	return shift*classesPerDoubling + k, 1<<shift + (k+1)*step
}

// getLarge returns a buffer of length and capacity at least n; its bytes
// are not zeroed.
func getLarge(n int) []byte {
	if n <= keepBuffer || n > maxPooledBuffer {
		return make([]byte, n)
	}
	class, size := sizeClass(n)
	if p, _ := largeBufs[class].Get().(*[]byte); p != nil {
		return (*p)[:cap(*p)]
	}
	return make([]byte, size)
}

// putLarge gives b back for reuse; the caller no longer uses it.
func putLarge(b []byte) {
	n := cap(b)
	if n <= keepBuffer || n > maxPooledBuffer {
		return
	}
	class, size := sizeClass(n)
	if size != n {
		return // not one of ours
	}
	b = b[:0]
	largeBufs[class].Put(&b)
}

// Next returns the next complete frame. ok is false when more bytes are
// needed. body is valid until the next call to Feed, Room or Next; a
// caller that keeps decoded []byte fields longer must copy the body first.
//
// A *ConnError is returned for a frame over the size limit
// (FRAME_TOO_LARGE) or a continuation interleaved with another frame
// (PROTOCOL_VIOLATION).
func (fr *FrameReader) Next() (h Header, body []byte, ok bool, err error) {
	if fr.err != nil {
		return Header{}, nil, false, fr.err
	}
	for {
		avail := fr.buf[fr.start:]
		if len(avail) < HeaderSize {
			return Header{}, nil, false, nil
		}
		h, _ = ParseHeader(avail)
		if int64(h.Length) > int64(fr.maxFrame) {
			return fr.fail(&ConnError{Code: CodeFrameTooLarge,
				Reason: fmt.Sprintf("frame of %d bytes exceeds the max frame size %d", h.Length, fr.maxFrame)})
		}
		total := HeaderSize + int(h.Length)
		if len(avail) < total {
			return Header{}, nil, false, nil
		}
		body = avail[HeaderSize:total:total]
		fr.start += total

		if fr.inCont {
			if h.Opcode != fr.contHdr.Opcode || h.RequestID != fr.contHdr.RequestID {
				return fr.fail(&ConnError{Code: CodeProtocolViolation,
					Reason: fmt.Sprintf("frame %s for request %d interleaved with the continuation of %s for request %d",
						h.Opcode, h.RequestID, fr.contHdr.Opcode, fr.contHdr.RequestID)})
			}
			if fr.contLen+len(body) > fr.maxReassembled {
				return fr.fail(&ConnError{Code: CodeFrameTooLarge,
					Reason: fmt.Sprintf("continued frame exceeds %d bytes", fr.maxReassembled)})
			}
			if h.Flags.Has(FlagContinued) {
				fr.cont = append(fr.cont, append([]byte(nil), body...))
				fr.contLen += len(body)
				continue
			}
			joined := make([]byte, 0, fr.contLen+len(body))
			for _, c := range fr.cont {
				joined = append(joined, c...)
			}
			joined = append(joined, body...)
			fr.inCont = false
			h = fr.contHdr
			h.Length = uint32(len(joined))
			fr.cont, fr.contLen = nil, 0
			return h, joined, true, nil
		}
		if h.Flags.Has(FlagContinued) {
			fr.inCont = true
			fr.contHdr = h
			fr.contHdr.Flags &^= FlagContinued
			fr.cont = append(fr.cont[:0], append([]byte(nil), body...))
			fr.contLen = len(body)
			continue
		}
		return h, body, true, nil
	}
}

func (fr *FrameReader) fail(err *ConnError) (Header, []byte, bool, error) {
	fr.err = err
	fr.buf, fr.small, fr.cont, fr.contLen, fr.start = nil, nil, nil, 0, 0
	return Header{}, nil, false, err
}
