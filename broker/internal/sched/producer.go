package sched

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// Idempotent producers. A producer stamps each message with its producer
// ID and a sequence number that increases across its frames, so that it
// can resend the frames it got no answer to (the connection was lost, the
// leader changed) without enqueueing their messages twice.
//
// Each queue remembers, per producer, the message IDs of the producer's
// last Config.ProducerSeqs sequences (1024) enqueued to it, and a floor:
// the sequences below it were forgotten to keep that bound. An item whose
// producer and sequence the queue remembers is a duplicate: nothing is
// enqueued, and its result is the first message's ID with Duplicate set.
// A sequence below the floor fails with fault.ErrInvalidArgument, since
// it may be a duplicate the queue no longer recognises. Any other
// sequence is new, whether above the producer's highest or in a gap below
// it: a producer's frames go to many queues, and a part of a frame may
// have failed and be resent alone, so a queue sees gaps and, rarely,
// sequences out of order. A producer without an accepted message for the
// queue's dedup window is forgotten whole.
//
// A duplicate by idempotency key (checked after the sequence) is
// remembered under its sequence too, with the first message's ID, so its
// resend gets the same answer.
//
// The scheduler reads no clock: a producer expires at the time of its
// last accepted message (the clock of the Tick before it) plus the
// window. Producers expire in order of that time, then of their IDs, so
// the queue keeps them in a list, and its place in Sched.expiry is the
// earlier of its first key expiry and its first producer expiry.
//
// In storage (s/prd/, see record.go), a producer is a header record
// (floor, expiry), rewritten by each Enqueue command that remembers a
// sequence of it, and one run record per such command: the sequences the
// command remembered and their IDs, keyed by the highest. Sequences are
// forgotten lowest first, so a run record is deleted when its highest
// sequence is: the ring marks the sequences that end a run. Restoring
// skips the entries of a run below the floor.
//
// Memory per producer per queue, measured (BenchmarkProducerFootprint):
// about 310 bytes with one sequence remembered (the struct, its map slot,
// a ring of 4), and 24 bytes per remembered sequence (the ring grows by
// doubling, to the power of 2 at or above ProducerSeqs, with a mark bit
// per slot): 24.3 KiB at the default bound of 1024, however the
// producer's frames are cut.

// pentry is one remembered sequence.
type pentry struct {
	seq uint64
	id  [16]byte
}

// A producer is the state of one idempotent producer on one queue.
type producer struct {
	id      [16]byte
	q       *queue
	floor   uint64 // sequences below were forgotten
	expires Time   // forgotten then unless a message of it is accepted
	// ents[(head+i) & (len(ents)-1)], for i < n, are the remembered
	// sequences in increasing order; len(ents) is 0 or a power of 2.
	// Bit k of ends (k indexes ents) marks a sequence that ends a run
	// record, its key.
	ents    []pentry
	ends    []uint64
	head, n int
	// runs holds the run keys Restore found, until sortProducers marks
	// them.
	runs []uint64
	// next and prev link it in its queue's list, by expiry.
	next, prev *producer
	// touched is 1 + its index in Sched.ptouched while an Enqueue
	// command runs, 0 otherwise.
	touched int
}

type pendEntry struct {
	t int // index in Sched.ptouched
	e pentry
}

func (p *producer) slot(i int) int   { return (p.head + i) & (len(p.ents) - 1) }
func (p *producer) at(i int) *pentry { return &p.ents[p.slot(i)] }

// endsRun reports whether entry i ends a run record; mark sets that.
func (p *producer) endsRun(i int) bool {
	k := p.slot(i)
	return p.ends[k/64]&(1<<(k%64)) != 0
}

func (p *producer) mark(i int, end bool) {
	k := p.slot(i)
	if end {
		p.ends[k/64] |= 1 << (k % 64)
	} else {
		p.ends[k/64] &^= 1 << (k % 64)
	}
}

// find returns the index of seq among the remembered sequences, or where
// it would go.
func (p *producer) find(seq uint64) (int, bool) {
	if p.n == 0 || seq > p.at(p.n-1).seq {
		return p.n, false
	}
	lo, hi := 0, p.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.at(mid).seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < p.n && p.at(lo).seq == seq
}

// insert puts e at index i, shifting the later entries (rare: sequences
// mostly come in order).
func (p *producer) insert(i int, e pentry) {
	if p.n == len(p.ents) {
		p.grow(max(4, 2*len(p.ents)))
	}
	for j := p.n; j > i; j-- {
		*p.at(j) = *p.at(j - 1)
		p.mark(j, p.endsRun(j-1))
	}
	*p.at(i) = e
	p.mark(i, false)
	p.n++
}

// grow makes the ring n slots long, a power of 2.
func (p *producer) grow(n int) {
	q := producer{ents: make([]pentry, n), ends: make([]uint64, (n+63)/64)}
	for i := 0; i < p.n; i++ {
		q.ents[i] = *p.at(i)
		q.mark(i, p.endsRun(i))
	}
	p.ents, p.ends, p.head = q.ents, q.ends, 0
}

// checkProducer looks message m of queue q up among its producer's
// sequences, and returns the producer (nil for one q does not remember)
// and, for a duplicate, the result naming the first message, or for a
// sequence below the floor, the error.
func (s *Sched) checkProducer(q *queue, m *Message) (*producer, EnqueueResult) {
	p := q.prods[m.ProducerID]
	if p == nil {
		return nil, EnqueueResult{}
	}
	if i, ok := p.find(m.Sequence); ok {
		return p, EnqueueResult{ID: p.at(i).id, Duplicate: true}
	}
	if m.Sequence < p.floor {
		return p, EnqueueResult{Err: fmt.Errorf("enqueue %s: producer %s: sequence %d is too old: the queue remembers the producer's last %d sequences and has forgotten those below %d: %w",
			q.name, formatID(m.ProducerID), m.Sequence, s.cfg.ProducerSeqs, p.floor, fault.ErrInvalidArgument)}
	}
	return p, EnqueueResult{}
}

// rememberSeq remembers that producer pid's sequence seq on q is message
// id; p is the producer checkProducer returned. The stored records are
// written when the command ends (flushProducers).
func (s *Sched) rememberSeq(q *queue, p *producer, pid [16]byte, seq uint64, id [16]byte) {
	switch {
	case p == nil:
		p = &producer{id: pid, q: q}
		if q.prods == nil {
			q.prods = make(map[[16]byte]*producer)
		}
		q.prods[pid] = p
		q.appendProducer(p)
	case p != q.ptail:
		q.unlinkProducer(p)
		q.appendProducer(p)
	}
	p.expires = s.now.Add(q.window)
	if p.touched == 0 {
		s.ptouched = append(s.ptouched, p)
		p.touched = len(s.ptouched)
	}
	i, _ := p.find(seq)
	if p.n >= s.cfg.ProducerSeqs {
		if i == 0 {
			// Older than every sequence remembered: forgotten at once.
			p.floor = seq + 1
			return
		}
		s.evict(p)
		i--
	}
	p.insert(i, pentry{seq: seq, id: id})
	s.pend = append(s.pend, pendEntry{t: p.touched - 1, e: pentry{seq: seq, id: id}})
}

// evict forgets p's oldest sequence, and deletes its run record if it
// ends one: the run's other sequences are lower, forgotten already.
func (s *Sched) evict(p *producer) {
	e := *p.at(0)
	if p.endsRun(0) {
		p.mark(0, false)
		s.del(s.runKey(p, e.seq))
	}
	p.head = p.slot(1)
	p.n--
	p.floor = e.seq + 1
}

// flushProducers writes, for each producer the Enqueue command
// remembered sequences of, one run record of those still remembered and
// its header record, and places its queue in Sched.expiry.
func (s *Sched) flushProducers() {
	pend := s.pend
	if !slices.IsSortedFunc(pend, cmpPend) {
		slices.SortFunc(pend, cmpPend)
	}
	for ti, p := range s.ptouched {
		run := s.pbuf[:0]
		for len(pend) > 0 && pend[0].t == ti {
			if pend[0].e.seq >= p.floor {
				run = append(run, pend[0].e)
			}
			pend = pend[1:]
		}
		s.pbuf = run[:0]
		if len(run) > 0 {
			last := run[len(run)-1].seq
			v := s.cur.alloc(1 + len(run)*(8+16))[:0]
			s.put(s.runKey(p, last), appendRunRecord(v, run))
			i, _ := p.find(last)
			p.mark(i, true)
		}
		s.put(s.producerKey(p), appendProducerRecord(s.cur.alloc(1 + 8 + 8)[:0], p.floor, p.expires))
		p.touched = 0
		s.placeDedup(p.q)
	}
	clear(s.ptouched)
	s.ptouched = s.ptouched[:0]
	s.pend = s.pend[:0]
}

func cmpPend(a, b pendEntry) int {
	return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.e.seq, b.e.seq))
}

func (s *Sched) producerKey(p *producer) []byte {
	q := p.q.name
	return appendProducerKey(s.cur.alloc(producerKeyLen(q))[:0], q, p.id)
}

func (s *Sched) runKey(p *producer, last uint64) []byte {
	q := p.q.name
	return appendRunKey(s.cur.alloc(producerKeyLen(q) + 8)[:0], q, p.id, last)
}

// dropProducer forgets p and deletes its records.
func (s *Sched) dropProducer(p *producer) {
	for i := 0; i < p.n; i++ {
		if p.endsRun(i) {
			s.del(s.runKey(p, p.at(i).seq))
		}
	}
	s.del(s.producerKey(p))
	p.q.unlinkProducer(p)
	delete(p.q.prods, p.id)
}

// expireProducers forgets q's producers whose window has passed, in
// order of expiry, then ID.
func (s *Sched) expireProducers(q *queue) {
	if q.phead == nil || q.phead.expires > s.now {
		return
	}
	var gone []*producer
	for p := q.phead; p != nil && p.expires <= s.now; p = p.next {
		gone = append(gone, p)
	}
	slices.SortFunc(gone, cmpProducers)
	for _, p := range gone {
		s.dropProducer(p)
	}
}

// cmpProducers orders producers by expiry, then ID.
func cmpProducers(a, b *producer) int {
	return cmp.Or(cmp.Compare(a.expires, b.expires), slices.Compare(a.id[:], b.id[:]))
}

func (q *queue) appendProducer(p *producer) {
	p.next, p.prev = nil, q.ptail
	if q.ptail != nil {
		q.ptail.next = p
	} else {
		q.phead = p
	}
	q.ptail = p
}

func (q *queue) unlinkProducer(p *producer) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		q.phead = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		q.ptail = p.prev
	}
	p.next, p.prev = nil, nil
}

// restoreProducer returns q's producer pid as Restore builds it: its
// entries appended in any order, its queue marked for sortProducers.
func (s *Sched) restoreProducer(q *queue, pid [16]byte) *producer {
	p := q.prods[pid]
	if p == nil {
		p = &producer{id: pid, q: q}
		if q.prods == nil {
			q.prods = make(map[[16]byte]*producer)
		}
		q.prods[pid] = p
		q.appendProducer(p)
	}
	if !q.dunsorted {
		q.dunsorted = true
		s.unsorted = append(s.unsorted, q)
	}
	return p
}

// sortProducers finishes the restored producers of q: their sequences
// sorted into rings (at most ProducerSeqs kept: the bound may have been
// lowered), and the list sorted by expiry.
func (s *Sched) sortProducers(q *queue) {
	if q.phead == nil {
		return
	}
	var ps []*producer
	for p := q.phead; p != nil; p = p.next {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, cmpProducers)
	q.phead, q.ptail = nil, nil
	for _, p := range ps {
		q.appendProducer(p)
		// Restore appended the entries to ents, a plain slice, and the
		// run keys to runs.
		ents := p.ents
		slices.SortFunc(ents, func(a, b pentry) int { return cmp.Compare(a.seq, b.seq) })
		ents = slices.CompactFunc(ents, func(a, b pentry) bool { return a.seq == b.seq })
		size := 4
		for size < len(ents) {
			size *= 2
		}
		p.ents, p.ends, p.head, p.n = make([]pentry, size), make([]uint64, (size+63)/64), 0, len(ents)
		copy(p.ents, ents)
		for _, last := range p.runs {
			if i, ok := p.find(last); ok {
				p.mark(i, true)
			}
		}
		p.runs = nil
		if p.n > s.cfg.ProducerSeqs {
			for p.n > s.cfg.ProducerSeqs {
				s.evict(p)
			}
			s.put(s.producerKey(p), appendProducerRecord(s.cur.alloc(1 + 8 + 8)[:0], p.floor, p.expires))
		}
	}
}
