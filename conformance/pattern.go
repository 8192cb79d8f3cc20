package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A framePattern is one frame of a transcript as written: its header and
// its body's pattern, which may hold placeholders.
type framePattern struct {
	op    wire.Opcode
	reqID uint32
	flags wire.Flags
	split int // the body travels in continuation frames of at most split bytes
	body  *pattern
}

// bindings maps placeholder names to values. A placeholder is bound when
// first seen: to the peer's value in a frame the runner receives, to its
// canonical value in a frame the runner sends.
type bindings struct {
	vals  map[string]reflect.Value
	field map[string]string // the field each was first bound in
}

func newBindings() *bindings {
	return &bindings{vals: map[string]reflect.Value{}, field: map[string]string{}}
}

func (b *bindings) bind(name string, v reflect.Value, field string) {
	b.vals[name] = v
	b.field[name] = field
}

func (b *bindings) lookup(name string) (reflect.Value, bool) {
	v, ok := b.vals[name]
	return v, ok
}

// textOf returns the text a bound placeholder stands for inside a string:
// a UUID's 8-4-4-4-12 form, a number in decimal, a string as is.
func textOf(v reflect.Value) string {
	switch kindOf(v.Type()) {
	case kUUID:
		return formatUUID(v.Interface().([16]byte))
	case kU8, kU16, kU32, kU64, kCode, kPermission:
		return strconv.FormatUint(v.Uint(), 10)
	case kI64:
		return strconv.FormatInt(v.Int(), 10)
	case kF64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case kBytes:
		return string(v.Bytes())
	case kString:
		return v.String()
	}
	return fmt.Sprint(v.Interface())
}

// epochMS is the time canonical timestamps are drawn near: 2025-01-01
// 00:00:00 UTC in Unix milliseconds.
const epochMS = 1735689600000

// canonical returns the value a placeholder takes in frames the runner
// sends before anything bound it: derived from its name, so a transcript's
// hex never changes from run to run. UUIDs keep the version 7 and variant
// bits of RFC 9562; timestamps (fields ending _at_ms) fall within a day of
// epochMS; strings are the name itself.
func canonical(p *pattern) reflect.Value {
	h := fnv.New64a()
	h.Write([]byte(p.ph))
	x := h.Sum64()
	v := reflect.New(p.typ).Elem()
	switch p.kind {
	case kUUID:
		var id [16]byte
		binary.BigEndian.PutUint64(id[0:], uint64(epochMS)<<16|x>>48)
		binary.BigEndian.PutUint64(id[8:], x)
		id[6] = 0x70 | id[6]&0x0f
		id[8] = 0x80 | id[8]&0x3f
		v.Set(reflect.ValueOf(id))
	case kU64, kI64:
		n := x%1_000_000 + 1
		if strings.HasSuffix(p.field, "_at_ms") {
			n = epochMS + x%86_400_000
		}
		if p.kind == kI64 {
			v.SetInt(int64(n))
		} else {
			v.SetUint(n)
		}
	case kU8, kU16, kU32:
		v.SetUint(x%uint64(1<<(p.typ.Bits()-1)) + 1)
	case kCode:
		v.SetUint(uint64(wire.CodeInternal))
	case kPermission:
		v.SetUint(uint64(wire.PermissionKindConsume))
	case kF64:
		v.SetFloat(float64(x%10_000) / 10)
	case kString:
		v.SetString(p.ph)
	case kBytes:
		v.SetBytes([]byte(p.ph))
	}
	return v
}

// convert returns bound value v as type t, when a placeholder bound in one
// field is used in another of a compatible type.
func convert(v reflect.Value, t reflect.Type) (reflect.Value, bool) {
	if v.Type() == t {
		return v, true
	}
	vk, tk := kindOf(v.Type()), kindOf(t)
	switch {
	case isUnsigned(vk) && isUnsigned(tk):
		n := v.Uint()
		out := reflect.New(t).Elem()
		if out.OverflowUint(n) {
			return v, false
		}
		out.SetUint(n)
		return out, true
	case (vk == kString || vk == kBytes) && (tk == kString || tk == kBytes):
		out := reflect.New(t).Elem()
		if tk == kString {
			out.SetString(textOf(v))
		} else {
			out.SetBytes([]byte(textOf(v)))
		}
		return out, true
	}
	return v, false
}

func isUnsigned(k kind) bool {
	return k == kU8 || k == kU16 || k == kU32 || k == kU64
}

// build makes the value p describes. Placeholders not yet bound take their
// canonical values and are bound to them.
func (p *pattern) build(b *bindings) (reflect.Value, error) {
	switch {
	case p.ph != "":
		if v, ok := b.lookup(p.ph); ok {
			cv, ok := convert(v, p.typ)
			if !ok {
				return cv, fmt.Errorf("line %d: $%s is a %v, used as a %v", p.tok.line, p.ph, v.Type(), p.typ)
			}
			return cv, nil
		}
		v := canonical(p)
		b.bind(p.ph, v, p.field)
		return v, nil
	case p.parts != nil:
		s, err := expand(p.parts, b)
		if err != nil {
			return reflect.Value{}, fmt.Errorf("line %d: %w", p.tok.line, err)
		}
		v := reflect.New(p.typ).Elem()
		if p.kind == kBytes {
			v.SetBytes([]byte(s))
		} else {
			v.SetString(s)
		}
		return v, nil
	case p.kind == kStruct:
		v := reflect.New(p.typ).Elem()
		for i, fp := range p.fields {
			if fp == nil {
				continue
			}
			fv, err := fp.build(b)
			if err != nil {
				return v, err
			}
			v.Field(i).Set(fv)
		}
		return v, nil
	case p.kind == kList:
		v := reflect.MakeSlice(p.typ, len(p.items), len(p.items))
		for i, it := range p.items {
			iv, err := it.build(b)
			if err != nil {
				return v, err
			}
			v.Index(i).Set(iv)
		}
		return v, nil
	}
	return p.lit, nil
}

func expand(parts []strPart, b *bindings) (string, error) {
	var s strings.Builder
	for _, pt := range parts {
		if pt.ph == "" {
			s.WriteString(pt.lit)
			continue
		}
		v, ok := b.lookup(pt.ph)
		if !ok {
			return "", fmt.Errorf("${%s} is used before it is bound", pt.ph)
		}
		s.WriteString(textOf(v))
	}
	return s.String(), nil
}

// frame builds the frame fp describes.
func (fp *framePattern) frame(b *bindings) (wire.Frame, error) {
	v, err := fp.body.build(b)
	if err != nil {
		return nil, err
	}
	f := wire.New(fp.op)
	reflect.ValueOf(f).Elem().Set(v)
	return f, nil
}

// encode returns the bytes of fp: one frame, or a run of continuation
// frames when split is set.
func (fp *framePattern) encode(b *bindings) ([]byte, error) {
	f, err := fp.frame(b)
	if err != nil {
		return nil, err
	}
	return encodeFrame(fp.reqID, fp.flags, fp.split, f), nil
}

func encodeFrame(reqID uint32, flags wire.Flags, split int, f wire.Frame) []byte {
	if split > 0 {
		return wire.AppendFrames(nil, reqID, f, split)
	}
	out := wire.AppendFrame(nil, reqID, f)
	binary.BigEndian.PutUint16(out[6:], uint16(flags))
	return out
}

// A fieldDiff is one field whose value is not what the transcript says.
type fieldDiff struct {
	path      string
	want, got string
}

// matcher compares received values with patterns. Placeholders seen for
// the first time are bound tentatively in fresh; the caller commits them
// when the whole frame matched.
type matcher struct {
	b     *bindings
	fresh *bindings
	diffs []fieldDiff
}

func newMatcher(b *bindings) *matcher {
	return &matcher{b: b, fresh: newBindings()}
}

func (m *matcher) lookup(name string) (reflect.Value, bool) {
	if v, ok := m.fresh.lookup(name); ok {
		return v, true
	}
	return m.b.lookup(name)
}

// commit binds the placeholders first seen in the frames matched so far.
func (m *matcher) commit() {
	for k, v := range m.fresh.vals {
		m.b.bind(k, v, m.fresh.field[k])
	}
	m.fresh = newBindings()
	m.diffs = nil
}

func (m *matcher) diff(path, want, got string) {
	m.diffs = append(m.diffs, fieldDiff{path: path, want: want, got: got})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (m *matcher) match(p *pattern, v reflect.Value, path string) {
	switch {
	case p.ph != "":
		if want, ok := m.lookup(p.ph); ok {
			cw, ok := convert(want, v.Type())
			if !ok || !equalValues(cw, v) {
				m.diff(path, "$"+p.ph+" = "+renderPlain(want), renderPlain(v))
			}
			return
		}
		if p.kind == kUUID {
			for name, bv := range m.allBound() {
				if bv.Type() == v.Type() && equalValues(bv, v) {
					m.diff(path, "$"+p.ph+", a new ID", renderPlain(v)+", the value of $"+name)
					return
				}
			}
		}
		m.fresh.bind(p.ph, v, p.field)
	case p.parts != nil:
		var s strings.Builder
		for _, pt := range p.parts {
			if pt.ph == "" {
				s.WriteString(pt.lit)
				continue
			}
			bv, ok := m.lookup(pt.ph)
			if !ok {
				m.diff(path, "a string using ${"+pt.ph+"}, which is not bound", renderPlain(v))
				return
			}
			s.WriteString(textOf(bv))
		}
		if textOf(v) != s.String() {
			m.diff(path, quote(s.String()), renderPlain(v))
		}
	case p.kind == kStruct:
		fs := fieldsOf(p.typ)
		for i, fp := range p.fields {
			fv := v.Field(i)
			if fp == nil {
				if !isZero(fv) {
					m.diff(join(path, fs[i].name), zeroText(fs[i].kind), renderPlain(fv))
				}
				continue
			}
			m.match(fp, fv, join(path, fs[i].name))
		}
	case p.kind == kList:
		n := v.Len()
		if n != len(p.items) {
			m.diff(path+" (count)", strconv.Itoa(len(p.items)), strconv.Itoa(n))
		}
		for i := 0; i < min(n, len(p.items)); i++ {
			m.match(p.items[i], v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		if !equalValues(p.lit, v) {
			m.diff(path, renderPlain(p.lit), renderPlain(v))
		}
	}
}

func (m *matcher) allBound() map[string]reflect.Value {
	all := make(map[string]reflect.Value, len(m.b.vals)+len(m.fresh.vals))
	for k, v := range m.b.vals {
		all[k] = v
	}
	for k, v := range m.fresh.vals {
		all[k] = v
	}
	return all
}

func zeroText(k kind) string {
	switch k {
	case kList:
		return "[]"
	case kString, kBytes:
		return `""`
	case kStruct:
		return "{}"
	case kCode:
		return "OK"
	case kBool:
		return "false"
	case kUUID:
		return "the zero UUID"
	}
	return "0"
}

func equalValues(a, b reflect.Value) bool {
	if kindOf(a.Type()) == kBytes {
		return bytes.Equal(a.Bytes(), b.Bytes())
	}
	if kindOf(a.Type()) == kF64 {
		return a.Float() == b.Float() || math.IsNaN(a.Float()) && math.IsNaN(b.Float())
	}
	return a.Interface() == b.Interface()
}

func isZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice:
		return v.Len() == 0
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if !isZero(v.Field(i)) {
				return false
			}
		}
		return true
	}
	return v.IsZero()
}

// matchFrame compares a received frame with fp's header and body.
func (m *matcher) matchFrame(fp *framePattern, h wire.Header, f wire.Frame) {
	if h.Opcode != fp.op {
		m.diff("header.opcode", fp.op.String(), h.Opcode.String())
		return
	}
	if h.RequestID != fp.reqID {
		m.diff("header.request_id", strconv.FormatUint(uint64(fp.reqID), 10), strconv.FormatUint(uint64(h.RequestID), 10))
	}
	if fp.split == 0 && h.Flags != fp.flags {
		m.diff("header.flags", strconv.FormatUint(uint64(fp.flags), 10), strconv.FormatUint(uint64(h.Flags), 10))
	}
	m.match(fp.body, reflect.ValueOf(f).Elem(), "")
}

// interpolate prepares s for quoting in the notation: every $ doubled, and
// the text of bound UUIDs, leases and strings of at least minInterpolated
// bytes (API key IDs, say) replaced by ${name}, so messages that mention
// them read the same in every run.
func (b *bindings) interpolate(s string) string {
	s = strings.ReplaceAll(s, "$", "$$")
	names := make([]string, 0, len(b.vals))
	for name := range b.vals {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := b.vals[name]
		switch {
		case kindOf(v.Type()) == kUUID:
			s = strings.ReplaceAll(s, textOf(v), "${"+name+"}")
		case b.field[name] == "lease":
			s = replaceWord(s, textOf(v), "${"+name+"}")
		case kindOf(v.Type()) == kString && len(v.String()) >= minInterpolated:
			s = strings.ReplaceAll(s, v.String(), "${"+name+"}")
		}
	}
	return s
}

// minInterpolated is the shortest bound string interpolate replaces: a
// shorter one could match by accident.
const minInterpolated = 8

// replaceWord replaces the occurrences of the number word in s that are not
// part of a longer run of digits.
func replaceWord(s, word, with string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, word)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		end := i + len(word)
		if (i > 0 && isDigit(s[i-1])) || (end < len(s) && isDigit(s[end])) {
			out.WriteString(s[:end])
			s = s[end:]
			continue
		}
		out.WriteString(s[:i] + with)
		s = s[end:]
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// nameOf returns the placeholder bound to v, for UUIDs and strings.
func (b *bindings) nameOf(v reflect.Value) (string, bool) {
	k := kindOf(v.Type())
	if k != kUUID && k != kString {
		return "", false
	}
	best := ""
	for name, bv := range b.vals {
		if kindOf(bv.Type()) == k && equalValues(bv, v) && (best == "" || name < best) {
			best = name
		}
	}
	return best, best != ""
}

// bound renders values with the placeholders of b: a namer for events.
type bound struct{ b *bindings }

func (n bound) placeholder(_ string, _, v reflect.Value) (string, bool) { return n.b.nameOf(v) }
func (n bound) interpolate(s string) string                             { return n.b.interpolate(s) }
