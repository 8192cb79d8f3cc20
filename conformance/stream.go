package conformance

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// maxStreamFrame bounds a frame the replayers accept from the side under
// test, so a forged length cannot make them buffer without limit.
const maxStreamFrame = wire.DefaultMaxFrameSize + wire.HeaderSize

// An inbound is one logical frame read from the side under test.
type inbound struct {
	raw []byte
	h   wire.Header
	f   wire.Frame
	err error // decoding failed
}

func (in *inbound) String() string { return describeFrame(in.raw, in.err, in.h, in.f) }

// stream reads logical frames from a connection on its own goroutine, which
// ends when the connection does.
type stream struct {
	c      net.Conn
	frames chan *inbound
	quit   chan struct{} // closed by close
	done   chan struct{} // closed after the last frame
	err    error         // why reading stopped; io.EOF for a clean close
}

func newStream(c net.Conn) *stream {
	s := &stream{c: c, frames: make(chan *inbound, 64), quit: make(chan struct{}), done: make(chan struct{})}
	go s.read(c)
	return s
}

// close closes the connection and waits for the reading goroutine.
func (s *stream) close() {
	close(s.quit)
	s.c.Close()
	<-s.done
}

func (s *stream) read(c net.Conn) {
	defer close(s.done)
	var buf []byte
	chunk := make([]byte, 64<<10)
	for {
		for {
			fr, ok := nextFrame(buf)
			if !ok {
				if len(buf) >= wire.HeaderSize {
					if h, _ := wire.ParseHeader(buf); int64(h.Length)+wire.HeaderSize > maxStreamFrame {
						s.err = fmt.Errorf("a frame header announces %d bytes, more than %d", h.Length, maxStreamFrame)
						return
					}
				}
				break
			}
			raw := append([]byte(nil), fr...)
			buf = buf[len(fr):]
			h, f, err := decodeLogical(raw)
			select {
			case s.frames <- &inbound{raw: raw, h: h, f: f, err: err}:
			case <-s.quit:
				return
			}
		}
		n, err := c.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				err = fmt.Errorf("connection closed inside a frame, after %d bytes of it: %s", len(buf), shortHex(buf))
			}
			s.err = err
			return
		}
	}
}

// next returns the next frame, or nil with why there is none: the read
// error, or errTimeout after d.
func (s *stream) next(d time.Duration) (*inbound, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case in := <-s.frames:
		return in, nil
	case <-s.done:
		select {
		case in := <-s.frames:
			return in, nil
		default:
			return nil, s.err
		}
	case <-t.C:
		return nil, errTimeout
	}
}

// pending returns a frame already read, without waiting.
func (s *stream) pending() *inbound {
	select {
	case in := <-s.frames:
		return in
	default:
		return nil
	}
}

var errTimeout = errors.New("timed out")

// closeWrite half-closes c when it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
