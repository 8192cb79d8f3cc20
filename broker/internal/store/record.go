package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unsafe"
)

// Record format.
//
// Every mutation group is one record, stored as one entry of the
// append-only log (github.com/tidwall/wal, which frames each entry as a
// uvarint length followed by the entry's bytes):
//
//	+--------------+-------------+--------------------+------------------+
//	| CRC-32C  4B  | version  1B | commit uvarint     | mutations ...    |
//	+--------------+-------------+--------------------+------------------+
//
// The checksum is CRC-32C (Castagnoli, RFC 3720 §12.1), little endian,
// over every byte after it. Commit is the log index of the first record
// written by the same write and fsync: recovery uses it to tell a torn
// final commit (cut off) from damage to a commit that was already durable
// (fatal unless repairing). Each mutation is
//
//	put:          0x01 | key length uvarint | key | value length uvarint | value
//	delete:       0x02 | key length uvarint | key
//	range delete: 0x03 | start length uvarint | start | end length uvarint | end
//
// and a record holds at least one mutation. A range delete removes every
// key k with start <= k < end in byte order, and start < end. The
// mutations of a record apply in order: a put after a range delete that
// covers its key survives it, one before it does not.
//
// The version is 1 (recordVersion) for a record without range deletes and
// 2 (recordVersionRange) for a record that holds at least one; recovery
// reads both, and rejects a version 1 record that holds a range delete or
// a version 2 record that holds none, so that every record has one
// encoding. Range deletes came after version 1: a broker that predates
// them takes a version 2 record for damage instead of misreading it (it
// refuses to start on a log that holds one, or, without the
// durable-position marker, may cut one in the log's newest commit as a
// torn commit), while a log without range deletes stays readable by it
// (docs/compatibility.md).
//
// A padding record takes the place of records that repair dropped
// (Options.Repair), so that every other record keeps its log index (its
// position in the log's sequence of entries) and its byte offset:
//
//	+--------------+-------------+---------------------+
//	| CRC-32C  4B  | 0xFF     1B | filler (zeros) ...  |
//	+--------------+-------------+---------------------+
//
// The checksum covers the marker byte and the filler, as in a data record.
// A padding record holds no commit index and no mutation; recovery counts
// it as one log entry and applies nothing. Its entry may write its length
// uvarint longer than needed (continuation bytes of zero value), so that
// an entry of any total size from 6 bytes up can be made to fill a damaged
// region exactly. Only repair writes padding; a broker older than the
// padding record rejects a log that holds one (docs/compatibility.md).
const (
	// recordVersion is the version byte of a data record without range
	// deletes.
	recordVersion = 1
	// recordVersionRange is the version byte of a data record holding at
	// least one range delete.
	recordVersionRange = 2
	// recordPadding is the version byte of a padding record.
	recordPadding = 0xFF
	// minPaddingEntry is the size of the smallest padding entry: a 1-byte
	// length, the checksum and the marker byte.
	minPaddingEntry = 1 + 4 + 1

	kindPut         = 1
	kindDelete      = 2
	kindDeleteRange = 3

	// headerRoom is the space a Batch reserves in front of its mutations
	// for the header: checksum, version and the longest commit uvarint.
	headerRoom = 4 + 1 + binary.MaxVarintLen64
)

// Size limits of a mutation group.
const (
	// MaxKeySize is the largest key a Batch accepts, in bytes (64 KiB).
	MaxKeySize = 64 << 10
	// MaxValueSize is the largest value a Batch accepts, in bytes (256 MiB).
	MaxValueSize = 256 << 20
	// MaxGroupSize is the largest encoded mutation group, in bytes (512 MiB).
	MaxGroupSize = 512 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errRecord is the cause of every record decoding failure.
var errRecord = errors.New("bad record")

// mutation is one decoded put, delete or range delete. key, value and end
// alias the record.
type mutation struct {
	kind     byte
	key      []byte // the key; a range delete's start
	value    []byte
	valueOff int    // offset of value within the record
	end      []byte // a range delete's end
}

// recordSize is the number of bytes a put of a klen-byte key and a
// vlen-byte value occupies in a record; live-byte accounting counts it.
func recordSize(klen, vlen int) int64 {
	return int64(1 + uvarintLen(uint64(klen)) + klen + uvarintLen(uint64(vlen)) + vlen)
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// checkRecord verifies rec's checksum and version and returns its commit
// index and the offset of its first mutation. A padding record has commit
// index 0 (no data record has: log indexes start at 1) and body len(rec).
func checkRecord(rec []byte) (commit uint64, body int, err error) {
	if len(rec) >= 5 && rec[4] == recordPadding && crc32.Checksum(rec[4:], castagnoli) == binary.LittleEndian.Uint32(rec) {
		return 0, len(rec), nil
	}
	if len(rec) < 6 {
		return 0, 0, fmt.Errorf("%w: %d bytes is too short", errRecord, len(rec))
	}
	if got, want := crc32.Checksum(rec[4:], castagnoli), binary.LittleEndian.Uint32(rec); got != want {
		return 0, 0, fmt.Errorf("%w: checksum mismatch", errRecord)
	}
	if rec[4] != recordVersion && rec[4] != recordVersionRange {
		return 0, 0, fmt.Errorf("%w: unknown version %d", errRecord, rec[4])
	}
	commit, n := binary.Uvarint(rec[5:])
	if n <= 0 || commit == 0 {
		return 0, 0, fmt.Errorf("%w: bad commit index", errRecord)
	}
	body = 5 + n
	if body == len(rec) {
		return 0, 0, fmt.Errorf("%w: no mutations", errRecord)
	}
	return commit, body, nil
}

// nextMutation decodes the mutation at rec[pos:] and returns it with the
// position of the next one. It never allocates and never reads outside rec.
func nextMutation(rec []byte, pos int) (m mutation, next int, err error) {
	kind := rec[pos]
	if kind != kindPut && kind != kindDelete && kind != kindDeleteRange {
		return m, 0, fmt.Errorf("%w: unknown mutation kind %d at %d", errRecord, kind, pos)
	}
	m.kind = kind
	pos++
	klen, n := binary.Uvarint(rec[pos:])
	if n <= 0 || klen > MaxKeySize || klen > uint64(len(rec)-pos-n) {
		return m, 0, fmt.Errorf("%w: bad key length at %d", errRecord, pos)
	}
	pos += n
	m.key = rec[pos : pos+int(klen) : pos+int(klen)]
	pos += int(klen)
	switch kind {
	case kindDelete:
		return m, pos, nil
	case kindDeleteRange:
		elen, n := binary.Uvarint(rec[pos:])
		if n <= 0 || elen > MaxKeySize || elen > uint64(len(rec)-pos-n) {
			return m, 0, fmt.Errorf("%w: bad range end length at %d", errRecord, pos)
		}
		pos += n
		m.end = rec[pos : pos+int(elen) : pos+int(elen)]
		if bytes.Compare(m.key, m.end) >= 0 {
			return m, 0, fmt.Errorf("%w: empty delete range at %d", errRecord, pos)
		}
		return m, pos + int(elen), nil
	}
	vlen, n := binary.Uvarint(rec[pos:])
	if n <= 0 || vlen > MaxValueSize || vlen > uint64(len(rec)-pos-n) {
		return m, 0, fmt.Errorf("%w: bad value length at %d", errRecord, pos)
	}
	pos += n
	m.valueOff = pos
	m.value = rec[pos : pos+int(vlen) : pos+int(vlen)]
	return m, pos + int(vlen), nil
}

// verifyRecord checks rec whole: checksum, version and every mutation. It
// returns the commit index and the offset of the first mutation (commit 0
// and len(rec) for a padding record). It is the
// decoder of on-disk bytes: any malformed input gives an error wrapping
// errRecord, never a panic, and it allocates nothing.
func verifyRecord(rec []byte) (commit uint64, body int, err error) {
	commit, body, err = checkRecord(rec)
	if err != nil {
		return 0, 0, err
	}
	ranges := false
	for pos := body; pos < len(rec); {
		var m mutation
		if m, pos, err = nextMutation(rec, pos); err != nil {
			return 0, 0, err
		}
		ranges = ranges || m.kind == kindDeleteRange
	}
	if commit != 0 && ranges != (rec[4] == recordVersionRange) {
		return 0, 0, fmt.Errorf("%w: version %d record with range deletes: %t", errRecord, rec[4], ranges)
	}
	return commit, body, nil
}

// appendPadding appends log entries that fill exactly n bytes: k padding
// entries, each at least minPaddingEntry bytes. n must be at least
// k*minPaddingEntry and k at least 1.
func appendPadding(dst []byte, n int64, k uint64) []byte {
	for i := uint64(0); i < k; i++ {
		size := int64(minPaddingEntry)
		if i == k-1 {
			size = n - int64(k-1)*minPaddingEntry
		}
		// The length prefix takes w bytes, where w is the width of size
		// itself: the record's length (size - w) never needs more, and is
		// written with continuation bytes up to w.
		w := uvarintLen(uint64(size))
		l := uint64(size) - uint64(w)
		for j := 0; j < w-1; j++ {
			dst = append(dst, byte(l)|0x80)
			l >>= 7
		}
		dst = append(dst, byte(l))
		rec := len(dst)
		dst = append(dst, 0, 0, 0, 0, recordPadding)
		for j := int64(w) + 5; j < size; j++ {
			dst = append(dst, 0)
		}
		binary.LittleEndian.PutUint32(dst[rec:], crc32.Checksum(dst[rec+4:], castagnoli))
	}
	return dst
}

// describeRecord reads what it can of a record that failed to verify: the
// commit index and the number of mutations that decode, ignoring the
// checksum. ok is false if not even the header reads.
func describeRecord(rec []byte) (commit uint64, mutations int, ok bool) {
	if len(rec) < 6 || rec[4] != recordVersion && rec[4] != recordVersionRange {
		return 0, 0, false
	}
	commit, n := binary.Uvarint(rec[5:])
	if n <= 0 {
		return 0, 0, false
	}
	for pos := 5 + n; pos < len(rec); mutations++ {
		_, next, err := nextMutation(rec, pos)
		if err != nil {
			break
		}
		pos = next
	}
	return commit, mutations, true
}

// ErrTooLarge is returned by Apply and ApplyAsync for a group holding a key,
// value or total size over MaxKeySize, MaxValueSize or MaxGroupSize. Nothing
// of such a group is written.
var ErrTooLarge = errors.New("mutation group too large")

// A Batch is a mutation group: a sequence of puts, deletes and range
// deletes that Apply makes durable and visible atomically, all or none,
// after every group applied before it. Within a batch mutations apply in
// the order they were added, so a later mutation of a key wins.
//
// Put, Delete and DeleteRange copy their arguments into the batch's
// buffer, which is already the group's on-disk encoding, so applying it
// copies nothing more per mutation. The zero Batch is empty and ready to
// use; a Batch is not safe for concurrent use.
type Batch struct {
	data   []byte // headerRoom bytes reserved, then the mutations
	n      int
	err    error
	ranges bool // holds a range delete: written as a version 2 record
	growth bool // RefuseWhenFull
	nosync bool // NoSync
}

// RefuseWhenFull marks the batch as growth: a group the store may refuse
// while the disk is full (Disk.Health().Full) rather than write it from
// the space it keeps for groups that must get through. Apply then fails
// with ErrNoSpace and nothing of the group is written. Mark groups whose
// caller changes no state until Apply succeeds and that add data, such as
// a new configuration entry; leave unmarked the groups that settle state
// already decided (an ack's delete), which the store writes while any
// space is left. Reset clears the mark.
func (b *Batch) RefuseWhenFull() { b.growth = true }

// NoSync marks the batch as not needing its own fsync: the store writes
// it in order with the others and makes it visible, then calls its done
// (or returns from Apply) without waiting for the disk, unless another
// group of the same commit needs an fsync anyway. The group becomes
// durable with the next fsync; a crash before then may lose it, whole
// (a group is never partly applied). For writes whose durability lies
// elsewhere, such as a replicated queue's state, which its Raft log can
// rebuild.
func (b *Batch) NoSync() { b.nosync = true }

// Synced reports whether the batch waits for an fsync: false once NoSync
// was called (until Reset).
func (b *Batch) Synced() bool { return !b.nosync }

func (b *Batch) grow() {
	if b.data == nil {
		b.data = make([]byte, headerRoom, headerRoom+256)
	}
}

// Grow makes room for n more bytes of mutations, so a caller that knows
// the group's size fills it without reallocating. Each Put takes
// len(key)+len(value) plus at most 21 bytes; each Delete len(key) plus at
// most 11; each DeleteRange len(start)+len(end) plus at most 7.
func (b *Batch) Grow(n int) {
	b.grow()
	if cap(b.data)-len(b.data) < n {
		b.data = append(make([]byte, 0, len(b.data)+n), b.data...)
	}
}

// Put records that key is to hold value. It copies key and value; the
// caller may reuse both at once. A key over MaxKeySize or a value over
// MaxValueSize makes the batch fail with ErrTooLarge when applied.
func (b *Batch) Put(key, value []byte) {
	if len(key) > MaxKeySize || len(value) > MaxValueSize {
		b.err = fmt.Errorf("%w: put of %d-byte key and %d-byte value", ErrTooLarge, len(key), len(value))
		return
	}
	b.grow()
	b.data = append(b.data, kindPut)
	b.data = binary.AppendUvarint(b.data, uint64(len(key)))
	b.data = append(b.data, key...)
	b.data = binary.AppendUvarint(b.data, uint64(len(value)))
	b.data = append(b.data, value...)
	b.n++
}

// Delete records that key is to be removed; deleting an absent key is not
// an error. It copies key.
func (b *Batch) Delete(key []byte) {
	if len(key) > MaxKeySize {
		b.err = fmt.Errorf("%w: delete of %d-byte key", ErrTooLarge, len(key))
		return
	}
	b.grow()
	b.data = append(b.data, kindDelete)
	b.data = binary.AppendUvarint(b.data, uint64(len(key)))
	b.data = append(b.data, key...)
	b.n++
}

// DeleteRange records that every key k with start <= k < end, in byte
// order, is to be removed: one mutation in the group's record, however
// many keys it removes. A range with end <= start is empty and records
// nothing. Mutations apply in the order they were added: a Put of a key in
// the range made after DeleteRange survives it, one made before does not.
// It copies start and end. A start or end over MaxKeySize makes the batch
// fail with ErrTooLarge when applied.
//
// A group holding a range delete is written as a version 2 record, which
// brokers that predate range deletes refuse to read (record.go,
// docs/compatibility.md).
func (b *Batch) DeleteRange(start, end []byte) {
	if len(start) > MaxKeySize || len(end) > MaxKeySize {
		b.err = fmt.Errorf("%w: range delete of %d-byte start and %d-byte end", ErrTooLarge, len(start), len(end))
		return
	}
	if bytes.Compare(start, end) >= 0 {
		return
	}
	b.grow()
	b.data = append(b.data, kindDeleteRange)
	b.data = binary.AppendUvarint(b.data, uint64(len(start)))
	b.data = append(b.data, start...)
	b.data = binary.AppendUvarint(b.data, uint64(len(end)))
	b.data = append(b.data, end...)
	b.n++
	b.ranges = true
}

// Len returns the number of mutations in the batch.
func (b *Batch) Len() int { return b.n }

// Size returns the encoded size of the batch's mutations in bytes.
func (b *Batch) Size() int {
	if b.data == nil {
		return 0
	}
	return len(b.data) - headerRoom
}

// Cap returns the capacity of the batch's buffer in bytes, for callers
// that pool batches and bound what they keep.
func (b *Batch) Cap() int { return cap(b.data) }

// Reset empties the batch, keeping its buffer for reuse.
func (b *Batch) Reset() {
	if b.data != nil {
		b.data = b.data[:headerRoom]
	}
	b.n = 0
	b.err = nil
	b.ranges = false
	b.growth = false
	b.nosync = false
}

// check returns the error a Put or Delete recorded, or ErrTooLarge if the
// group exceeds MaxGroupSize.
func (b *Batch) check() error {
	if b.err != nil {
		return b.err
	}
	if b.Size() > MaxGroupSize {
		return fmt.Errorf("%w: group of %d bytes", ErrTooLarge, b.Size())
	}
	return nil
}

// seal writes the record header for commit in front of the mutations and
// returns the whole record. The batch must not be empty.
func (b *Batch) seal(commit uint64) []byte {
	n := uvarintLen(commit)
	start := headerRoom - 5 - n
	rec := b.data[start:]
	rec[4] = recordVersion
	if b.ranges {
		rec[4] = recordVersionRange
	}
	binary.PutUvarint(rec[5:], commit)
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:], castagnoli))
	return rec
}

// mutations returns the encoded mutations of the batch.
func (b *Batch) mutations() []byte {
	if b.data == nil {
		return nil
	}
	return b.data[headerRoom:]
}

// unsafeString views b as a string without copying; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// unsafeBytes views s as a byte slice without copying; it must not be
// written.
func unsafeBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
