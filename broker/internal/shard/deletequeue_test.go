package shard

import (
	"testing"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// countingStore is a store.Mem that remembers the number of mutations in
// each group it is given.
type countingStore struct {
	*store.Mem
	groups []int
}

func (c *countingStore) ApplyAsync(b *store.Batch, done func(error)) {
	c.groups = append(c.groups, b.Len())
	c.Mem.ApplyAsync(b, done)
}

// TestDeleteQueueByRange: deleting a queue that holds many messages
// writes one small group (range deletes, not one delete per message),
// leaves no record of the queue in storage, keeps the other queue's, and
// a shard reopened on that storage, or a queue created again under the
// name, starts with none of the old messages. Before range deletes were
// applied, the group's ranges deleted nothing and every record stayed.
func TestDeleteQueueByRange(t *testing.T) {
	st := &countingStore{Mem: store.NewMem()}
	defer st.Close()
	sh, err := Open(Config{Logger: quiet}, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q", "other"} {
		if r := call(t, sh, &CreateQueue{Spec: sched.QueueSpec{Name: q}}); r.Err != nil {
			t.Fatalf("CreateQueue %s = %v", q, r.Err)
		}
	}
	items := make([]sched.EnqueueItem, 500)
	for i := range items {
		items[i] = sched.EnqueueItem{Queue: "q", Msg: sched.Message{PayloadSize: 1, Body: []byte("x"), IdempotencyKey: string(rune('a' + i%26))}}
	}
	if r := call(t, sh, &Enqueue{Items: items}); r.Err != nil {
		t.Fatalf("Enqueue = %v", r.Err)
	}
	if r := enqueue(t, sh, "other"); r.Err != nil {
		t.Fatalf("Enqueue other = %v", r.Err)
	}
	before := len(st.groups)
	if r := call(t, sh, &DeleteQueue{Name: "q"}); r.Err != nil {
		t.Fatalf("DeleteQueue = %v", r.Err)
	}
	sh.Close()
	if got := st.groups[before:]; len(got) != 1 || got[0] > 8 {
		t.Errorf("DeleteQueue wrote groups of %v mutations; want one group of a few range deletes", got)
	}
	for _, r := range sched.QueueRanges("q") {
		st.ScanKeys(r.Start, r.End, func(k []byte) error {
			t.Errorf("key %q of the deleted queue is still stored", k)
			return nil
		})
	}
	kept := 0
	for _, r := range sched.QueueRanges("other") {
		st.ScanKeys(r.Start, r.End, func([]byte) error { kept++; return nil })
	}
	if kept == 0 {
		t.Error("the other queue's records were deleted too")
	}

	sh, err = Open(Config{Logger: quiet}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if r := stats(t, sh, "q"); r.Err == nil {
		t.Error("QueueStats of the deleted queue after reopening succeeded; want queue not found")
	}
	if r := call(t, sh, &CreateQueue{Spec: sched.QueueSpec{Name: "q"}}); r.Err != nil {
		t.Fatalf("CreateQueue again = %v", r.Err)
	}
	r := stats(t, sh, "q")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if s := r.Stats; s.Ready != 0 {
		t.Errorf("the queue created again holds %d ready messages; want 0", s.Ready)
	}
	if r := stats(t, sh, "other"); r.Err != nil || r.Stats.Ready != 1 {
		t.Errorf("other after reopening: %+v; want 1 ready", r)
	}
}
