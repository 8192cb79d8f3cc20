package wire

import (
	"bytes"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

func drawList[T any](t *rapid.T, label string, max int, draw func(*rapid.T, string) T) []T {
	n := rapid.IntRange(0, max).Draw(t, label+"#len")
	if n == 0 {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = draw(t, label)
	}
	return out
}

func drawUUID(t *rapid.T, label string) (id [16]byte) {
	copy(id[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, label))
	return id
}

// TestRoundTrip checks decode(encode(x)) == x for random values of every
// frame, and that encoding is deterministic.
func TestRoundTrip(t *testing.T) {
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				in := tc.draw(rt)
				body := in.AppendTo(nil)
				out := New(in.Opcode())
				if err := out.Decode(body); err != nil {
					rt.Fatalf("Decode(AppendTo(%+v)) = %v", in, err)
				}
				if !reflect.DeepEqual(in, out) {
					rt.Fatalf("Decode(AppendTo(x)) = %+v; want %+v", out, in)
				}
				if again := out.AppendTo(nil); !bytes.Equal(again, body) {
					rt.Fatalf("re-encoding differs:\n%x\n%x", again, body)
				}
			})
		})
	}
}

// TestTruncatedBodies checks that every proper prefix of a valid body that
// ends inside a field fails with a *DecodeError, never a panic.
func TestTruncatedBodies(t *testing.T) {
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				in := tc.draw(rt)
				body := in.AppendTo(nil)
				for n := 0; n < len(body); n++ {
					out := New(in.Opcode())
					err := out.Decode(body[:n])
					if err == nil {
						continue // a prefix can be a valid shorter value: only panics matter
					}
					if _, ok := err.(*DecodeError); !ok {
						rt.Fatalf("Decode(prefix %d) error %T %v; want *DecodeError", n, err, err)
					}
				}
			})
		})
	}
}

func TestTrailingBytesIgnored(t *testing.T) {
	// Every field set, so that the body holds all this version knows.
	in := &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: []byte("hi"), FairnessKey: "t"}}, ProducerID: [16]byte{1}, Sequence: 7}
	body := in.AppendTo(nil)
	body = append(body, 0xde, 0xad) // a field of a later version
	var out Enqueue
	if err := out.Decode(body); err != nil {
		t.Fatalf("Decode with trailing bytes = %v; want nil", err)
	}
	if out.Messages[0].Queue != "q" || string(out.Messages[0].Payload) != "hi" || out.ProducerID != in.ProducerID || out.Sequence != 7 {
		t.Fatalf("Decode = %+v", out)
	}
}

func TestNestedTrailingBytesIgnored(t *testing.T) {
	// A struct item longer than the fields this version knows: the extra
	// bytes are skipped and the next item still decodes.
	var body []byte
	body = appendU32(body, 2)
	for _, q := range []string{"a", "b"} {
		item, at := beginStruct(nil)
		item = appendString(item, q)
		item = appendU32(item, 0)       // headers
		item = appendBytes(item, nil)   // payload
		item = appendString(item, "")   // fairness key
		item = appendU32(item, 1)       // weight
		item = appendU32(item, 0)       // throttle keys
		item = appendU64(item, 0)       // delay
		item = appendString(item, "")   // idempotency key
		item = appendString(item, "")   // ordering key
		item = appendU64(item, 0)       // ttl
		item = append(item, 0)          // priority
		item = append(item, 1, 2, 3, 4) // a later field
		item = endStruct(item, at)
		body = append(body, item...)
	}
	var out Enqueue
	if err := out.Decode(body); err != nil {
		t.Fatalf("Decode = %v", err)
	}
	if len(out.Messages) != 2 || out.Messages[1].Queue != "b" {
		t.Fatalf("Decode = %+v; want two messages a, b", out)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame Frame
		body  []byte
		field string
	}{
		{"short u16", &Pong{}, []byte{0, 0, 1}, "nonce"},
		{"bad bool", &GetConfigResult{}, []byte{2, 0, 0}, "found"},
		{"string past end", &GetConfig{}, []byte{0, 9, 'a'}, "key"},
		{"forged list count", &Enqueue{}, []byte{0xff, 0xff, 0xff, 0xff}, "messages"},
		{"item length past end", &Enqueue{}, []byte{0, 0, 0, 1, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.frame.Decode(tc.body)
			de, ok := err.(*DecodeError)
			if !ok {
				t.Fatalf("Decode(%x) = %v; want *DecodeError", tc.body, err)
			}
			if de.Field != tc.field {
				t.Errorf("Decode(%x) field = %q; want %q (%v)", tc.body, de.Field, tc.field, err)
			}
		})
	}
}

func TestDecodeErrorNamesNestedField(t *testing.T) {
	in := &Enqueue{Messages: []EnqueueMessage{{Queue: "a"}, {Queue: "b", Payload: []byte("xyz")}}}
	body := in.AppendTo(nil)
	// Corrupt the second item's payload length so it runs past the item.
	idx := bytes.Index(body, []byte("xyz"))
	body[idx-1] = 0x7f
	var out Enqueue
	err := out.Decode(body)
	de, ok := err.(*DecodeError)
	if !ok || de.Field != "messages[1].payload" {
		t.Fatalf("Decode = %v; want DecodeError at messages[1].payload", err)
	}
}

func TestStringsSharedAcrossBatch(t *testing.T) {
	in := &Enqueue{}
	for i := 0; i < 10; i++ {
		in.Messages = append(in.Messages, EnqueueMessage{Queue: "orders", FairnessKey: "acme", ThrottleKeys: []string{"stripe"}, Payload: []byte{byte(i)}})
	}
	body := in.AppendTo(nil)
	allocs := testing.AllocsPerRun(100, func() {
		var out Enqueue
		if err := out.Decode(body); err != nil {
			t.Fatal(err)
		}
	})
	// The frame's intern table, one slice of messages, then the first
	// item's queue, fairness key, throttle-key slice and its string; the
	// other nine share them.
	if allocs > 6 {
		t.Errorf("Decode of 10 alike messages: %v allocs; want at most 6", allocs)
	}
}

func TestPayloadAliasesBody(t *testing.T) {
	in := &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: []byte("hello")}}}
	body := in.AppendTo(nil)
	var out Enqueue
	if err := out.Decode(body); err != nil {
		t.Fatal(err)
	}
	idx := bytes.Index(body, []byte("hello"))
	body[idx] = 'J'
	if string(out.Messages[0].Payload) != "Jello" {
		t.Fatalf("payload = %q; want it to alias the body", out.Messages[0].Payload)
	}
}

func TestUnknownOpcode(t *testing.T) {
	f, err := DecodeFrame(Opcode(0x7777), []byte{1, 2, 3})
	if err != nil {
		t.Fatalf("DecodeFrame(unknown) = %v; want nil error", err)
	}
	u, ok := f.(*UnknownFrame)
	if !ok || u.Op != 0x7777 || !bytes.Equal(u.Body, []byte{1, 2, 3}) {
		t.Fatalf("DecodeFrame(unknown) = %#v", f)
	}
	if Opcode(0x7777).Kind() != KindUnknown {
		t.Errorf("Kind of unknown opcode = %v", Opcode(0x7777).Kind())
	}
}

func TestEveryRequestHasResponse(t *testing.T) {
	for op := Opcode(0); op < 0x0400; op++ {
		if op.Kind() == KindRequest && op.Response() == 0 {
			t.Errorf("%v: request without response", op)
		}
		if op.Kind() != KindUnknown && New(op) == nil {
			t.Errorf("New(%v) = nil", op)
		}
	}
}
