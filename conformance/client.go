package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// ClientOptions configures ServeClient.
type ClientOptions struct {
	// Timeout bounds the wait for each frame the client should send, and
	// for the client to connect; 0 means DefaultTimeout.
	Timeout time.Duration
}

// ServeClient plays the broker's side of t, as a fake broker, to the first
// client that connects to ln, and checks every byte the client sends.
//
// Server frames are written as the transcript's hex, placeholders taking
// their canonical values (or the client's, when the client sent them
// first). Each client frame the transcript lists must arrive, in order; a
// frame that differs is reported field by field, with the byte offsets of
// every difference, and the conversation goes on. A client that sends
// nothing within the timeout, or closes the connection early, ends it.
//
// It returns a *Failure listing every mismatch, or nil when the client
// sent exactly the transcript's bytes.
func ServeClient(ctx context.Context, t *Transcript, ln net.Listener, opts ClientOptions) error {
	if !t.Applies("client") {
		return nil
	}
	if _, err := t.CheckHex(false); err != nil {
		return err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	var c net.Conn
	select {
	case a := <-ch:
		if a.err != nil {
			return fmt.Errorf("conformance: %s: accept: %w", t.Name, a.err)
		}
		c = a.c
	case <-ctx.Done():
		ln.Close()
		return fmt.Errorf("conformance: %s: no client connected: %w", t.Name, ctx.Err())
	}
	r := &clientRun{t: t, opts: opts, b: newBindings(), c: c, in: newStream(c)}
	defer r.in.close()
	r.run()
	if len(r.mm) > 0 {
		return &Failure{Transcript: t.Name, Target: "client", Mismatches: r.mm}
	}
	return nil
}

type clientRun struct {
	t    *Transcript
	opts ClientOptions
	b    *bindings
	c    net.Conn
	in   *stream
	mm   []*Mismatch
}

func (r *clientRun) mismatch(line int, what string) *Mismatch {
	m := &Mismatch{Transcript: r.t.Name, Line: line, What: what}
	r.mm = append(r.mm, m)
	return m
}

func (r *clientRun) run() {
	// Consecutive server blocks go out in one write, as a broker's
	// writer batches them, so a client reads them together.
	var out []byte
	var first *Block
	flush := func() bool {
		if len(out) == 0 {
			return true
		}
		ok := r.write(first, out)
		out, first = nil, nil
		return ok
	}
	for _, bl := range r.t.Blocks {
		if bl.kind != bServerFrame && bl.kind != bServerRaw && bl.kind != bEvents && bl.kind != bTick {
			if !flush() {
				return
			}
		}
		switch bl.kind {
		case bServerFrame:
			raw, err := bl.frame.encode(r.b)
			if err != nil {
				r.mismatch(bl.Line, err.Error())
				return
			}
			out = append(out, raw...)
			if first == nil {
				first = bl
			}
		case bServerRaw:
			out = append(out, bl.raw...)
			if first == nil {
				first = bl
			}
		case bServerClose:
			closeWrite(r.c)
		case bClientRaw:
			r.mismatch(bl.Line, "raw client bytes cannot be expected of a client: the transcript should not target client")
			return
		case bClientFrame:
			if !r.clientFrame(bl) {
				return
			}
		case bClientClose:
			r.clientClose(bl)
			return
		}
	}
	if !flush() {
		return
	}
	if in := r.in.pending(); in != nil {
		m := r.mismatch(0, "the client sent a frame after the transcript's end")
		m.Got = in.String()
	}
}

func (r *clientRun) write(bl *Block, raw []byte) bool {
	r.c.SetWriteDeadline(time.Now().Add(r.opts.Timeout))
	if _, err := r.c.Write(raw); err != nil {
		// A client that closed after its last frame may not read the
		// broker's last words; that is no mismatch.
		for _, later := range r.t.Blocks {
			if later.Line > bl.Line && later.kind == bClientFrame {
				r.mismatch(bl.Line, "writing to the client failed: "+err.Error())
				return false
			}
		}
		return false
	}
	return true
}

func (r *clientRun) clientFrame(bl *Block) bool {
	in, err := r.in.next(r.opts.Timeout)
	if in == nil {
		what := fmt.Sprintf("the client sent nothing within %v", r.opts.Timeout)
		if !errors.Is(err, errTimeout) {
			what = "the client closed the connection (" + err.Error() + ")"
		}
		m := r.mismatch(bl.Line, what+"; want "+bl.frame.op.String())
		m.Want = strings.Join(bl.Input, "\n")
		return false
	}
	m := newMatcher(r.b)
	if in.err == nil {
		m.matchFrame(bl.frame, in.h, in.f)
	}
	diffs := m.diffs
	scratch := m.scratch()
	m.commit()
	want, err := bl.frame.encode(scratch)
	if err != nil {
		r.mismatch(bl.Line, err.Error())
		return false
	}
	if in.err == nil && len(diffs) == 0 && bytes.Equal(want, in.raw) {
		return true
	}
	what := "the client's frame differs from the transcript's " + bl.frame.op.String()
	if in.err != nil {
		what = "the client sent an undecodable frame (" + in.err.Error() + "); want " + bl.frame.op.String()
	}
	mm := r.mismatch(bl.Line, what)
	mm.Fields = fieldLines(diffs)
	mm.Bytes = byteDiff(want, in.raw)
	mm.Want = strings.Join(bl.Input, "\n")
	mm.Got = in.String()
	return true
}

// clientClose waits for the client to close the connection.
func (r *clientRun) clientClose(bl *Block) {
	for {
		in, err := r.in.next(r.opts.Timeout)
		if in != nil {
			m := r.mismatch(bl.Line, "the client sent a frame where it should close the connection")
			m.Got = in.String()
			continue
		}
		if errors.Is(err, errTimeout) {
			r.mismatch(bl.Line, fmt.Sprintf("the client did not close the connection within %v", r.opts.Timeout))
		} else if !errors.Is(err, io.EOF) && !isReset(err) {
			r.mismatch(bl.Line, "the connection failed where the client should close it: "+err.Error())
		}
		return
	}
}
