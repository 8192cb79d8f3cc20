package sched

// The message table. With a million pending messages, a scheduler that
// keeps each message as a heap object linked to others by pointers makes
// the garbage collector mark a million objects and follow several
// million pointers on every cycle. Here a message is a fixed-size record
// without pointers in a slab, a paged array the Sched owns, and
// everything that names a message (lane lists, lease lists, a queue's ID
// index, the timer heap) holds its index, a uint32. The slab's pages are
// allocated as pointer-free arrays, which the collector never scans, and
// the ID index's tables hold only indices too: marking costs the same
// with a million messages as with none.
//
// A record holds what every message needs, in 48 bytes; what only some
// need (a due time, a timer, a lease, failed attempts, a weight of 2^12
// or more, a TTL) is in an extension record of a second slab, referred to by
// the first. A ready message that has never failed has none: it costs
// its 48 bytes and its slot in the ID index.

// mref names a message: its index in Sched.recs, from 1; 0 is none.
type mref uint32

// xref names an extension record: its index in Sched.exts, from 1; 0 is
// none.
type xref uint32

// msg is the in-memory state of one stored message. It holds no pointer,
// string, slice or interface, so its slab's pages are not scanned by the
// garbage collector. The fairness key, throttle keys and ordering key are
// its lane's; the last failure's reason, for the few messages that
// failed, is in Sched.reasons; the body stays in storage. Layout, 48
// bytes, aligned to 8:
//
//	offset  0  id      16  the message ID
//	offset 16  enq      8  when it was enqueued (Unix ns)
//	offset 24  lane     4  its lane's index in Sched.lanes
//	offset 28  next     4  list links, see below
//	offset 32  prev     4
//	offset 36  cost     4  payload bytes, the DRR cost
//	offset 40  ext      4  its extension record, 0 for none
//	offset 44  weight   2  bits 0-11: its weight if below 2^12, else 0
//	                       (then in ext); bits 12-15: its priority as
//	                       Message.Priority encodes it (0: the default)
//	offset 46  state    1
//	offset 47  flags    1
type msg struct {
	id  [16]byte
	enq Time
	// lane is the index in Sched.lanes of its lane (0 while it is free).
	lane uint32
	// next and prev link the message into its lane's list (stReady, and
	// stDelayed in ordered lanes) or its subscription's lease list
	// (stLeased); never both. A free record's next links the slab page's
	// free list.
	next, prev mref
	cost       uint32 // payload bytes, the DRR cost (≥ 1 when charged)
	ext        xref
	// weight is, in bits 0-11, the message's weight (at least 1) when it
	// is below 2^12, 0 when it is in the extension record; in bits 12-15,
	// its priority (0 for DefaultPriority, else 1 + the priority).
	weight uint16
	state  msgState
	flags  uint8
}

// msgExt extends a msg with what only messages in a timer, leased,
// failed, of a large weight or with a TTL need. Layout, 48 bytes,
// aligned to 8:
//
//	offset  0  due       8  stDelayed: due time (at most its expiry);
//	                        stLeased: lease deadline; stReady with a TTL:
//	                        its expiry; stDeciding: the deadline of the
//	                        lease that failed
//	offset  8  tseq      8  when its timer was set, orders equal deadlines
//	offset 16  lease     8  stLeased: the lease token; else 0
//	offset 24  attempts  4  failed attempts recorded
//	offset 28  slot      4  stLeased: Sched.slots index of the holder, 0 if closed
//	offset 32  heap      4  1 + its index in Sched.timers; 0 when not in it
//	offset 36  weight    4  the message's weight when msg.weight is 0
//	offset 40  msg       4  the message it extends
//	offset 44  ttl       4  its TTL in milliseconds from enq, 0 for none
//
// Lease tokens and tseqs stay 64-bit: a lease can be extended for as
// long as the consumer wants while other deliveries draw tokens, and a
// delay can be years, so no bound on how far they lag the scheduler's
// counters would make a narrower field safe; images carry their full
// distance to the counters. A stale lease token never matches a current
// one because tokens are never reused (Sched.lease only grows).
type msgExt struct {
	due      Time
	tseq     uint64
	lease    uint64
	attempts uint32
	slot     uint32
	heap     uint32
	weight   uint32
	// msg is the message extended; a free record's msg links the slab
	// page's free list.
	msg mref
	// ttl is the message's time to live in milliseconds from its enqueue
	// time (at most MaxTTL), 0 for none. It is kept while the message is
	// dead-lettered, where it does not apply, so that a redrive knows to
	// record that the message no longer expires.
	ttl uint32
}

// link returns the field a free record links its page's free list with.
func (m *msg) link() *uint32 { return (*uint32)(&m.next) }

// link returns the field a free record links its page's free list with.
func (e *msgExt) link() *uint32 { return (*uint32)(&e.msg) }

// slabBits sets a slab page's size: 2^9 = 512 records (24 KiB of 48-byte
// records), an allocation size class with no waste. Small enough that a
// scheduler with a few messages (one loaded from a small image, say)
// holds little, and that a drained queue's pages come free; large enough
// that the page table stays small (1,954 pages, 16 KiB of pointers, for a
// million messages) and that a new page is allocated once per 512
// records.
const (
	slabBits     = 9
	slabPageSize = 1 << slabBits
	// slabMaxPages keeps every index below 2^32 (the last possible page
	// would name its last record 2^32).
	slabMaxPages = 1<<(32-slabBits) - 1
)

// slabRec constrains a slab's record type: P is *T, with the field that
// links a free record to the next free one of its page.
type slabRec[T any] interface {
	*T
	link() *uint32
}

// A slab allocates fixed-size records from pages of slabPageSize, and
// names each by a uint32 index from 1 (0 is none): page<<slabBits |
// record, plus 1. Growth adds a page and never copies records, so an
// index stays valid, and a pointer to a record stays valid, until the
// record is freed. A freed record is zeroed and kept on its page's free
// list; a page whose records are all free is returned to the Go heap
// unless it is the page records are being allocated from (so that a
// queue oscillating around empty does not allocate a page each time).
// Records are allocated from one page until it is full, then from a page
// that has free records, else from a new page.
//
// When T holds no pointers the pages are never scanned by the garbage
// collector. The zero value is an empty slab. Not safe for concurrent use.
type slab[T any, P slabRec[T]] struct {
	pages []*[slabPageSize]T
	meta  []slabMeta // per page
	// avail lists pages other than cur that had free records when they
	// were listed; an entry is checked when it is taken (its page may
	// have been returned since, or its number reused).
	avail []uint32
	holes []uint32 // numbers of returned pages, for reuse
	cur   uint32   // the page records are allocated from
	n     int      // records in use
}

// slabMeta is a slab page's bookkeeping, kept apart from the records so
// that a page is exactly a multiple of the allocator's page size.
type slabMeta struct {
	free  uint32 // 1 + the first free record of the page's free list; 0: none
	used  uint32 // records handed out at least once: [used, slabPageSize) never were
	live  uint32 // records in use
	avail bool   // listed in slab.avail
}

// at returns the record i, which must be in use.
func (sl *slab[T, P]) at(i uint32) *T {
	i--
	return &sl.pages[i>>slabBits][i&(slabPageSize-1)]
}

// peek returns record i, in use or free (then zeroed but for its free
// list link), or nil if its page was returned: for an index kept past
// the record's life, as a delivery decided in the Ready being built
// keeps its message's.
func (sl *slab[T, P]) peek(i uint32) *T {
	i--
	if p := sl.pages[i>>slabBits]; p != nil {
		return &p[i&(slabPageSize-1)]
	}
	return nil
}

// alloc returns the index of a zeroed record, now in use. It panics when
// all slabMaxPages pages are full (2^32 - 2^9 records: 192 GiB of
// messages).
func (sl *slab[T, P]) alloc() uint32 {
	if len(sl.pages) == 0 || sl.pages[sl.cur] == nil || sl.meta[sl.cur].live == slabPageSize {
		sl.nextPage()
	}
	pn := sl.cur
	pm := &sl.meta[pn]
	var i uint32
	if pm.free != 0 {
		i = pm.free - 1
		l := P(&sl.pages[pn][i]).link()
		pm.free, *l = *l, 0
	} else {
		i = pm.used
		pm.used++
	}
	pm.live++
	sl.n++
	return pn<<slabBits | i + 1
}

// nextPage makes a page with a free record the current one: a listed
// one, else a new one.
func (sl *slab[T, P]) nextPage() {
	for len(sl.avail) > 0 {
		pn := sl.avail[len(sl.avail)-1]
		sl.avail = sl.avail[:len(sl.avail)-1]
		if sl.pages[pn] != nil && sl.meta[pn].avail {
			sl.meta[pn].avail = false
			if sl.meta[pn].live < slabPageSize {
				sl.cur = pn
				return
			}
		}
	}
	p := new([slabPageSize]T)
	var pn uint32
	if n := len(sl.holes); n > 0 {
		pn = sl.holes[n-1]
		sl.holes = sl.holes[:n-1]
		sl.pages[pn] = p
		sl.meta[pn] = slabMeta{}
	} else {
		if len(sl.pages) == slabMaxPages {
			panic("sched: message table full")
		}
		pn = uint32(len(sl.pages))
		sl.pages = append(sl.pages, p)
		sl.meta = append(sl.meta, slabMeta{})
	}
	sl.cur = pn
}

// free zeroes record i, which must be in use, and takes it out of use.
func (sl *slab[T, P]) free(i uint32) {
	i--
	pn, r := i>>slabBits, i&(slabPageSize-1)
	rec := &sl.pages[pn][r]
	var zero T
	*rec = zero
	pm := &sl.meta[pn]
	*P(rec).link() = pm.free
	pm.free = r + 1
	pm.live--
	sl.n--
	switch {
	case pn == sl.cur:
	case pm.live == 0:
		sl.pages[pn] = nil
		sl.meta[pn] = slabMeta{}
		sl.holes = append(sl.holes, pn)
	case !pm.avail:
		pm.avail = true
		sl.avail = append(sl.avail, pn)
	}
}

// len returns the number of records in use.
func (sl *slab[T, P]) len() int { return sl.n }

// recSlab holds the message records, extSlab their extensions.
type (
	recSlab = slab[msg, *msg]
	extSlab = slab[msgExt, *msgExt]
)

// msg returns message x's record.
func (s *Sched) msg(x mref) *msg { return s.recs.at(uint32(x)) }

// laneOf returns m's lane.
func (s *Sched) laneOf(m *msg) *lane { return s.lanes[m.lane] }

// queueOf returns m's queue.
func (s *Sched) queueOf(m *msg) *queue { return s.lanes[m.lane].key.q }

// newMsg allocates a message record, zeroed: no lane, no state.
func (s *Sched) newMsg() (mref, *msg) {
	x := mref(s.recs.alloc())
	return x, s.msg(x)
}

// freeMsg frees message x, out of every list and index, with its
// extension record and its failure reason.
func (s *Sched) freeMsg(x mref) {
	m := s.msg(x)
	s.setReason(x, m, "")
	if m.ext != 0 {
		s.exts.free(uint32(m.ext))
	}
	s.recs.free(uint32(x))
}

// ext returns a copy of m's extension record: zeros if it has none.
func (s *Sched) ext(m *msg) msgExt {
	if m.ext == 0 {
		return msgExt{}
	}
	return *s.exts.at(uint32(m.ext))
}

// extFor returns message x's extension record, allocating it if m, x's
// record, has none.
func (s *Sched) extFor(x mref, m *msg) *msgExt {
	if m.ext == 0 {
		m.ext = xref(s.exts.alloc())
		e := s.exts.at(uint32(m.ext))
		e.msg = x
		return e
	}
	return s.exts.at(uint32(m.ext))
}

// trimExt frees m's extension record if it holds nothing: a message back
// in its lane with no failed attempt and a small weight, as most are.
func (s *Sched) trimExt(m *msg) {
	if m.ext == 0 {
		return
	}
	if e := s.exts.at(uint32(m.ext)); e.due == 0 && e.lease == 0 && e.attempts == 0 && e.slot == 0 && e.heap == 0 && e.ttl == 0 && m.weight&weightMask != 0 {
		s.exts.free(uint32(m.ext))
		m.ext = 0
	}
}

// due returns m's due time: the end of its delay or backoff, its lease
// deadline, or, deciding, its failed lease's deadline; 0 for none.
func (s *Sched) due(m *msg) Time {
	if m.ext == 0 {
		return 0
	}
	return s.exts.at(uint32(m.ext)).due
}

// leaseOf returns m's lease token, 0 unless it is leased.
func (s *Sched) leaseOf(m *msg) uint64 {
	if m.ext == 0 {
		return 0
	}
	return s.exts.at(uint32(m.ext)).lease
}

// attempts returns m's failed attempts.
func (s *Sched) attempts(m *msg) uint32 {
	if m.ext == 0 {
		return 0
	}
	return s.exts.at(uint32(m.ext)).attempts
}

// The bits of msg.weight: the weight below, the priority above.
const (
	weightBits = 12
	weightMask = 1<<weightBits - 1
)

// weightOf returns m's weight.
func (s *Sched) weightOf(m *msg) uint32 {
	if w := m.weight & weightMask; w != 0 {
		return uint32(w)
	}
	return s.exts.at(uint32(m.ext)).weight
}

// setWeight sets message x's weight, w ≥ 1; m is its record.
func (s *Sched) setWeight(x mref, m *msg, w uint32) {
	p := m.weight &^ weightMask
	if w < 1<<weightBits {
		m.weight = p | uint16(w)
		return
	}
	m.weight = p
	s.extFor(x, m).weight = w
}

// prioOf returns m's priority as Message.Priority encodes it: 0 for
// DefaultPriority, else 1 + the priority.
func (s *Sched) prioOf(m *msg) uint8 { return uint8(m.weight >> weightBits) }

// setPrio sets m's priority, p encoded as Message.Priority (at most
// MaxPriority+1).
func (s *Sched) setPrio(_ mref, m *msg, p uint8) {
	m.weight = m.weight&weightMask | uint16(p)<<weightBits
}

// addLane gives l an index in Sched.lanes, for its messages to name.
func (s *Sched) addLane(l *lane) {
	if n := len(s.freeLanes); n > 0 {
		l.idx = s.freeLanes[n-1]
		s.freeLanes = s.freeLanes[:n-1]
		s.lanes[l.idx] = l
		return
	}
	l.idx = uint32(len(s.lanes))
	s.lanes = append(s.lanes, l)
}

// dropLane frees l's index.
func (s *Sched) dropLane(l *lane) {
	s.lanes[l.idx] = nil
	s.freeLanes = append(s.freeLanes, l.idx)
	l.idx = 0
}
