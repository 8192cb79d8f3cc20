package sched

import (
	"fmt"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// Purged is PurgeQueue's result.
type Purged struct {
	// Count is the number of messages removed.
	Count uint64
}

// PurgeQueue removes every ready and delayed message of a queue or DLQ
// (delayed includes messages backing off after a failure and those
// waiting for an on_failure decision), and with includeLeased its leased
// messages too. Leased messages it keeps run on and can still be acked.
// The queue's idempotency keys and producers are kept: a message sent
// again within the dedup window is still a duplicate. The reply is a
// Purged, or an error wrapping fault.ErrQueueNotFound.
//
// Storage. The records of a queue's messages and of its DLQ's share one
// key range, ordered by message ID (record.go), and the messages kept
// (leased ones, and those of the other queue of the pair) may lie
// anywhere in it. PurgeQueue sorts the pair's messages by ID and deletes
// each maximal run of purged messages with one range delete of their
// message records and one of their state records: two mutations when
// nothing kept lies between purged messages (a queue without consumers,
// a DLQ beside an empty queue), and never more than two per message.
// Nothing is read back or rewritten. In memory it costs O(m log m) for
// the m messages of the queue and its DLQ.
func (s *Sched) PurgeQueue(ref Ref, name string, includeLeased bool) {
	q := s.queues[name]
	if q == nil {
		s.reply(ref, fmt.Errorf("purge queue %s: %w", name, fault.ErrQueueNotFound))
		return
	}
	purge := func(m *msg) bool {
		if s.queueOf(m) != q {
			return false
		}
		return m.state != stLeased || includeLeased
	}
	h := q.home()
	all := make([]mref, 0, h.msgs.len()+h.dlq.msgs.len())
	for x := range h.msgs.all() {
		all = append(all, x)
	}
	for x := range h.dlq.msgs.all() {
		all = append(all, x)
	}
	s.sortByID(all)
	home := h.name
	b := s.cur
	var n uint64
	for i := 0; i < len(all); {
		if !purge(s.msg(all[i])) {
			i++
			continue
		}
		j := i
		for j+1 < len(all) && purge(s.msg(all[j+1])) {
			j++
		}
		first, last := s.msg(all[i]).id, s.msg(all[j]).id
		// The key after the last one's: its key and a 0x00 byte.
		s.delRange(appendMsgKey(b.alloc(msgKeyLen(home))[:0], home, first),
			append(appendMsgKey(b.alloc(msgKeyLen(home) + 1)[:0], home, last), 0))
		s.delRange(appendStateKey(b.alloc(stateKeyLen(home))[:0], home, first),
			append(appendStateKey(b.alloc(stateKeyLen(home) + 1)[:0], home, last), 0))
		for k := i; k <= j; k++ {
			x := all[k]
			m := s.msg(x)
			s.leave(x, m)
			s.detach(x, m)
			s.freeMsg(x)
		}
		n += uint64(j - i + 1)
		i = j + 1
	}
	q.counts.Purged += n
	s.markDirty(q)
	s.reply(ref, Purged{Count: n})
}
