package conformance

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A span is the run of bytes of an encoded frame body that holds one
// field, or one field's length prefix or item count.
type span struct {
	path       string
	what       string // "": the value; "length": a length prefix; "count": a list's count
	start, end int
	depth      int  // nesting of the struct holding it
	item       bool // first span of an item of a list of structs
}

func (s span) name() string {
	if s.what == "" {
		return s.path
	}
	return s.path + " (" + s.what + ")"
}

// layout maps an encoded frame body to its fields. It never panics and
// allocates in proportion to the spans found; for a malformed body it
// returns the spans up to the fault, a last span over the undecodable rest,
// and an error naming the field.
func layout(op wire.Opcode, body []byte) ([]span, error) {
	t := frameType(op)
	if t == nil {
		return []span{{path: "(body of unknown opcode)", start: 0, end: len(body)}}, nil
	}
	w := &walker{b: body}
	w.fields(t, len(body), "", 0)
	if w.err == nil && w.off < len(body) {
		w.add(span{path: "(trailing bytes)", start: w.off, end: len(body)})
	}
	if w.err != nil && w.off < len(body) {
		w.add(span{path: "(undecodable)", start: w.off, end: len(body)})
	}
	return w.spans, w.err
}

type walker struct {
	b     []byte
	off   int
	spans []span
	err   error
	item  bool
}

func (w *walker) add(s span) {
	s.item = w.item
	w.item = false
	w.spans = append(w.spans, s)
}

func (w *walker) fail(path string, end int, reason string) {
	if w.err == nil {
		w.err = fmt.Errorf("field %s at offset %d: %s", path, w.off, reason)
	}
}

// take claims n bytes before end for path.
func (w *walker) take(n, end int, path, what string, depth int) bool {
	if w.err != nil {
		return false
	}
	if n < 0 || end-w.off < n {
		w.fail(path, end, "truncated")
		return false
	}
	w.add(span{path: path, what: what, start: w.off, end: w.off + n, depth: depth})
	w.off += n
	return true
}

func (w *walker) fields(t reflect.Type, end int, path string, depth int) {
	opt, hasOpt := wire.OptionalFrom[t.Name()]
	for i, f := range fieldsOf(t) {
		if hasOpt && i >= opt && w.off == end {
			return // the optional fields from here on were not sent
		}
		w.value(f.kind, f.typ, end, join(path, f.name), depth)
		if w.err != nil {
			return
		}
	}
}

func (w *walker) value(k kind, t reflect.Type, end int, path string, depth int) {
	if n := fixedSize(k); n > 0 {
		w.take(n, end, path, "", depth)
		return
	}
	switch k {
	case kString:
		if !w.take(2, end, path, "length", depth) {
			return
		}
		n := int(binary.BigEndian.Uint16(w.b[w.off-2:]))
		if n > 0 {
			w.take(n, end, path, "", depth)
		}
	case kBytes:
		if !w.take(4, end, path, "length", depth) {
			return
		}
		n := int(binary.BigEndian.Uint32(w.b[w.off-4:]))
		if n > 0 {
			w.take(n, end, path, "", depth)
		}
	case kStruct:
		if !w.take(4, end, path, "length", depth) {
			return
		}
		n := int(binary.BigEndian.Uint32(w.b[w.off-4:]))
		if n < 0 || end-w.off < n {
			w.fail(path, end, "struct length exceeds the bytes left")
			return
		}
		sub := w.off + n
		w.fields(t, sub, path, depth+1)
		if w.err != nil {
			return
		}
		if w.off < sub {
			w.add(span{path: path + ".(unknown trailing bytes)", start: w.off, end: sub, depth: depth + 1})
			w.off = sub
		}
	case kList:
		if !w.take(4, end, path, "count", depth) {
			return
		}
		n := int(binary.BigEndian.Uint32(w.b[w.off-4:]))
		ek := kindOf(t.Elem())
		minItem := max(fixedSize(ek), 2)
		if ek == kStruct || ek == kBytes {
			minItem = 4
		}
		if n < 0 || n > (end-w.off)/minItem {
			w.fail(path, end, "list count exceeds the bytes left")
			return
		}
		for i := 0; i < n && w.err == nil; i++ {
			w.item = ek == kStruct
			w.value(ek, t.Elem(), end, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
		w.item = false
	}
}

// physical is one frame as it travels: header and body positions in a
// byte string.
type physical struct {
	h                wire.Header
	start, body, end int
}

// splitPhysical splits b into frames; a last incomplete frame has end
// beyond len(b) clipped to len(b).
func splitPhysical(b []byte) []physical {
	var out []physical
	for off := 0; off < len(b); {
		if len(b)-off < wire.HeaderSize {
			out = append(out, physical{start: off, body: len(b), end: len(b)})
			break
		}
		h, _ := wire.ParseHeader(b[off:])
		end := off + wire.HeaderSize + int(h.Length)
		if end > len(b) || end < off {
			end = len(b)
		}
		out = append(out, physical{h: h, start: off, body: off + wire.HeaderSize, end: end})
		off = end
	}
	return out
}

// logicalBody concatenates the bodies of the physical frames of one
// logical frame.
func logicalBody(b []byte, ps []physical) []byte {
	if len(ps) == 1 {
		return b[ps[0].body:ps[0].end]
	}
	var body []byte
	for _, p := range ps {
		body = append(body, b[p.body:p.end]...)
	}
	return body
}

var headerFields = []struct {
	name       string
	start, end int
}{{"header.length", 0, 4}, {"header.opcode", 4, 6}, {"header.flags", 6, 8}, {"header.request_id", 8, 12}}

// fieldAt names the field holding byte off of b, the bytes of one logical
// frame (one or more physical frames).
func fieldAt(b []byte, off int) string {
	ps := splitPhysical(b)
	bodyOff := 0
	for i, p := range ps {
		if off >= p.start && off < p.body {
			name := "header"
			for _, hf := range headerFields {
				if off-p.start >= hf.start && off-p.start < hf.end {
					name = hf.name
				}
			}
			if len(ps) > 1 {
				name += fmt.Sprintf(" of frame %d", i+1)
			}
			return name
		}
		if off >= p.body && off < p.end {
			bodyOff += off - p.body
			spans, _ := layout(ps[0].h.Opcode, logicalBody(b, ps))
			for _, s := range spans {
				if bodyOff >= s.start && bodyOff < s.end {
					return s.name()
				}
			}
			return "(body)"
		}
		bodyOff += p.end - p.body
	}
	return "(past the end)"
}

// hexLines formats the bytes of one logical frame for a transcript: the
// header on a line of its own, then the body field by field, a new line
// for each item of a list of structs, at most 32 bytes a line.
func hexLines(b []byte) []string {
	ps := splitPhysical(b)
	var lines []string
	for _, p := range ps {
		if p.body-p.start < wire.HeaderSize {
			lines = append(lines, chunkHex(b[p.start:p.end], "")...)
			continue
		}
		h := b[p.start:p.body]
		lines = append(lines, fmt.Sprintf("%x %x %x %x", h[0:4], h[4:6], h[6:8], h[8:12]))
		if len(ps) > 1 {
			lines = append(lines, chunkHex(b[p.body:p.end], "")...)
			continue
		}
		spans, _ := layout(p.h.Opcode, b[p.body:p.end])
		lines = append(lines, spanHex(b[p.body:p.end], spans)...)
	}
	return lines
}

func spanHex(body []byte, spans []span) []string {
	var lines []string
	var cur strings.Builder
	curBytes := 0
	indent := ""
	flush := func() {
		if cur.Len() > 0 {
			lines = append(lines, cur.String())
		}
		cur.Reset()
		curBytes = 0
	}
	for _, s := range spans {
		if s.item {
			flush()
			indent = strings.Repeat("  ", s.depth)
		}
		chunk := body[s.start:s.end]
		for len(chunk) > 0 {
			room := 32 - curBytes
			if room <= 0 || (curBytes > 0 && len(chunk) > room && len(chunk) <= 32) {
				flush()
				room = 32
			}
			n := min(room, len(chunk))
			if cur.Len() == 0 {
				cur.WriteString(indent)
			} else {
				cur.WriteByte(' ')
			}
			cur.WriteString(hex.EncodeToString(chunk[:n]))
			curBytes += n
			chunk = chunk[n:]
		}
	}
	flush()
	return lines
}

func chunkHex(b []byte, indent string) []string {
	var lines []string
	for len(b) > 0 {
		n := min(32, len(b))
		lines = append(lines, indent+hex.EncodeToString(b[:n]))
		b = b[n:]
	}
	return lines
}

// parseHex reads hex written by hexLines or by hand: whitespace is
// ignored.
func parseHex(lines []string) ([]byte, error) {
	var s strings.Builder
	for _, l := range lines {
		for _, f := range strings.Fields(l) {
			s.WriteString(f)
		}
	}
	return hex.DecodeString(s.String())
}

// byteDiff describes how got differs from want, both the bytes of one
// logical frame: the first differing byte and the field holding it, then
// every field whose bytes differ, aligned by field path.
func byteDiff(want, got []byte) []string {
	first := 0
	for first < len(want) && first < len(got) && want[first] == got[first] {
		first++
	}
	if first == len(want) && first == len(got) {
		return nil
	}
	var out []string
	where := fieldAt(want, first)
	if first >= len(want) {
		where = fieldAt(got, first)
	}
	out = append(out, fmt.Sprintf("first difference at byte %d: %s", first, where))
	wp, gp := splitPhysical(want), splitPhysical(got)
	if len(wp) != 1 || len(gp) != 1 || wp[0].body-wp[0].start < wire.HeaderSize || gp[0].body-gp[0].start < wire.HeaderSize {
		return append(out, fmt.Sprintf("want %d bytes in %d frames, got %d bytes in %d frames", len(want), len(wp), len(got), len(gp)))
	}
	for _, hf := range headerFields {
		w, g := want[hf.start:hf.end], got[hf.start:hf.end]
		if !bytes.Equal(w, g) {
			out = append(out, fmt.Sprintf("bytes %d-%d %s: want %x, got %x", hf.start, hf.end-1, hf.name, w, g))
		}
	}
	if wp[0].h.Opcode != gp[0].h.Opcode {
		return out
	}
	wb, gb := want[wire.HeaderSize:], got[wire.HeaderSize:]
	ws, _ := layout(wp[0].h.Opcode, wb)
	gs, _ := layout(gp[0].h.Opcode, gb)
	gotBy := make(map[string]span, len(gs))
	for _, s := range gs {
		gotBy[s.name()] = s
	}
	seen := make(map[string]bool, len(ws))
	for _, s := range ws {
		seen[s.name()] = true
		g, ok := gotBy[s.name()]
		w := wb[s.start:s.end]
		if !ok {
			out = append(out, fmt.Sprintf("bytes %d-%d %s: want %s, got nothing", s.start+wire.HeaderSize, s.end+wire.HeaderSize-1, s.name(), shortHex(w)))
			continue
		}
		gv := gb[g.start:g.end]
		if !bytes.Equal(w, gv) {
			out = append(out, fmt.Sprintf("bytes %d-%d %s: want %s, got %s", s.start+wire.HeaderSize, s.end+wire.HeaderSize-1, s.name(), shortHex(w), shortHex(gv)))
		}
	}
	for _, g := range gs {
		if !seen[g.name()] {
			out = append(out, fmt.Sprintf("bytes %d-%d %s: want nothing, got %s", g.start+wire.HeaderSize, g.end+wire.HeaderSize-1, g.name(), shortHex(gb[g.start:g.end])))
		}
	}
	return out
}

func shortHex(b []byte) string {
	if len(b) > 24 {
		return hex.EncodeToString(b[:24]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	if len(b) == 0 {
		return "(none)"
	}
	return hex.EncodeToString(b)
}
