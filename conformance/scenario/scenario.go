// Package scenario holds the conversations of the conformance corpus as Go
// code: each drives the Go SDK (package fila), or for bad input raw
// frames, through one connection. Recording one against a live broker
// writes the transcript testdata/<Name>.txt; running one against the fake
// broker of client mode checks the Go SDK against that transcript.
//
// The scenarios are sequential: each call waits for its result before the
// next, so the client's frames come in one order every run. Client
// authors in other languages port them (they are short) to drive their
// client in client mode; the transcript's client frames say what each step
// sends.
package scenario

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/fila-mq/fila/conformance"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// All returns every scenario, recorded and manual, sorted by name.
func All() []conformance.Scenario {
	all := append(append([]conformance.Scenario(nil), recorded...), manual...)
	slices.SortFunc(all, func(a, b conformance.Scenario) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return all
}

// Lookup returns the scenario named name.
func Lookup(name string) (conformance.Scenario, bool) {
	for _, sc := range All() {
		if sc.Name == name {
			return sc, true
		}
	}
	return conformance.Scenario{}, false
}

// waitFor bounds every wait of a scenario for the broker.
const waitFor = 15 * time.Second

// connect opens an SDK client on the session: no reconnection, since a
// transcript holds one connection.
func connect(ctx context.Context, s *conformance.Session, opts ...fila.Option) (*fila.Client, error) {
	return fila.Connect(ctx, s.Addr, append([]fila.Option{fila.WithDialer(s.Dial), fila.WithoutReconnect()}, opts...)...)
}

// next waits for sub's next delivery.
func next(ctx context.Context, sub *fila.Subscription) (*fila.Delivery, error) {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	select {
	case d, ok := <-sub.C():
		if !ok {
			return nil, fmt.Errorf("subscription to %s ended: %v", sub.Queue(), sub.Err())
		}
		return d, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no delivery from %s: %w", sub.Queue(), ctx.Err())
	}
}

// ended waits for sub to end and returns why.
func ended(ctx context.Context, sub *fila.Subscription) error {
	ctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for {
		select {
		case _, ok := <-sub.C():
			if !ok {
				return sub.Err()
			}
		case <-ctx.Done():
			return fmt.Errorf("subscription to %s did not end: %w", sub.Queue(), ctx.Err())
		}
	}
}

// want checks that err matches target (nil for success).
func want(step string, err, target error) error {
	switch {
	case target == nil && err != nil:
		return fmt.Errorf("%s: %w", step, err)
	case target != nil && !errors.Is(err, target):
		return fmt.Errorf("%s: got error %v; want %v", step, err, target)
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// rawConn speaks frames on a session's connection without a client core:
// for bad input, and for requests the SDK does not expose. It numbers
// requests like the core (Handshake 1, then 2, 3, ...) and sends the
// core's Handshake, so a transcript that uses only well-formed frames in
// that order also replays against the core.
type rawConn struct {
	s      *conformance.Session
	c      net.Conn
	fr     *wire.FrameReader
	nextID uint32
}

func dialRaw(ctx context.Context, s *conformance.Session) (*rawConn, error) {
	c, err := s.Dial(ctx, s.Addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{s: s, c: c, fr: wire.NewFrameReader(0, 0), nextID: 1}, nil
}

// id returns the next request ID.
func (r *rawConn) id() uint32 {
	id := r.nextID
	r.nextID++
	return id
}

func (r *rawConn) send(reqID uint32, f wire.Frame) error {
	_, err := r.c.Write(wire.AppendFrame(nil, reqID, f))
	return err
}

// request sends f with the next request ID and returns the answer.
func (r *rawConn) request(f wire.Frame) (wire.Header, wire.Frame, error) {
	id := r.id()
	if err := r.send(id, f); err != nil {
		return wire.Header{}, nil, err
	}
	return r.read()
}

func (r *rawConn) raw(b []byte) error { return r.s.WriteRaw(r.c, b) }

// handshake sends the core's Handshake and reads HandshakeOk.
func (r *rawConn) handshake() error {
	_, f, err := r.request(&wire.Handshake{
		MaxVersion: wire.ProtocolVersion, MinVersion: wire.MinProtocolVersion,
		ClientName: "fila-conformance", MaxFrameSize: wire.DefaultMaxFrameSize,
	})
	if err != nil {
		return err
	}
	if _, ok := f.(*wire.HandshakeOk); !ok {
		return fmt.Errorf("handshake answered with %v", f.Opcode())
	}
	return nil
}

// read returns the next frame from the broker.
func (r *rawConn) read() (wire.Header, wire.Frame, error) {
	buf := make([]byte, 64<<10)
	r.c.SetReadDeadline(time.Now().Add(waitFor))
	for {
		h, body, ok, err := r.fr.Next()
		if err != nil {
			return h, nil, err
		}
		if ok {
			f, err := wire.DecodeFrame(h.Opcode, append([]byte(nil), body...))
			return h, f, err
		}
		n, err := r.c.Read(buf)
		r.fr.Feed(buf[:n])
		if err != nil && n == 0 {
			return h, nil, err
		}
	}
}

// expectError reads a frame and checks it is an Error with code.
func (r *rawConn) expectError(code wire.Code) error {
	h, f, err := r.read()
	if err != nil {
		return err
	}
	ef, ok := f.(*wire.ErrorFrame)
	if !ok || ef.Code != code {
		return fmt.Errorf("got %v req=%d (%+v); want Error %v", h.Opcode, h.RequestID, f, code)
	}
	return nil
}

// expectClose reads the next frame and wants, instead, the connection
// closed by the broker: any frame is an error.
func (r *rawConn) expectClose() error {
	h, f, err := r.read()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("got %v req=%d (%+v); want the connection closed", h.Opcode, h.RequestID, f)
}

// header returns a frame header with an arbitrary length.
func header(length uint32, op wire.Opcode, reqID uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = binary.BigEndian.AppendUint16(b, uint16(op))
	b = binary.BigEndian.AppendUint16(b, 0)
	return binary.BigEndian.AppendUint32(b, reqID)
}

// steps collects the outcome of a scenario's calls, in order; the first
// unexpected one is the scenario's error.
type steps struct{ err error }

// want records the outcome of step: err must match target (nil for
// success).
func (s *steps) want(step string, err, target error) {
	if s.err == nil {
		s.err = want(step, err, target)
	}
}

// check records a condition on a step's result.
func (s *steps) check(step string, ok bool, format string, args ...any) {
	if s.err == nil && !ok {
		s.err = fmt.Errorf("%s: %s", step, fmt.Sprintf(format, args...))
	}
}

// second returns the error of a call with two results.
func second[T any](_ T, err error) error { return err }
