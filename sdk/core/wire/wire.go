// Package wire is the codec of the Fila wire protocol: the frame header, the
// primitive encodings, an incremental frame reader, and (generated from
// spec/protocol.toml) one Go type per frame with its encoder and decoder.
//
// The broker and every client share this package, so the two sides cannot
// disagree on a byte. docs/protocol.md is the language-neutral description;
// it is generated from the same spec.
//
// # Encoding
//
// Encoders append to a caller's buffer and never fail:
//
//	buf = wire.AppendFrame(buf[:0], reqID, &wire.Enqueue{Messages: msgs})
//
// Decoders fill a value from a frame body and never panic: every length is
// checked against the bytes present before anything is allocated, so a
// frame can cost at most about its own size in memory. Decoded []byte
// fields alias the body they were decoded from; strings are copies (a
// string equal to the same field of the previous item in a list is shared
// rather than copied again, which keeps batches cheap).
//
// # Forward compatibility
//
// A decoder ignores bytes after the fields it knows, both at the end of a
// frame body and at the end of each nested struct (nested structs carry
// their own length). A later protocol version may therefore append fields
// to any frame or struct; see docs/compatibility.md.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A Header is the fixed 12-byte prefix of every frame:
//
//	+-----------+-----------+----------+--------------+
//	| Length 4B | Opcode 2B | Flags 2B | RequestID 4B |
//	+-----------+-----------+----------+--------------+
//
// All integers are big-endian. Length counts the body bytes after the
// header, at most the receiver's max frame size (default 16 MiB).
type Header struct {
	Length    uint32
	Opcode    Opcode
	Flags     Flags
	RequestID uint32
}

// Flags are the header's bit flags.
type Flags uint16

// Has reports whether every bit of f2 is set in f.
func (f Flags) Has(f2 Flags) bool { return f&f2 == f2 }

// AppendHeader appends the 12 bytes of h to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = binary.BigEndian.AppendUint32(dst, h.Length)
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Opcode))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.Flags))
	return binary.BigEndian.AppendUint32(dst, h.RequestID)
}

// ParseHeader decodes a header from the first HeaderSize bytes of b.
// It returns ErrShortBuffer if b is shorter.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, ErrShortBuffer
	}
	return Header{
		Length:    binary.BigEndian.Uint32(b[0:4]),
		Opcode:    Opcode(binary.BigEndian.Uint16(b[4:6])),
		Flags:     Flags(binary.BigEndian.Uint16(b[6:8])),
		RequestID: binary.BigEndian.Uint32(b[8:12]),
	}, nil
}

// A Frame is a decoded frame body. Every frame type of the protocol
// implements it; so does *UnknownFrame.
type Frame interface {
	// Opcode returns the frame's opcode.
	Opcode() Opcode
	// AppendTo appends the encoded body (without header) to dst.
	AppendTo(dst []byte) []byte
	// Decode replaces the frame's fields with those decoded from body.
	// It returns a *DecodeError for a malformed body, never panics, and
	// allocates no more than the body's size justifies. []byte fields
	// alias body afterwards.
	Decode(body []byte) error
}

// An UnknownFrame is a frame whose opcode this version does not know. Its
// body is kept undecoded, as http2 keeps unknown frame types, so the
// receiver can answer UNKNOWN_OPCODE instead of failing the connection.
type UnknownFrame struct {
	Op   Opcode
	Body []byte
}

// Opcode returns the unknown opcode.
func (f *UnknownFrame) Opcode() Opcode { return f.Op }

// AppendTo appends the raw body.
func (f *UnknownFrame) AppendTo(dst []byte) []byte { return append(dst, f.Body...) }

// Decode keeps body as is.
func (f *UnknownFrame) Decode(body []byte) error { f.Body = body; return nil }

// DecodeFrame decodes body as the frame type of op. An unknown opcode gives
// an *UnknownFrame and no error.
func DecodeFrame(op Opcode, body []byte) (Frame, error) {
	f := New(op)
	if f == nil {
		return &UnknownFrame{Op: op, Body: body}, nil
	}
	if err := f.Decode(body); err != nil {
		return nil, err
	}
	return f, nil
}

// AppendFrame appends a complete frame (header and body of f) to dst.
// The body is not split: use AppendFrames when it may exceed the peer's
// max frame size.
func AppendFrame(dst []byte, requestID uint32, f Frame) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Opcode: f.Opcode(), RequestID: requestID})
	dst = f.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-HeaderSize))
	return dst
}

// AppendFrames appends f to dst as one frame, or, when its body is longer
// than maxFrame bytes, as a run of frames whose bodies are at most maxFrame
// bytes, all but the last flagged FlagContinued. maxFrame must be positive.
func AppendFrames(dst []byte, requestID uint32, f Frame, maxFrame int) []byte {
	start := len(dst)
	dst = AppendFrame(dst, requestID, f)
	bodyLen := len(dst) - start - HeaderSize
	if bodyLen <= maxFrame {
		return dst
	}
	// Split: copy the body out and re-emit it in chunks.
	body := append([]byte(nil), dst[start+HeaderSize:]...)
	dst = dst[:start]
	for len(body) > 0 {
		n := min(len(body), maxFrame)
		h := Header{Length: uint32(n), Opcode: f.Opcode(), RequestID: requestID}
		if n < len(body) {
			h.Flags = FlagContinued
		}
		dst = AppendHeader(dst, h)
		dst = append(dst, body[:n]...)
		body = body[n:]
	}
	return dst
}

// ErrShortBuffer is returned by ParseHeader for fewer than HeaderSize bytes.
var ErrShortBuffer = errors.New("wire: short buffer")

// ErrListTooLong is the cause of a *DecodeError for a list whose count
// exceeds the list's declared maximum (the Max* constants). The frame
// itself is well formed, so a receiver may refuse the request alone (the
// broker answers INVALID_ARGUMENT) and keep the connection.
var ErrListTooLong = errors.New("wire: list exceeds its maximum")

// A DecodeError describes a malformed frame body: which frame, which field,
// at which byte offset, and what was wrong.
type DecodeError struct {
	Frame  string // frame or struct being decoded, such as "Enqueue"
	Field  string // field being decoded, such as "messages[3].payload"; may be empty
	Offset int    // byte offset in the body where decoding failed
	Reason string
	// Err is the cause when it is one a receiver may act on
	// (ErrListTooLong), else nil.
	Err error
}

// Unwrap returns e.Err.
func (e *DecodeError) Unwrap() error { return e.Err }

func (e *DecodeError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("wire: decode %s: field %s at offset %d: %s", e.Frame, e.Field, e.Offset, e.Reason)
	}
	return fmt.Sprintf("wire: decode %s at offset %d: %s", e.Frame, e.Offset, e.Reason)
}

// A ConnError is a connection-scoped failure: the peer violated the protocol
// and the connection must be closed after telling it Code and Reason.
type ConnError struct {
	Code   Code
	Reason string
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("wire: connection error %s: %s", e.Code, e.Reason)
}
