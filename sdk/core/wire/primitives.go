package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The encoders of the primitive types. Each appends to dst and returns the
// extended slice; the generated codec calls them field by field.

func appendU8(dst []byte, v uint8) []byte   { return append(dst, v) }
func appendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }
func appendI64(dst []byte, v int64) []byte  { return binary.BigEndian.AppendUint64(dst, uint64(v)) }
func appendF64(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendString writes a u16 length and the bytes. A string longer than
// 65,535 bytes is truncated to that length: encoders never fail, so callers
// that accept strings from users validate lengths first (ValidString).
func appendString(dst []byte, s string) []byte {
	if len(s) > math.MaxUint16 {
		s = s[:math.MaxUint16]
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendUUID(dst []byte, id [16]byte) []byte { return append(dst, id[:]...) }

// beginStruct reserves a struct's u32 length prefix and returns where it
// is; endStruct fills it in.
func beginStruct(dst []byte) ([]byte, int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

func endStruct(dst []byte, at int) []byte {
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// MaxString is the longest string the wire can carry, in bytes.
const MaxString = math.MaxUint16

// ValidString reports whether s fits a wire string.
func ValidString(s string) bool { return len(s) <= MaxString }

// A reader decodes primitives from a body with a sticky error: after the
// first failure every read returns a zero value, and err says where it
// failed. Nothing is allocated before its length has been checked against
// the bytes left.
type reader struct {
	b     []byte
	off   int
	err   *DecodeError
	frame string // for errors
	// strs interns short strings across a frame's items, so a batch whose
	// messages cycle through a few fairness keys allocates each once. It
	// is shared by the frame's reader and its sub-readers.
	strs *internTable
}

// internTable is a small direct-mapped cache of decoded strings.
type internTable [32]string

func newReader(b []byte, frame string) reader { return reader{b: b, frame: frame} }

// intern returns a string equal to b, from the table when present.
func (r *reader) intern(b []byte) string {
	if len(b) > 64 || r.strs == nil {
		return string(b)
	}
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &r.strs[h%uint32(len(r.strs))]
	if *slot == string(b) {
		return *slot
	}
	*slot = string(b)
	return *slot
}

// more reports whether bytes are left to decode: an optional field (one
// appended in a later release) is decoded only then, so an older peer's
// shorter body gives it its zero value.
func (r *reader) more() bool { return r.err == nil && r.off < len(r.b) }

func (r *reader) fail(field, reason string) {
	if r.err == nil {
		r.err = &DecodeError{Frame: r.frame, Field: field, Offset: r.off, Reason: reason}
	}
	r.off = len(r.b)
}

func (r *reader) need(n int, field string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail(field, "truncated")
		return false
	}
	return true
}

func (r *reader) u8(field string) uint8 {
	if !r.need(1, field) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16(field string) uint16 {
	if !r.need(2, field) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) i64(field string) int64   { return int64(r.u64(field)) }
func (r *reader) f64(field string) float64 { return math.Float64frombits(r.u64(field)) }

func (r *reader) bool(field string) bool {
	if !r.need(1, field) {
		return false
	}
	v := r.b[r.off]
	switch v {
	case 0:
		r.off++
		return false
	case 1:
		r.off++
		return true
	}
	r.fail(field, "bool is neither 0 nor 1")
	return false
}

// strBytes returns the bytes of a string field without copying.
func (r *reader) strBytes(field string) []byte {
	n := int(r.u16(field))
	if !r.need(n, field) {
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// strLike decodes a string, returning prev itself when the bytes equal it,
// so a batch whose items repeat a value (the queue name, a fairness key)
// allocates it once.
func (r *reader) strLike(field, prev string) string {
	b := r.strBytes(field)
	if string(b) == prev { // no allocation: the compiler compares in place
		return prev
	}
	return r.intern(b)
}

// strList decodes a []string of at most max items (0: no maximum),
// returning prev itself when every element equals prev's.
func (r *reader) strList(field string, prev []string, max int) []string {
	n := r.count(field, 2, max)
	if n == 0 {
		if r.err == nil && prev != nil && len(prev) == 0 {
			return prev
		}
		return nil
	}
	var out []string
	same := len(prev) == n
	for i := 0; i < n; i++ {
		b := r.strBytes(field)
		if r.err != nil {
			return nil
		}
		if same && string(b) == prev[i] {
			continue
		}
		if same {
			same = false
			out = make([]string, n)
			copy(out, prev[:i])
		} else if out == nil {
			out = make([]string, n)
		}
		out[i] = string(b)
	}
	if same {
		return prev
	}
	return out
}

// bytes returns a slice of the body, not a copy.
func (r *reader) bytes(field string) []byte {
	n := int(r.u32(field))
	if !r.need(n, field) {
		return nil
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

func (r *reader) uuid(field string) (id [16]byte) {
	if !r.need(16, field) {
		return id
	}
	copy(id[:], r.b[r.off:])
	r.off += 16
	return id
}

// count reads a list's u32 item count and checks that the bytes left could
// hold that many items of at least minItem bytes each (else the frame is
// malformed), then that the count is within the list's declared maximum
// (max items, 0 for none; else ErrListTooLong), so a forged count can make
// the decoder allocate neither more than the body justifies nor more than
// the protocol allows.
func (r *reader) count(field string, minItem, max int) int {
	n := r.u32(field)
	if r.err != nil {
		return 0
	}
	if uint64(n)*uint64(minItem) > uint64(len(r.b)-r.off) {
		r.fail(field, "list count exceeds the bytes left")
		return 0
	}
	if max > 0 && uint64(n) > uint64(max) {
		r.fail(field, fmt.Sprintf("list of %d items exceeds the maximum of %d", n, max))
		r.err.Err = ErrListTooLong
		return 0
	}
	return int(n)
}

// sub reads a nested struct's u32 length and returns a reader over exactly
// its bytes and the offset where they start; r moves past them. Bytes the
// sub-reader leaves unread are fields of a later version and are skipped.
func (r *reader) sub(field string) (reader, int) {
	n := int(r.u32(field))
	if !r.need(n, field) {
		return reader{err: r.err, frame: r.frame}, r.off
	}
	base := r.off
	s := reader{b: r.b[r.off : r.off+n : r.off+n], frame: r.frame, strs: r.strs}
	r.off += n
	return s, base
}

// joinItem folds the error of a sub-reader that decoded item i of the list
// field into r, naming the item's field and the offset in r's body.
func (r *reader) joinItem(s *reader, base int, field string, i int) {
	if s.err == nil || r.err != nil {
		return
	}
	e := *s.err
	e.Offset += base
	e.Field = fmt.Sprintf("%s[%d].%s", field, i, e.Field)
	r.err = &e
	r.off = len(r.b)
}

// joinField folds the error of a sub-reader that decoded the struct field
// into r.
func (r *reader) joinField(s *reader, base int, field string) {
	if s.err == nil || r.err != nil {
		return
	}
	e := *s.err
	e.Offset += base
	e.Field = field + "." + e.Field
	r.err = &e
	r.off = len(r.b)
}

func (r *reader) result() error {
	if r.err != nil {
		return r.err
	}
	return nil
}
