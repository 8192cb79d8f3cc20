package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// TestListMaximums encodes each bounded list at its maximum and one past
// it: the first decodes, the second fails with ErrListTooLong.
func TestListMaximums(t *testing.T) {
	headers := func(n int) []MessageHeader { return make([]MessageHeader, n) }
	strs := func(n int) []string { return make([]string, n) }
	perms := func(n int) []Permission {
		ps := make([]Permission, n)
		for i := range ps {
			ps[i].Kind = PermissionKindProduce
		}
		return ps
	}
	for _, tc := range []struct {
		name  string
		max   int
		frame func(n int) Frame
	}{
		{"Enqueue.messages", MaxEnqueueMessages, func(n int) Frame { return &Enqueue{Messages: make([]EnqueueMessage, n)} }},
		{"EnqueueMessage.headers", MaxEnqueueMessageHeaders, func(n int) Frame {
			return &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Headers: headers(n)}}}
		}},
		{"EnqueueMessage.throttle_keys", MaxEnqueueMessageThrottleKeys, func(n int) Frame {
			return &Enqueue{Messages: []EnqueueMessage{{Queue: "q", ThrottleKeys: strs(n)}}}
		}},
		{"Delivery headers", MaxDeliveredMessageHeaders, func(n int) Frame {
			return &Delivery{Messages: []DeliveredMessage{{Queue: "q", Headers: headers(n)}}}
		}},
		{"Ack.items", MaxAckItems, func(n int) Frame { return &Ack{Items: make([]LeaseRef, n)} }},
		{"Nack.items", MaxNackItems, func(n int) Frame { return &Nack{Items: make([]NackItem, n)} }},
		{"RetryAfter.items", MaxRetryAfterItems, func(n int) Frame { return &RetryAfter{Items: make([]RetryAfterItem, n)} }},
		{"ExtendLease.items", MaxExtendLeaseItems, func(n int) Frame { return &ExtendLease{Items: make([]ExtendLeaseItem, n)} }},
		{"Release.items", MaxReleaseItems, func(n int) Frame { return &Release{Items: make([]LeaseRef, n)} }},
		{"AckResult.results", MaxAckResultResults, func(n int) Frame { return &AckResult{Results: make([]ItemResult, n)} }},
		{"Subscribe.rate_limits", MaxSubscribeRateLimits, func(n int) Frame { return &Subscribe{Queue: "q", RateLimits: make([]RateLimit, n)} }},
		{"Handshake.capabilities", MaxHandshakeCapabilities, func(n int) Frame { return &Handshake{Capabilities: strs(n)} }},
		{"CreateApiKey.permissions", MaxCreateAPIKeyPermissions, func(n int) Frame { return &CreateAPIKey{Name: "k", Permissions: perms(n)} }},
		{"SetAcl.permissions", MaxSetACLPermissions, func(n int) Frame { return &SetACL{KeyID: "k", Permissions: perms(n)} }},
		{"MoveQueue.replicas", MaxMoveQueueReplicas, func(n int) Frame { return &MoveQueue{Queue: "q", Replicas: make([]uint64, n)} }},
		{"ClusterGroup.target", MaxClusterGroupTarget, func(n int) Frame {
			return &ClusterStatusResult{NodeID: 1, Groups: []ClusterGroup{{GroupID: 2, Queue: "q", Target: make([]uint64, n)}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.frame(tc.max)
			if err := New(at.Opcode()).Decode(at.AppendTo(nil)); err != nil {
				t.Fatalf("Decode(%d items) = %v; want success", tc.max, err)
			}
			over := tc.frame(tc.max + 1)
			err := New(over.Opcode()).Decode(over.AppendTo(nil))
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrListTooLong) {
				t.Fatalf("Decode(%d items) = %v; want a *DecodeError wrapping ErrListTooLong", tc.max+1, err)
			}
			if want := fmt.Sprintf("exceeds the maximum of %d", tc.max); !contains(de.Reason, want) {
				t.Errorf("reason %q does not say %q", de.Reason, want)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// forgedHeaders returns an Enqueue body of one message whose header list
// claims count headers and really holds them (empty key and value, 8
// bytes each), so only the declared maximum can refuse it.
func forgedHeaders(count int) []byte {
	var msg []byte
	msg = appendString(msg, "q")
	msg = binary.BigEndian.AppendUint32(msg, uint32(count))
	for range count {
		msg = append(msg, 0, 0, 0, 4, 0, 0, 0, 0) // struct of 4 bytes: two empty strings
	}
	msg = appendBytes(msg, nil) // payload
	msg = appendString(msg, "") // fairness_key
	msg = appendU32(msg, 0)     // weight
	msg = appendU32(msg, 0)     // throttle_keys
	msg = appendU64(msg, 0)     // delay_ms
	msg = appendString(msg, "") // idempotency_key
	msg = appendString(msg, "") // ordering_key
	body := binary.BigEndian.AppendUint32(nil, 1)
	body = binary.BigEndian.AppendUint32(body, uint32(len(msg)))
	return append(body, msg...)
}

// TestForgedHeaderCountRefusedBeforeAllocating decodes a message with
// 300,000 headers, every byte of them present (2.4 MB, a body that fits
// the default max frame size): the decoder must refuse the count before it
// allocates the list, not decode the headers and leave the broker to count
// them.
func TestForgedHeaderCountRefusedBeforeAllocating(t *testing.T) {
	body := forgedHeaders(300_000)
	var m Enqueue
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := m.Decode(body)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrListTooLong) {
		t.Fatalf("Decode = %v; want ErrListTooLong", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Fatalf("refusing %d headers allocated %d bytes; want the count refused before allocating", 300_000, alloc)
	}
	allocs := testing.AllocsPerRun(10, func() { m.Decode(body) })
	if allocs > 16 {
		t.Fatalf("refusing the count took %.0f allocations; want a few, not one per header", allocs)
	}
}

// TestOptionalFieldFromOlderPeer: a HandshakeOk from a broker that
// predates max_batch_size ends before it, and decodes with it zero.
func TestOptionalFieldFromOlderPeer(t *testing.T) {
	full := (&HandshakeOk{Version: 1, NodeID: "n", MaxFrameSize: 4096, ServerName: "s", MaxBatchSize: 7}).AppendTo(nil)
	old := full[:len(full)-4]
	var m HandshakeOk
	if err := m.Decode(old); err != nil || m.MaxBatchSize != 0 || m.ServerName != "s" {
		t.Fatalf("Decode(older body) = %+v, %v; want MaxBatchSize 0 and the rest", m, err)
	}
	if err := m.Decode(full[:len(full)-2]); err == nil {
		t.Fatalf("Decode(body ending inside max_batch_size) succeeded; want truncated")
	}
	if err := m.Decode(full); err != nil || m.MaxBatchSize != 7 {
		t.Fatalf("Decode(full) = %+v, %v", m, err)
	}
}

// TestClusterMoveFieldsFromOlderPeer: a ClusterStatusResult from a
// broker that predates moves, whose groups end after first_index and
// whose replicas end after lag, decodes with no target and no learner.
func TestClusterMoveFieldsFromOlderPeer(t *testing.T) {
	replica := appendU64(appendU64(appendBool(appendU64(nil, 3), true), 9), 1) // node_id known match lag
	group := appendU64(nil, 2)                                                 // group_id
	group = appendString(group, "q")
	for range 5 { // leader_node_id term commit applied last_index
		group = appendU64(group, 7)
	}
	group = appendU32(group, 1)
	group = appendU32(group, uint32(len(replica)))
	group = append(group, replica...)
	group = appendU64(appendBool(group, true), 1) // quiesced first_index
	body := appendU32(appendU32(appendU64(nil, 1), 0), 1)
	body = appendU32(body, uint32(len(group)))
	body = append(body, group...)
	var m ClusterStatusResult
	if err := m.Decode(body); err != nil {
		t.Fatal(err)
	}
	if len(m.Groups) != 1 {
		t.Fatalf("Decode(older body) = %+v; want one group", m)
	}
	g := m.Groups[0]
	if g.Target != nil || !g.Quiesced || g.FirstIndex != 1 || len(g.Replicas) != 1 || g.Replicas[0].Learner || g.Replicas[0].Lag != 1 {
		t.Errorf("Decode(older body) group = %+v; want no target, no learner, the older fields", g)
	}
	// A replica that is no learner is still an older peer's bytes.
	if got := (&ClusterReplica{NodeID: 3, Known: true, Match: 9, Lag: 1}).appendTo(nil); string(got[4:]) != string(replica) {
		t.Errorf("a voter's replica encodes as %x; want %x", got[4:], replica)
	}
}

// TestZeroOptionalFieldsOmitted: an Enqueue without a producer is, byte
// for byte, the body of a peer that predates producer_id and sequence;
// the optional fields are sent up to the last one that is not zero.
func TestZeroOptionalFieldsOmitted(t *testing.T) {
	msgs := []EnqueueMessage{{Queue: "q", Payload: []byte("x")}}
	old := appendU32(nil, 1)
	old = msgs[0].appendTo(old)
	for _, tc := range []struct {
		in   Enqueue
		tail int // bytes after the messages
	}{
		{Enqueue{Messages: msgs}, 0},
		{Enqueue{Messages: msgs, ProducerID: [16]byte{1}}, 16},
		{Enqueue{Messages: msgs, ProducerID: [16]byte{1}, Sequence: 9}, 24},
		{Enqueue{Messages: msgs, Sequence: 9}, 24},
	} {
		body := tc.in.AppendTo(nil)
		if string(body[:len(old)]) != string(old) || len(body) != len(old)+tc.tail {
			t.Errorf("AppendTo(producer %x, sequence %d) = %d bytes; want the older body and %d more", tc.in.ProducerID[0], tc.in.Sequence, len(body), tc.tail)
		}
		var out Enqueue
		if err := out.Decode(body); err != nil || out.ProducerID != tc.in.ProducerID || out.Sequence != tc.in.Sequence {
			t.Errorf("Decode(AppendTo(%+v)) = %+v, %v", tc.in, out, err)
		}
	}
}

// TestClusterNodeStateFromOlderPeer: a ClusterNode from a broker that
// predates drains ends after connected and decodes with no state; a node
// with no state encodes as those older bytes, and a DrainNode that does
// not undo as its node ID alone.
func TestClusterNodeStateFromOlderPeer(t *testing.T) {
	node := appendBool(appendString(appendString(appendU64(nil, 2), "b:1"), "b:2"), true) // node_id addr peer_addr connected
	body := appendU32(appendU64(nil, 2), 1)
	body = appendU32(body, uint32(len(node)))
	body = append(body, node...)
	body = appendU32(body, 0) // no groups
	var m ClusterStatusResult
	if err := m.Decode(body); err != nil {
		t.Fatal(err)
	}
	if len(m.Nodes) != 1 || m.Nodes[0] != (ClusterNode{NodeID: 2, Addr: "b:1", PeerAddr: "b:2", Connected: true}) {
		t.Errorf("Decode(older body) = %+v; want node 2 with no state", m)
	}
	if got := (&ClusterNode{NodeID: 2, Addr: "b:1", PeerAddr: "b:2", Connected: true}).appendTo(nil); string(got[4:]) != string(node) {
		t.Errorf("a node with no state encodes as %x; want %x", got[4:], node)
	}
	withState := (&ClusterNode{NodeID: 2, Addr: "b:1", PeerAddr: "b:2", Connected: true, State: "draining"}).appendTo(nil)
	if want := appendString(node, "draining"); string(withState[4:]) != string(want) {
		t.Errorf("a draining node encodes as %x; want %x", withState[4:], want)
	}
	if got := (&DrainNode{NodeID: 3}).AppendTo(nil); string(got) != string(appendU64(nil, 3)) {
		t.Errorf("DrainNode{NodeID: 3} encodes as %x; want the node ID alone", got)
	}
	var d DrainNode
	if err := d.Decode(appendU64(nil, 3)); err != nil || d != (DrainNode{NodeID: 3}) {
		t.Errorf("Decode(node ID alone) = %+v, %v; want node 3, no undo", d, err)
	}
}
