package wire

import (
	"fmt"
	"testing"
)

func enqueue100() *Enqueue {
	payload := make([]byte, 1024)
	f := &Enqueue{Messages: make([]EnqueueMessage, 100)}
	for i := range f.Messages {
		f.Messages[i] = EnqueueMessage{
			Queue:        "orders",
			Headers:      []MessageHeader{{Key: "tenant", Value: "acme"}},
			Payload:      payload,
			FairnessKey:  fmt.Sprint("tenant-", i%10),
			Weight:       1,
			ThrottleKeys: []string{"provider:stripe"},
		}
	}
	return f
}

func delivery100() *Delivery {
	payload := make([]byte, 1024)
	f := &Delivery{Messages: make([]DeliveredMessage, 100)}
	for i := range f.Messages {
		f.Messages[i] = DeliveredMessage{
			ID:                [16]byte{byte(i)},
			Queue:             "orders",
			Headers:           []MessageHeader{{Key: "tenant", Value: "acme"}},
			Payload:           payload,
			FairnessKey:       "tenant-3",
			Weight:            1,
			ThrottleKeys:      []string{"provider:stripe"},
			Attempt:           1,
			EnqueuedAtMS:      1700000000000,
			LeaseDeadlineAtMS: 1700000030000,
			Lease:             uint64(i),
		}
	}
	return f
}

// BenchmarkEncode100 encodes a batch of 100 messages of 1 KiB; ns/msg is
// per message.
func BenchmarkEncode100(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    Frame
	}{{"Enqueue", enqueue100()}, {"Delivery", delivery100()}} {
		b.Run(tc.name, func(b *testing.B) {
			buf := tc.f.AppendTo(nil)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendFrame(buf[:0], 1, tc.f)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
		})
	}
}

// BenchmarkDecode100 decodes a batch of 100 messages of 1 KiB; allocs/msg
// is per message (the target is at most 1).
func BenchmarkDecode100(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    Frame
	}{{"Enqueue", enqueue100()}, {"Delivery", delivery100()}} {
		b.Run(tc.name, func(b *testing.B) {
			body := tc.f.AppendTo(nil)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				f := New(tc.f.Opcode())
				if err := f.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
		})
	}
}

// TestDecodeAllocsPerMessage holds the decoder to at most one allocation
// per message for batches of 100.
func TestDecodeAllocsPerMessage(t *testing.T) {
	for _, f := range []Frame{enqueue100(), delivery100()} {
		body := f.AppendTo(nil)
		allocs := testing.AllocsPerRun(20, func() {
			g := New(f.Opcode())
			if err := g.Decode(body); err != nil {
				t.Fatal(err)
			}
		})
		if per := allocs / 100; per > 1 {
			t.Errorf("decode %v of 100 messages: %.2f allocations per message; want at most 1", f.Opcode(), per)
		}
	}
}
