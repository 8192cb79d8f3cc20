// Package idem remembers idempotency keys for a fixed window: a table
// from key to the ID of the first message accepted with it, and the time
// it is forgotten.
//
// Keys of one table expire in the order they were accepted (the window is
// fixed and time only grows), so the table keeps them in a FIFO and needs
// no timer per key. The index is an open-addressing hash table with
// linear probing over 64-bit hashes: looking a key up and
// inserting it is one probe sequence, forgetting it is another. Key bytes
// are copied into a FIFO arena; nothing in the table holds a pointer, so
// a large window costs the garbage collector nothing to scan.
//
// Memory per remembered key: a 16-byte slot (at a load factor between
// 7/16 and 7/8), a 48-byte FIFO entry (the FIFO's slice may be up to
// twice as long) and the key's bytes: 97 bytes measured for 12-byte keys
// in a table of a million. No allocation per key once the table has
// grown.
//
// The package is deterministic (no random hash seed); a Table is not safe
// for concurrent use.
package idem

import (
	"math/bits"
	"slices"
)

// A Table remembers idempotency keys. The zero value is an empty table.
type Table struct {
	slots []slot // len is 0 or a power of 2
	live  int    // slots in use
	// fifo[head:] are the remembered keys in acceptance order, seq of
	// fifo[i] is base+i.
	fifo []entry
	head int
	base uint64
	// arena[ahead:] holds the key bytes of fifo[head:], in order;
	// entry.off is relative to abase.
	arena []byte
	ahead int
	abase uint64
	// restored holds keys given to Restore, inserted in expiry order at
	// the first other call.
	restored []restoredKey
}

type slot struct {
	hash uint64 // 0: empty (hashes are never 0)
	seq  uint64 // the FIFO entry of the key
}

type entry struct {
	hash    uint64
	id      [16]byte
	expires int64
	off     uint64 // offset of the key in the arena, from abase
	n       uint32 // key length
	dead    bool   // forgotten before its expiry, or replaced
}

type restoredKey struct {
	key     string
	id      [16]byte
	expires int64
}

// Len returns the number of keys remembered (including any whose window
// passed and that Expire has not forgotten yet).
func (t *Table) Len() int {
	t.restore()
	return t.live
}

// Remember returns the ID remembered for key if its window has not passed
// at now (dup is true); otherwise it remembers key with id until expires
// and returns id, false.
func (t *Table) Remember(key string, id [16]byte, now, expires int64) (first [16]byte, dup bool) {
	t.restore()
	h := hash(key)
	i, found := t.find(h, key)
	if found {
		e := &t.fifo[t.slots[i].seq-t.base]
		if e.expires > now {
			return e.id, true
		}
		// Window passed, not yet expired: replace it.
		e.dead = true
		t.slots[i].seq = t.push(h, key, id, expires)
		return id, false
	}
	if (t.live+1)*8 > len(t.slots)*7 {
		t.grow()
		i, _ = t.find(h, key)
	}
	t.slots[i] = slot{hash: h, seq: t.push(h, key, id, expires)}
	t.live++
	return id, false
}

// Lookup returns the ID remembered for key if its window has not passed
// at now.
func (t *Table) Lookup(key string, now int64) (id [16]byte, ok bool) {
	t.restore()
	if i, found := t.find(hash(key), key); found {
		if e := &t.fifo[t.slots[i].seq-t.base]; e.expires > now {
			return e.id, true
		}
	}
	return id, false
}

// Next returns the earliest expiry among the remembered keys; ok is false
// when there are none.
func (t *Table) Next() (expires int64, ok bool) {
	t.restore()
	for i := t.head; i < len(t.fifo); i++ {
		if !t.fifo[i].dead {
			return t.fifo[i].expires, true
		}
	}
	return 0, false
}

// Expire forgets the keys whose window has passed at now, oldest first,
// calling forgot with each (the bytes are valid during the call only).
func (t *Table) Expire(now int64, forgot func(key []byte)) {
	t.restore()
	for t.head < len(t.fifo) && (t.fifo[t.head].expires <= now || t.fifo[t.head].dead) {
		e := &t.fifo[t.head]
		key := t.arena[e.off-t.abase : e.off-t.abase+uint64(e.n)]
		if !e.dead {
			t.remove(e.hash, t.base+uint64(t.head))
			forgot(key)
		}
		t.head++
		t.ahead += int(e.n)
	}
	t.compact()
}

// All calls fn for every remembered key, oldest first.
func (t *Table) All(fn func(key []byte, id [16]byte, expires int64)) {
	t.restore()
	for i := t.head; i < len(t.fifo); i++ {
		if e := &t.fifo[i]; !e.dead {
			fn(t.arena[e.off-t.abase:e.off-t.abase+uint64(e.n)], e.id, e.expires)
		}
	}
}

// Restore adds a remembered key as found in storage, in any order; keys
// are sorted by expiry before the next other call. Of a key restored
// twice, the first (by expiry) is kept.
func (t *Table) Restore(key string, id [16]byte, expires int64) {
	t.restored = append(t.restored, restoredKey{key: key, id: id, expires: expires})
}

func (t *Table) restore() {
	if len(t.restored) == 0 {
		return
	}
	r := t.restored
	t.restored = nil
	slices.SortStableFunc(r, func(a, b restoredKey) int {
		switch {
		case a.expires < b.expires:
			return -1
		case a.expires > b.expires:
			return 1
		}
		return 0
	})
	for _, k := range r {
		t.Remember(k.key, k.id, k.expires-1, k.expires)
	}
}

// push appends a FIFO entry and its key bytes; it returns its seq.
func (t *Table) push(h uint64, key string, id [16]byte, expires int64) uint64 {
	off := t.abase + uint64(len(t.arena))
	t.arena = append(t.arena, key...)
	t.fifo = append(t.fifo, entry{hash: h, id: id, expires: expires, off: off, n: uint32(len(key))})
	return t.base + uint64(len(t.fifo)-1)
}

// maxIdle is the capacity, in entries, an empty table keeps.
const maxIdle = 4096

// compact drops the consumed prefix of the FIFO and the arena once it is
// the larger half.
func (t *Table) compact() {
	if t.head == len(t.fifo) {
		t.base += uint64(t.head)
		t.abase += uint64(len(t.arena))
		t.fifo, t.head = t.fifo[:0], 0
		t.arena, t.ahead = t.arena[:0], 0
		if cap(t.fifo) > maxIdle {
			t.fifo, t.arena = nil, nil // release a burst's worth
		}
		if t.live == 0 && len(t.slots) > maxIdle {
			t.slots = nil
		}
		return
	}
	if t.head > len(t.fifo)/2 {
		n := copy(t.fifo, t.fifo[t.head:])
		t.fifo = t.fifo[:n]
		t.base += uint64(t.head)
		t.head = 0
	}
	if t.ahead > len(t.arena)/2 {
		n := copy(t.arena, t.arena[t.ahead:])
		t.arena = t.arena[:n]
		t.abase += uint64(t.ahead)
		t.ahead = 0
	}
}

// find returns the slot of key, or the empty slot where it would go.
func (t *Table) find(h uint64, key string) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hash == 0 {
			return i, false
		}
		if s.hash == h {
			e := &t.fifo[s.seq-t.base]
			if string(t.arena[e.off-t.abase:e.off-t.abase+uint64(e.n)]) == key {
				return i, true
			}
		}
	}
}

// remove deletes the slot pointing at FIFO entry seq, shifting the
// entries after it back so that no probe sequence breaks (Knuth's
// algorithm R for linear probing).
func (t *Table) remove(h, seq uint64) {
	mask := len(t.slots) - 1
	i := int(h) & mask
	for t.slots[i].seq != seq || t.slots[i].hash != h {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].hash != 0; j = (j + 1) & mask {
		home := int(t.slots[j].hash) & mask
		// Move slot j into the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.live--
}

func (t *Table) grow() {
	n := max(len(t.slots)*2, 16)
	old := t.slots
	t.slots = make([]slot, n)
	mask := n - 1
	for _, s := range old {
		if s.hash == 0 {
			continue
		}
		i := int(s.hash) & mask
		for t.slots[i].hash != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// hash mixes the key 8 bytes at a time with 64×64→128-bit multiplies
// (the construction of wyhash, with fixed constants: the table must be
// deterministic). It is never 0.
func hash(key string) uint64 {
	const m1, m2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db
	h := uint64(len(key)) ^ m1
	for len(key) >= 8 {
		v := uint64(key[0]) | uint64(key[1])<<8 | uint64(key[2])<<16 | uint64(key[3])<<24 |
			uint64(key[4])<<32 | uint64(key[5])<<40 | uint64(key[6])<<48 | uint64(key[7])<<56
		h = mix(h^v, m2)
		key = key[8:]
	}
	var v uint64
	for i := 0; i < len(key); i++ {
		v |= uint64(key[i]) << (8 * i)
	}
	h = mix(h^v, m2^m1)
	if h == 0 {
		h = 1
	}
	return h
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// Each calls fn for every remembered key, oldest first, as All does, but
// leaves the keys given to Restore and not yet taken in where they are
// (see Pending): it changes nothing. The bytes are valid during the call
// only. With Pending, Append and Restore it saves and rebuilds a table
// exactly.
func (t *Table) Each(fn func(key []byte, id [16]byte, expires int64)) {
	for i := t.head; i < len(t.fifo); i++ {
		if e := &t.fifo[i]; !e.dead {
			fn(t.arena[e.off-t.abase:e.off-t.abase+uint64(e.n)], e.id, e.expires)
		}
	}
}

// Pending calls fn for every key given to Restore that the table has not
// taken in yet, in the order given.
func (t *Table) Pending(fn func(key string, id [16]byte, expires int64)) {
	for _, k := range t.restored {
		fn(k.key, k.id, k.expires)
	}
}

// Append remembers key with id until expires as the newest key, whatever
// the expiries of the keys before it, and reports true; or false,
// changing nothing, if the table remembers key already. Called for each
// key in Each's order, then Restore for each in Pending's, it rebuilds a
// saved table.
func (t *Table) Append(key string, id [16]byte, expires int64) bool {
	h := hash(key)
	if _, found := t.find(h, key); found {
		return false
	}
	if (t.live+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	i, _ := t.find(h, key)
	t.slots[i] = slot{hash: h, seq: t.push(h, key, id, expires)}
	t.live++
	return true
}
