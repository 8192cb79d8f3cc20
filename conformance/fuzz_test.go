package conformance

import (
	"bytes"
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// FuzzLayout feeds arbitrary bodies to the field layout, which reads the
// bytes of any peer: it must not panic, and its spans must stay in order
// within the body.
func FuzzLayout(f *testing.F) {
	f.Add(uint16(wire.OpEnqueue), wire.AppendFrame(nil, 1, &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "q", Payload: []byte("x")}}})[wire.HeaderSize:])
	f.Add(uint16(wire.OpDelivery), []byte{0, 0, 0, 1, 0, 0, 0, 200})
	f.Fuzz(func(t *testing.T, op uint16, body []byte) {
		spans, _ := layout(wire.Opcode(op), body)
		end := 0
		for _, s := range spans {
			if s.start < end || s.end < s.start || s.end > len(body) {
				t.Fatalf("layout(%v): span %s at %d-%d after %d, body %d bytes", wire.Opcode(op), s.name(), s.start, s.end, end, len(body))
			}
			end = s.end
		}
		frame := append(wire.AppendHeader(nil, wire.Header{Length: uint32(len(body)), Opcode: wire.Opcode(op)}), body...)
		for off := range frame {
			fieldAt(frame, off)
		}
		hexLines(frame)
	})
}

// FuzzParse feeds arbitrary transcripts to the parser: it must not panic,
// and what it accepts must format to text it parses to the same text.
func FuzzParse(f *testing.F) {
	f.Add([]byte("client\nPing req=2 nonce=$n\n----\n00000008 0003 0000 00000002 0000000000000001\n"))
	f.Add([]byte("nodes a=h:1 b=h:2\n\ntargets core\n\nclient @b\nPing req=2 nonce=$n\n\nserver close @a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		out := tr.Format()
		tr2, err := Parse("fuzz", out)
		if err != nil {
			t.Fatalf("Parse(Format(%q)) = %v", data, err)
		}
		if !bytes.Equal(tr2.Format(), out) {
			t.Fatalf("Format is not stable for %q", data)
		}
		tr.CheckHex(true)
	})
}

// FuzzFrameNotation feeds arbitrary notation to the frame parser: it must
// not panic, and a frame it accepts must encode.
func FuzzFrameNotation(f *testing.F) {
	f.Add(`Enqueue req=2 messages=[{queue="q" payload="a\x00" weight=2 throttle_keys=["k"]}]`)
	f.Add(`AckResult req=5 results=[{code=LEASE_EXPIRED message="ack ${id1}: $$"}]`)
	f.Fuzz(func(t *testing.T, text string) {
		fp, err := parseFrame(text, 1)
		if err != nil {
			return
		}
		fp.encode(newBindings())
	})
}
