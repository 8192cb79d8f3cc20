package peer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// encodeBatch returns the body of a frame holding msgs.
func encodeBatch(tb testing.TB, msgs []Message) []byte {
	tb.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = appendEntry(b, m.Group, m.Msg, proto.Size(m.Msg)); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

func sampleBatch() []Message {
	return []Message{
		{Group: 0, Msg: &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3)}},
		{Group: 1, Msg: &pb.Message{
			Type: pb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Term: proto.Uint64(3),
			LogTerm: proto.Uint64(3), Index: proto.Uint64(41), Commit: proto.Uint64(40),
			Entries: []*pb.Entry{
				{Term: proto.Uint64(3), Index: proto.Uint64(42), Type: pb.EntryType_EntryNormal.Enum(), Data: []byte("enqueue orders")},
				{Term: proto.Uint64(3), Index: proto.Uint64(43), Type: pb.EntryType_EntryNormal.Enum(), Data: bytes.Repeat([]byte{7}, 300)},
			},
		}},
		{Group: 1 << 40, Msg: &pb.Message{
			Type: pb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
			Snapshot: &pb.Snapshot{Data: []byte("queue state"), Metadata: &pb.SnapshotMetadata{
				Index: proto.Uint64(9), Term: proto.Uint64(2), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
			}},
		}},
		{Group: 7, Msg: &pb.Message{}}, // every field unset: an empty encoding
	}
}

func TestBatchRoundTrip(t *testing.T) {
	want := sampleBatch()
	body := encodeBatch(t, want)
	got, err := decodeBatch(body, nil)
	if err != nil {
		t.Fatalf("decodeBatch() = %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("decodeBatch() = %d messages; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Group != want[i].Group || !proto.Equal(got[i].Msg, want[i].Msg) {
			t.Errorf("message %d = group %d %v; want group %d %v", i, got[i].Group, got[i].Msg, want[i].Group, want[i].Msg)
		}
	}
	// The messages own their bytes: the reader reuses its buffer.
	clear(body)
	if !proto.Equal(got[1].Msg, want[1].Msg) {
		t.Errorf("message 1 changed with the frame's buffer: %v", got[1].Msg)
	}
	// Appending keeps what dst held.
	again, err := decodeBatch(encodeBatch(t, want[:1]), got[:2])
	if err != nil || len(again) != 3 || again[0].Group != want[0].Group {
		t.Errorf("decodeBatch(dst of 2) = %d messages, %v; want 3", len(again), err)
	}
	if got, err := decodeBatch(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("decodeBatch(empty) = %v, %v; want no messages", got, err)
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	good := encodeBatch(t, sampleBatch()[:1])
	tiny := bytes.Repeat([]byte{0, 0}, maxFrameEntries+1) // empty messages
	tests := []struct {
		name string
		body []byte
		say  string
	}{
		{"group cut short", []byte{0x80}, "group"},
		{"group overflows", bytes.Repeat([]byte{0xff}, 11), "group"},
		{"size cut short", []byte{1}, "size"},
		{"size overflows", append([]byte{1}, bytes.Repeat([]byte{0xff}, 11)...), "size"},
		{"size past the end", []byte{1, 5, 0, 0}, "5 bytes, 2 left"},
		{"second entry cut short", append(append([]byte{}, good...), 3), "entry 1"},
		{"not a message", []byte{1, 1, 0x0f}, "entry 0"},
		{"bad field in a message", []byte{1, 2, 0x08, 0x80}, "entry 0"},
		{"too many entries", tiny, "more than"},
	}
	for _, tt := range tests {
		dst := []Message{{Group: 99}}
		got, err := decodeBatch(tt.body, dst)
		if err == nil || !strings.Contains(err.Error(), tt.say) {
			t.Errorf("%s: decodeBatch(%x) = %v; want an error saying %q", tt.name, tt.body[:min(len(tt.body), 16)], err, tt.say)
		}
		if len(got) != 1 || got[0].Group != 99 {
			t.Errorf("%s: decodeBatch changed dst: %v", tt.name, got)
		}
	}
	// maxFrameEntries of them is fine.
	if got, err := decodeBatch(tiny[2:], nil); err != nil || len(got) != maxFrameEntries {
		t.Errorf("decodeBatch(%d empty entries) = %d, %v", maxFrameEntries, len(got), err)
	}
}

func TestAppendEntryChangedMessage(t *testing.T) {
	m := &pb.Message{Term: proto.Uint64(1)}
	size := proto.Size(m)
	m.Context = []byte("changed after Send")
	if _, err := appendEntry(nil, 1, m, size); err == nil || !strings.Contains(err.Error(), "changed after Send") {
		t.Errorf("appendEntry(changed message) = %v; want an error", err)
	}
}

func TestHello(t *testing.T) {
	b := appendHello(nil, 1<<63+5, "prod-eu")
	node, cluster, err := readHello(bytes.NewReader(b))
	if err != nil || node != 1<<63+5 || cluster != "prod-eu" {
		t.Fatalf("readHello(appendHello(…)) = %d, %q, %v; want %d, %q", node, cluster, err, uint64(1<<63+5), "prod-eu")
	}
	wrongVersion := bytes.Clone(b)
	wrongVersion[len(helloMagic)] = 2
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), errBadHello},
		{"version", wrongVersion, errBadHello},
		{"empty", nil, io.EOF},
		{"cut in the fixed part", b[:10], io.ErrUnexpectedEOF},
		{"cut in the cluster ID", b[:len(b)-1], io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		if _, _, err := readHello(bytes.NewReader(tt.in)); !errors.Is(err, tt.want) {
			t.Errorf("%s: readHello(%q) = %v; want %v", tt.name, tt.in, err, tt.want)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	batch := sampleBatch()
	f.Add(encodeBatch(f, batch))
	for _, m := range batch {
		f.Add(encodeBatch(f, []Message{m}))
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Add([]byte{1, 5, 0, 0})
	f.Add([]byte{1, 1, 0x0f})
	f.Add(binary.AppendUvarint([]byte{1}, 1<<62))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeBatch(body, nil)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("decodeBatch() = %d messages with error %v", len(got), err)
			}
			return
		}
		// What decodes encodes, and decodes again to the same messages.
		again, err := decodeBatch(encodeBatch(t, got), nil)
		if err != nil {
			t.Fatalf("decodeBatch(encoded) = %v", err)
		}
		if len(again) != len(got) {
			t.Fatalf("round trip: %d messages; want %d", len(again), len(got))
		}
		for i := range got {
			if again[i].Group != got[i].Group || !proto.Equal(again[i].Msg, got[i].Msg) {
				t.Fatalf("round trip: message %d = %d %v; want %d %v", i, again[i].Group, again[i].Msg, got[i].Group, got[i].Msg)
			}
		}
	})
}

func FuzzReadHello(f *testing.F) {
	f.Add(appendHello(nil, 1, "c"))
	f.Add(appendHello(nil, 1<<64-1, strings.Repeat("x", maxClusterID)))
	f.Add([]byte("FILAPEER"))
	f.Fuzz(func(t *testing.T, in []byte) {
		node, cluster, err := readHello(bytes.NewReader(in))
		if err != nil {
			return
		}
		if out := appendHello(nil, node, cluster); !bytes.HasPrefix(in, out) {
			t.Fatalf("readHello(%x) = %d, %q, which encodes as %x", in, node, cluster, out)
		}
	})
}

// FuzzReassembly: chunks never panic the reader, and what it puts
// together is exactly one entry.
func FuzzReassembly(f *testing.F) {
	entry, _ := appendEntry(nil, 3, &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), Snapshot: &pb.Snapshot{Data: []byte("state")}}, proto.Size(&pb.Message{Type: pb.MessageType_MsgSnap.Enum(), Snapshot: &pb.Snapshot{Data: []byte("state")}}))
	f.Add(entry, 3)
	f.Add(entry, 1)
	f.Add([]byte{0x80, 0x80}, 1)
	f.Add(binary.AppendUvarint([]byte{1}, 1<<40), 2)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		if cut <= 0 {
			cut = 1
		}
		var r reassembly
		for off := 0; off < len(stream); off += cut {
			out, err := r.add(stream[off:min(off+cut, len(stream))])
			if err != nil {
				return
			}
			if out != nil {
				if _, _, n, err := nextEntry(out); err != nil || n != len(out) {
					t.Fatalf("reassembled %d bytes: entry of %d, %v", len(out), n, err)
				}
			}
		}
	})
}
