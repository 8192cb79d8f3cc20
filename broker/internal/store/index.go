package store

import (
	"bytes"
	"encoding/binary"

	"github.com/tidwall/btree"
)

// The index.
//
// The index maps every key to the position of its value in the log. Almost
// every key the broker stores has the shape of the scheduler's message,
// state and producer keys (broker/internal/sched/record.go): a prefix that
// holds no 0x00 byte, such as "s/msg/<queue>", then one 0x00 byte, then
// exactly 16 bytes, a message or producer ID. Such an id key costs no
// string and no pointer: it is a 28-byte item {id, loc} in a leaf, a fixed
// array of leafCap items in Go's 4 KiB size class that holds no pointer,
// so the garbage collector never scans it. Its prefix is stored once per
// leaf, in the leaf's reference: the references {prefix, fence, leaf} are
// ordered by a github.com/tidwall/btree, one per leafCap keys or so. Every
// other key is an entry of a second, general tidwall btree, its bytes in a
// string of its own.
//
// Order. Scans visit both kinds in one ascending byte order by merging the
// two trees. Id keys sort among themselves as (prefix, id) pairs do: if a
// prefix p is a proper prefix of another, q = p + c + ..., then c is not
// 0x00, and 0x00 sorts below every other byte, so p 0x00 id < q ... for
// every id ("m/q\x00<id>" < "m/q.dlq\x00<id>"); two prefixes of which
// neither is a prefix of the other compare at their first differing byte,
// as their keys do. A general key is compared with an id key by bytes.
//
// Leaves. Within a prefix, a leaf's fence is a lower bound of its ids and
// is greater than every id of the leaf before it; the first leaf of a
// prefix has the zero fence. So every id of a prefix belongs in exactly one
// leaf: the last whose (prefix, fence) is at most (prefix, id). A full leaf
// splits in half, unless the new id goes after its last one: then the id
// starts a new leaf, so that ids arriving in ascending order (the
// scheduler's are time-ordered UUIDv7s) fill leaves whole, 28.2 bytes a
// key, and ids in random order fill them about 70% (Yao, "On random 2-3
// trees", Acta Informatica 9, 1978, for B-tree node occupancy). A leaf
// that falls to a quarter full merges with a neighbour of its prefix if
// both fit in three quarters of a leaf, so that deletes do not leave many
// sparse leaves; an empty leaf is dropped at once, as the leaves of a
// queue consumed in order are.
//
// Snapshots. Scan reads a snapshot: copies of both trees, which tidwall
// makes in O(1) by copy-on-write, sharing the leaves. The snapshot then
// increments the index's epoch. A leaf whose epoch differs from the
// index's may be shared with a snapshot, so the writer replaces it with a
// copy of the current epoch before it changes it; it is the scheme tidwall
// uses for its own nodes (their isoid).

const (
	// idLen is the length of the ID that ends an id key.
	idLen = 16
	// idTail is the length of an id key after its prefix: 0x00 and the ID.
	idTail = 1 + idLen
	// leafCap is the number of items a leaf holds: a leaf is 4,072 bytes,
	// in Go's 4,096-byte size class.
	leafCap = 145
)

// loc is where a key's value lies in the log.
type loc struct {
	seg  uint32 // segment id
	off  uint32 // offset of the value in the segment file
	vlen uint32 // length of the value in bytes
}

// entry is a key of the general tree, one that is not an id key.
type entry struct {
	key string
	loc
}

// entryLess orders the general tree by key bytes.
func entryLess(a, b entry) bool { return a.key < b.key }

// idItem is an id key within its leaf: the key's last 16 bytes and its
// value's position. It holds no pointer.
type idItem struct {
	id [idLen]byte
	loc
}

// leaf holds up to leafCap id keys of one prefix, ascending by id. It holds
// no pointer, so the garbage collector does not scan it.
type leaf struct {
	epoch uint64 // the index epoch the leaf was made in (copy-on-write)
	n     int32  // items in use; never 0 while the leaf is in the index
	items [leafCap]idItem
}

// leafRef is a leaf's entry in the tree of leaves, ordered by (prefix,
// fence).
type leafRef struct {
	// prefix is shared by every leaf of the prefix: one string per prefix.
	prefix string
	// fence is at most the leaf's first id and greater than every id of
	// the leaf before it in the prefix; zero for the prefix's first leaf.
	fence [idLen]byte
	l     *leaf
}

// refLess orders the tree of leaves by (prefix, fence), which is the byte
// order of the id keys the leaves hold (see Order above).
func refLess(a, b leafRef) bool {
	if a.prefix != b.prefix {
		return a.prefix < b.prefix
	}
	return idCompare(&a.fence, &b.fence) < 0
}

// idCompare compares two IDs as byte strings: -1, 0 or +1.
func idCompare(a, b *[idLen]byte) int {
	if a, b := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8]); a != b {
		if a < b {
			return -1
		}
		return 1
	}
	if a, b := binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:]); a != b {
		if a < b {
			return -1
		}
		return 1
	}
	return 0
}

// splitIDKey returns the prefix and ID of an id key (a prefix without
// 0x00, 0x00, 16 bytes); ok is false for any other key.
func splitIDKey(key []byte) (prefix []byte, id *[idLen]byte, ok bool) {
	n := len(key) - idTail
	if n < 0 || key[n] != 0 || bytes.IndexByte(key[:n], 0) >= 0 {
		return nil, nil, false
	}
	return key[:n], (*[idLen]byte)(key[n+1:]), true
}

// A bound is a position among the id keys, in their (prefix, id) order:
// just before (prefix, id), or just after it if after is set.
type bound struct {
	prefix string
	id     [idLen]byte
	after  bool
}

// lowerBound returns the position of the first id key at or after key in
// byte order. Write an id key c = p 0x00 i. If key holds no 0x00, c >= key
// exactly when p >= key: if key is a prefix of p, c is longer; if p is a
// proper prefix of key, c has 0x00 where key has a greater byte; otherwise
// they differ where p and key do. If key = s 0x00 r with s free of 0x00,
// the same reasoning gives c >= key exactly when p > s, or p = s and i >=
// r; and for 16-byte i, i >= r exactly when i >= r padded with zeros to 16
// bytes if r is that short, or i > r[:16] if r is longer.
//
// The bound aliases key.
func lowerBound(key []byte) bound {
	i := bytes.IndexByte(key, 0)
	if i < 0 {
		return bound{prefix: unsafeString(key)}
	}
	b := bound{prefix: unsafeString(key[:i])}
	rest := key[i+1:]
	copy(b.id[:], rest)
	b.after = len(rest) > idLen
	return b
}

// reaches reports whether the id key (prefix, id) is at or after b.
func (b *bound) reaches(prefix string, id *[idLen]byte) bool {
	if prefix != b.prefix {
		return prefix > b.prefix
	}
	c := idCompare(id, &b.id)
	return c > 0 || c == 0 && !b.after
}

// search returns the position of id in l, or where it would go.
func (l *leaf) search(id *[idLen]byte) (int, bool) {
	// Ids mostly arrive in ascending order (UUIDv7s): after the last.
	if l.n > 0 && idCompare(id, &l.items[l.n-1].id) > 0 {
		return int(l.n), false
	}
	lo, hi := 0, int(l.n)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if idCompare(&l.items[h].id, id) < 0 {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo, lo < int(l.n) && l.items[lo].id == *id
}

// lowerIndex returns the position of the first item of l, a leaf of
// prefix, at or after b.
func (l *leaf) lowerIndex(prefix string, b *bound) int {
	if prefix != b.prefix {
		if prefix > b.prefix {
			return 0
		}
		return int(l.n)
	}
	lo, hi := 0, int(l.n)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if !b.reaches(prefix, &l.items[h].id) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// insert puts it at position i, moving the items from i on up one; the
// leaf must have room.
func (l *leaf) insert(i int, it idItem) {
	copy(l.items[i+1:l.n+1], l.items[i:l.n])
	l.items[i] = it
	l.n++
}

// remove removes the items [i, j).
func (l *leaf) remove(i, j int) {
	copy(l.items[i:], l.items[j:l.n])
	l.n -= int32(j - i)
}

// keyIndex is the store's index of keys (see the comment at the top of
// this file). It is not safe for concurrent use: Disk.mu guards it.
type keyIndex struct {
	general *btree.BTreeG[entry]
	leaves  *btree.BTreeG[leafRef]
	ids     int    // id keys in leaves
	epoch   uint64 // leaves of another epoch may be shared with a snapshot
	leafMax int    // items per leaf: leafCap, fewer in tests
	// Hints for the writer's operations, which mostly touch the keys
	// near the previous one; readers use none, so that they may run
	// together.
	ghint, lhint btree.PathHint
}

// testLeafMax, if set, replaces leafCap as the number of items a leaf
// holds in indexes made from now on, so that tests reach splits and
// merges with few keys.
var testLeafMax int

// newKeyIndex returns an empty index.
func newKeyIndex() *keyIndex {
	x := &keyIndex{
		general: btree.NewBTreeGOptions(entryLess, btree.Options{NoLocks: true}),
		leaves:  btree.NewBTreeGOptions(refLess, btree.Options{NoLocks: true}),
		leafMax: leafCap,
	}
	if testLeafMax > 0 {
		x.leafMax = min(testLeafMax, leafCap)
	}
	return x
}

// len returns the number of keys.
func (x *keyIndex) len() int { return x.general.Len() + x.ids }

// snapshot returns a read-only copy of x as of now. Later changes to x do
// not show in it.
func (x *keyIndex) snapshot() *keyIndex {
	s := &keyIndex{
		general: x.general.Copy(),
		leaves:  x.leaves.Copy(),
		ids:     x.ids,
		epoch:   x.epoch,
		leafMax: x.leafMax,
	}
	x.epoch++
	return s
}

// locate returns the reference of the leaf where id belongs in prefix, if
// the prefix has any leaf.
func (x *keyIndex) locate(prefix string, id *[idLen]byte, hint *btree.PathHint) (leafRef, bool) {
	var r leafRef
	found := false
	x.leaves.DescendHint(leafRef{prefix: prefix, fence: *id}, func(it leafRef) bool {
		r, found = it, true
		return false
	}, hint)
	return r, found && r.prefix == prefix
}

// neighbour returns the reference after r (next) or before it.
func (x *keyIndex) neighbour(r leafRef, next bool) (leafRef, bool) {
	var out leafRef
	found := false
	iter := func(it leafRef) bool {
		if it.l == r.l || it.prefix == r.prefix && it.fence == r.fence {
			return true
		}
		out, found = it, true
		return false
	}
	if next {
		x.leaves.Ascend(r, iter)
	} else {
		x.leaves.Descend(r, iter)
	}
	return out, found
}

// own returns r's leaf ready to change: if a snapshot may share it, it is
// replaced by a copy, in r and in the tree.
func (x *keyIndex) own(r *leafRef) *leaf {
	if r.l.epoch != x.epoch {
		c := new(leaf)
		*c = *r.l
		c.epoch = x.epoch
		r.l = c
		x.leaves.SetHint(*r, &x.lhint)
	}
	return r.l
}

// get returns the location of key's value.
func (x *keyIndex) get(key []byte) (loc, bool) {
	prefix, id, ok := splitIDKey(key)
	if !ok {
		e, ok := x.general.Get(entry{key: unsafeString(key)})
		return e.loc, ok
	}
	r, ok := x.locate(unsafeString(prefix), id, nil)
	if !ok {
		return loc{}, false
	}
	i, found := r.l.search(id)
	if !found {
		return loc{}, false
	}
	return r.l.items[i].loc, true
}

// set makes key's value lie at l and returns where it lay before, if the
// key was present. It copies key.
func (x *keyIndex) set(key []byte, l loc) (old loc, replaced bool) {
	prefix, id, ok := splitIDKey(key)
	if !ok {
		probe := entry{key: unsafeString(key)}
		if e, ok := x.general.GetHint(probe, &x.ghint); ok {
			x.general.SetHint(entry{key: e.key, loc: l}, &x.ghint) // keeps e's string
			return e.loc, true
		}
		x.general.SetHint(entry{key: string(key), loc: l}, &x.ghint)
		return loc{}, false
	}
	it := idItem{id: *id, loc: l}
	r, ok := x.locate(unsafeString(prefix), id, &x.lhint)
	if !ok {
		lf := &leaf{epoch: x.epoch, n: 1}
		lf.items[0] = it
		x.leaves.SetHint(leafRef{prefix: string(prefix), l: lf}, &x.lhint)
		x.ids++
		return loc{}, false
	}
	i, found := r.l.search(id)
	if found {
		lf := x.own(&r)
		old = lf.items[i].loc
		lf.items[i].loc = l
		return old, true
	}
	x.ids++
	n := int(r.l.n)
	switch {
	case n < x.leafMax:
		x.own(&r).insert(i, it)
	case i == n:
		// After the leaf's last id (and before the next leaf's fence):
		// the id starts a leaf of its own, and the full one stays full.
		nl := &leaf{epoch: x.epoch, n: 1}
		nl.items[0] = it
		x.leaves.SetHint(leafRef{prefix: r.prefix, fence: it.id, l: nl}, &x.lhint)
	default:
		lf := x.own(&r)
		mid := n / 2
		nl := &leaf{epoch: x.epoch}
		nl.n = int32(copy(nl.items[:], lf.items[mid:n]))
		lf.n = int32(mid)
		x.leaves.SetHint(leafRef{prefix: r.prefix, fence: nl.items[0].id, l: nl}, &x.lhint)
		if i <= mid {
			lf.insert(i, it)
		} else {
			nl.insert(i-mid, it)
		}
	}
	return loc{}, false
}

// delete removes key and returns where its value lay, if it was present.
func (x *keyIndex) delete(key []byte) (old loc, ok bool) {
	prefix, id, isID := splitIDKey(key)
	if !isID {
		e, ok := x.general.DeleteHint(entry{key: unsafeString(key)}, &x.ghint)
		return e.loc, ok
	}
	r, ok := x.locate(unsafeString(prefix), id, &x.lhint)
	if !ok {
		return loc{}, false
	}
	i, found := r.l.search(id)
	if !found {
		return loc{}, false
	}
	old = r.l.items[i].loc
	x.ids--
	if r.l.n == 1 {
		x.dropLeaves([]leafRef{r})
		return old, true
	}
	lf := x.own(&r)
	lf.remove(i, i+1)
	x.merge(r)
	return old, true
}

// dropLeaves removes the references refs, in ascending order, from the
// tree. Where one was the first leaf of its prefix, the next leaf of that
// prefix, if any, becomes first: its fence becomes zero.
func (x *keyIndex) dropLeaves(refs []leafRef) {
	for _, r := range refs {
		x.leaves.DeleteHint(r, &x.lhint)
	}
	for _, r := range refs {
		if r.fence != ([idLen]byte{}) {
			continue
		}
		next, ok := x.neighbour(r, true)
		if !ok || next.prefix != r.prefix || next.fence == ([idLen]byte{}) {
			continue
		}
		x.leaves.Delete(next)
		next.fence = [idLen]byte{}
		x.leaves.Set(next)
	}
}

// merge merges r's leaf, which r.l is and x owns, with a neighbour of its
// prefix if it is at most a quarter full and both fit in three quarters of
// a leaf.
func (x *keyIndex) merge(r leafRef) {
	lf := r.l
	if int(lf.n)*4 > x.leafMax {
		return
	}
	fits := func(o leafRef) bool { return o.prefix == r.prefix && int(lf.n+o.l.n)*4 <= 3*x.leafMax }
	if next, ok := x.neighbour(r, true); ok && fits(next) {
		// next is not its prefix's first leaf: r comes before it.
		lf.n += int32(copy(lf.items[lf.n:], next.l.items[:next.l.n]))
		x.leaves.DeleteHint(next, &x.lhint)
		return
	}
	if r.fence == ([idLen]byte{}) {
		return // the first leaf of its prefix
	}
	if prev, ok := x.neighbour(r, false); ok && fits(prev) {
		pl := x.own(&prev)
		pl.n += int32(copy(pl.items[pl.n:], lf.items[:lf.n]))
		x.leaves.DeleteHint(r, &x.lhint)
	}
}

// deleteRange removes every key k with start <= k < end and calls kill
// with the length and location of each. Id keys go a leaf at a time: the
// leaves wholly inside the range are dropped from the tree of leaves
// without being changed (kill reads their items), and at most the two
// leaves at the range's ends are cut.
func (x *keyIndex) deleteRange(start, end []byte, kill func(klen int, l loc)) {
	if bytes.Compare(start, end) >= 0 {
		return
	}
	if x.general.Len() > 0 {
		gone := x.general.DeleteRange(entry{key: unsafeString(start)}, entry{key: unsafeString(end)}, nil)
		gone.Scan(func(e entry) bool {
			kill(len(e.key), e.loc)
			return true
		})
	}
	if x.ids == 0 {
		return
	}
	lo, hi := lowerBound(start), lowerBound(end)
	// The leaves that may hold ids in [lo, hi): from the one where lo
	// belongs (or the first) to the last whose fence is below hi.
	var from leafRef
	found := false
	x.leaves.DescendHint(leafRef{prefix: lo.prefix, fence: lo.id}, func(it leafRef) bool {
		from, found = it, true
		return false
	}, &x.lhint)
	var refs, cut []leafRef
	visit := func(r leafRef) bool {
		if hi.reaches(r.prefix, &r.fence) {
			return false
		}
		refs = append(refs, r)
		return true
	}
	if found {
		x.leaves.Ascend(from, visit)
	} else {
		x.leaves.Scan(visit)
	}
	n := 0 // refs[:n]: leaves dropped whole
	for _, r := range refs {
		lf := r.l
		i, j := lf.lowerIndex(r.prefix, &lo), lf.lowerIndex(r.prefix, &hi)
		if i >= j {
			continue
		}
		klen := len(r.prefix) + idTail
		for k := i; k < j; k++ {
			kill(klen, lf.items[k].loc)
		}
		x.ids -= j - i
		if i == 0 && j == int(lf.n) {
			refs[n] = r
			n++
			continue
		}
		x.own(&r).remove(i, j)
		cut = append(cut, r)
	}
	x.dropLeaves(refs[:n])
	for _, r := range cut {
		// A merge may have dropped or changed the leaf since.
		if cur, ok := x.leaves.Get(r); ok && cur.l == r.l {
			x.merge(cur)
		}
	}
}

// ascend calls fn for each key in [start, end) in ascending byte order
// with its location, until fn returns false; a nil end means no upper
// bound. key is valid only during fn and must not be changed. It merges
// the general tree with the id keys.
func (x *keyIndex) ascend(start, end []byte, fn func(key []byte, l loc) bool) {
	gi := x.general.Iter()
	defer gi.Release()
	gok := gi.Seek(entry{key: unsafeString(start)})
	var c idCursor
	c.seek(x, lowerBound(start))
	defer c.it.Release()
	for gok || c.ok {
		var key []byte
		var l loc
		general := gok && (!c.ok || gi.Item().key < unsafeString(c.key))
		if general {
			e := gi.Item()
			key, l = unsafeBytes(e.key), e.loc
		} else {
			key, l = c.key, c.ref.l.items[c.i].loc
		}
		if end != nil && bytes.Compare(key, end) >= 0 {
			return
		}
		if !fn(key, l) {
			return
		}
		if general {
			gok = gi.Next()
		} else {
			c.next()
		}
	}
}

// idCursor walks the id keys in order.
type idCursor struct {
	it  btree.IterG[leafRef]
	ref leafRef // the current leaf
	i   int     // the current item of ref.l
	ok  bool    // there is a current item
	key []byte  // the current key: prefix 0x00 id
}

// seek moves c to the first id key at or after b.
func (c *idCursor) seek(x *keyIndex, b bound) {
	c.it = x.leaves.Iter()
	var from leafRef
	found := false
	x.leaves.Descend(leafRef{prefix: b.prefix, fence: b.id}, func(it leafRef) bool {
		from, found = it, true
		return false
	})
	var ok bool
	if found {
		ok = c.it.Seek(from)
	} else {
		ok = c.it.First()
	}
	for ; ok; ok = c.it.Next() {
		c.ref = c.it.Item()
		if c.i = c.ref.l.lowerIndex(c.ref.prefix, &b); c.i < int(c.ref.l.n) {
			c.ok = true
			c.setKey()
			return
		}
	}
	c.ok = false
}

// setKey writes the current key into c.key: prefix, 0x00, id.
func (c *idCursor) setKey() {
	c.key = append(c.key[:0], c.ref.prefix...)
	c.key = append(c.key, 0)
	c.key = append(c.key, c.ref.l.items[c.i].id[:]...)
}

// next moves c to the next id key.
func (c *idCursor) next() {
	c.i++
	if c.i < int(c.ref.l.n) {
		copy(c.key[len(c.key)-idLen:], c.ref.l.items[c.i].id[:])
		return
	}
	if !c.it.Next() {
		c.ok = false
		return
	}
	c.ref, c.i = c.it.Item(), 0 // leaves in the index are never empty
	c.setKey()
}
