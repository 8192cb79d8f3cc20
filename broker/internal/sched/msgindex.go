package sched

import (
	"encoding/binary"
	"iter"
	"math/bits"
)

// msgIndex finds a queue's messages by ID. It is an extendible hash table
// (Fagin, Nievergelt, Pippenger & Strong, "Extendible Hashing", ACM TODS
// 1979) of open-addressing tables with linear probing and backward-shift
// deletion (Knuth, TAOCP vol. 3, §6.4, Algorithm R).
//
// A slot holds only the message's index in the message table (4 bytes,
// 0 for an empty slot); the key is the message's own id, read from its
// record, which every method is given the table of. At the loads kept
// here that is 4.5–9 bytes a message, against 40–60 for a
// map[[16]byte]*msg, which dominated the scheduler's memory with a
// million pending messages; and the tables hold no pointers, so the
// garbage collector does not scan them. Growth never rehashes more than
// one table of at most maxTableSlots slots at a time, so there is no
// pause that grows with the queue; when a queue drains to a sixteenth of
// its slots the index is rebuilt smaller.
//
// Looking up an ID that is not in the index is the costly case of linear
// probing (at 7/8 load, about 32 slots, each a read of a message record
// elsewhere in memory), and it is the common one: every enqueue checks
// that its new ID is unused. IDs are UUIDv7s, given in increasing order,
// so the index keeps the greatest ID put into it (max) and answers at
// once for an ID above it.
//
// The zero value is an empty index. Not safe for concurrent use.
type msgIndex struct {
	dir   []*idxTable // 2^depth entries; a table of local depth d fills 2^(depth-d) adjacent ones
	depth uint8       // global depth: the top depth bits of a hash pick the directory entry
	n     int         // messages
	slots int         // slots over all tables
	bytes uint64      // the messages' payload bytes (msg.cost as enqueued)
	// max is at least the greatest ID in the index, in byte order (the
	// greatest ever put since the index was last empty or rebuilt).
	max [16]byte
}

// idAfter reports whether a sorts after b in byte order (the order of
// UUIDv7s by time).
func idAfter(a, b *[16]byte) bool {
	ah, bh := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	if ah != bh {
		return ah > bh
	}
	return binary.BigEndian.Uint64(a[8:]) > binary.BigEndian.Uint64(b[8:])
}

// An idxTable is one open-addressing table: len(slots) is a power of two.
type idxTable struct {
	slots []mref
	n     int
	depth uint8 // local depth: the top depth bits its messages' hashes share
}

const (
	minTableSlots = 8
	maxTableSlots = 1024
)

// hashID mixes a message ID into 64 bits. UUIDv7 IDs are mostly clock and
// counter, so both halves are folded and multiplied by 2^64/φ (Fibonacci
// hashing), whose high bits depend on every input bit.
func hashID(id *[16]byte) uint64 {
	h := binary.LittleEndian.Uint64(id[:8]) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(id[8:]), 31)
	h *= 0x9E3779B97F4A7C15
	return h ^ h>>29
}

// full reports whether one more message would take t past 7/8 load.
func (t *idxTable) full() bool { return (t.n+1)*8 > len(t.slots)*7 }

// table returns the table for hash h, creating the first one.
func (x *msgIndex) table(h uint64) *idxTable {
	if x.dir == nil {
		x.dir = []*idxTable{{slots: make([]mref, minTableSlots)}}
		x.slots = minTableSlots
	}
	if x.depth == 0 {
		return x.dir[0]
	}
	return x.dir[h>>(64-x.depth)]
}

// get returns the message with ID id, or 0; tab is the message table.
func (x *msgIndex) get(tab *recSlab, id [16]byte) mref {
	if x.n == 0 || idAfter(&id, &x.max) {
		return 0
	}
	h := hashID(&id)
	t := x.table(h)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		m := t.slots[i]
		if m == 0 || tab.at(uint32(m)).id == id {
			return m
		}
	}
}

// put adds message m of tab, whose ID must not be in x already.
func (x *msgIndex) put(tab *recSlab, m mref) {
	r := tab.at(uint32(m))
	h := hashID(&r.id)
	t := x.table(h)
	for t.full() {
		if len(t.slots) < maxTableSlots {
			x.resize(tab, t, len(t.slots)*2)
		} else {
			x.split(tab, t, h)
		}
		t = x.table(h)
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = m
	t.n++
	x.n++
	x.bytes += uint64(r.cost)
	if idAfter(&r.id, &x.max) {
		x.max = r.id
	}
}

// del removes message m of tab, which must be in x.
func (x *msgIndex) del(tab *recSlab, m mref) {
	r := tab.at(uint32(m))
	h := hashID(&r.id)
	t := x.table(h)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != m {
		i = (i + 1) & mask
	}
	// Backward shift: a later member of the probe run moves into the hole
	// unless its home slot lies cyclically in (hole, its slot].
	t.slots[i] = 0
	for j := i; ; {
		j = (j + 1) & mask
		o := t.slots[j]
		if o == 0 {
			break
		}
		k := hashID(&tab.at(uint32(o)).id) & mask
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.slots[i], t.slots[j] = o, 0
		i = j
	}
	t.n--
	x.n--
	x.bytes -= uint64(r.cost)
	x.shrink(tab)
}

// len returns the number of messages.
func (x *msgIndex) len() int { return x.n }

// all yields every message once, in no particular order. The index must
// not change during the iteration.
func (x *msgIndex) all() iter.Seq[mref] {
	return func(yield func(mref) bool) {
		for i, t := range x.dir {
			if i&(1<<(x.depth-t.depth)-1) != 0 {
				continue // not the table's first directory entry
			}
			for _, m := range t.slots {
				if m != 0 && !yield(m) {
					return
				}
			}
		}
	}
}

// resize rehashes t into size slots.
func (x *msgIndex) resize(tab *recSlab, t *idxTable, size int) {
	old := t.slots
	t.slots = make([]mref, size)
	x.slots += size - len(old)
	mask := uint64(size - 1)
	for _, m := range old {
		if m == 0 {
			continue
		}
		i := hashID(&tab.at(uint32(m)).id) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = m
	}
}

// split replaces t, which holds hash h, by two tables one bit deeper,
// doubling the directory first if t is as deep as it.
func (x *msgIndex) split(tab *recSlab, t *idxTable, h uint64) {
	if t.depth == x.depth {
		dir := make([]*idxTable, 2*len(x.dir))
		for i, d := range x.dir {
			dir[2*i], dir[2*i+1] = d, d
		}
		x.dir = dir
		x.depth++
	}
	lo := &idxTable{slots: make([]mref, len(t.slots)), depth: t.depth + 1}
	hi := &idxTable{slots: make([]mref, len(t.slots)), depth: t.depth + 1}
	x.slots += len(t.slots)
	mask := uint64(len(t.slots) - 1)
	bit := uint64(1) << (63 - t.depth)
	for _, m := range t.slots {
		if m == 0 {
			continue
		}
		mh := hashID(&tab.at(uint32(m)).id)
		d := lo
		if mh&bit != 0 {
			d = hi
		}
		i := mh & mask
		for d.slots[i] != 0 {
			i = (i + 1) & mask
		}
		d.slots[i] = m
		d.n++
	}
	// t fills the 2^(depth-t.depth) entries from its prefix on: the first
	// half goes to lo, the second to hi.
	span := 1 << (x.depth - t.depth)
	first := int(h>>(64-x.depth)) &^ (span - 1)
	for i := range span {
		if i < span/2 {
			x.dir[first+i] = lo
		} else {
			x.dir[first+i] = hi
		}
	}
}

// shrink rebuilds x smaller once a sixteenth or less of its slots hold
// messages, so that a drained queue gives its memory back.
func (x *msgIndex) shrink(tab *recSlab) {
	if x.n == 0 {
		*x = msgIndex{}
		return
	}
	if x.slots <= maxTableSlots || x.n*16 > x.slots {
		return
	}
	var y msgIndex
	for m := range x.all() {
		y.put(tab, m)
	}
	*x = y
}
