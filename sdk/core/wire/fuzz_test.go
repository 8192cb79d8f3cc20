package wire

import (
	"runtime"
	"testing"

	"pgregory.net/rapid"
)

// FuzzDecode decodes arbitrary bodies as every opcode. A decode must never
// panic, a successful decode must re-encode to a body that decodes to the
// same value, and decoding must not allocate far more than the body's size.
func FuzzDecode(f *testing.F) {
	for _, tc := range roundTripCases {
		gen := rapid.Custom(func(t *rapid.T) Frame {
			_ = rapid.Bool().Draw(t, "seed") // frames without fields draw nothing else
			return tc.draw(t)
		})
		for i := 0; i < 3; i++ {
			fr := gen.Example(i)
			f.Add(uint16(fr.Opcode()), fr.AppendTo(nil))
		}
	}
	// A header list longer than its maximum, every header present.
	f.Add(uint16(OpEnqueue), forgedHeaders(MaxEnqueueMessageHeaders+1))
	f.Fuzz(func(t *testing.T, op uint16, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fr, err := DecodeFrame(Opcode(op), body)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(16*len(body)+64<<10) {
			t.Fatalf("decoding %d bytes as %v allocated %d bytes", len(body), Opcode(op), alloc)
		}
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T %v; want *DecodeError", err, err)
			}
			return
		}
		again := fr.AppendTo(nil)
		fr2, err := DecodeFrame(Opcode(op), again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if string(fr2.AppendTo(nil)) != string(again) {
			t.Fatalf("re-encoding is not stable")
		}
	})
}

// FuzzFrameReader feeds arbitrary bytes in arbitrary splits: never a panic,
// never a buffer beyond the bytes fed.
func FuzzFrameReader(f *testing.F) {
	stream := AppendFrame(nil, 1, &Handshake{MaxVersion: 1, MinVersion: 1})
	stream = AppendFrames(stream, 2, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: make([]byte, 300)}}}, 128)
	f.Add(stream, uint8(7))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0, 0, 0, 0, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		fr := NewFrameReader(4096, 1<<16)
		step := int(chunk%64) + 1
		for len(data) > 0 {
			n := min(step, len(data))
			fr.Feed(data[:n])
			data = data[n:]
			for {
				h, body, ok, err := fr.Next()
				if err != nil || !ok {
					break
				}
				if len(body) != int(h.Length) {
					t.Fatalf("body %d bytes; header says %d", len(body), h.Length)
				}
				_, _ = DecodeFrame(h.Opcode, body)
			}
		}
	})
}
