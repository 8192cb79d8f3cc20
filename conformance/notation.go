package conformance

import (
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// The decoded notation of a frame, as written above the hex in a
// transcript:
//
//	Enqueue req=2 messages=[{queue="orders" payload="hello" weight=2}]
//
// The frame's name comes first, then the header (req=, and flags= or
// split= when not zero), then field=value pairs in any order. A field left
// out is zero. Values: decimal or 0x numbers, true/false, error codes and
// permission kinds by name (QUEUE_NOT_FOUND, consume), UUIDs in their
// 8-4-4-4-12 form, Go-quoted strings and payloads, [lists] and {structs},
// and $name placeholders. Inside a quoted string ${name} is replaced by the
// text of a bound placeholder and $$ stands for one $.

// token kinds of the notation's scanner.
const (
	tWord  = 'w'
	tStr   = 's'
	tPunct = 'p'
	tEOF   = 0
)

type token struct {
	kind      byte
	text      string // word text, punctuation, or the unquoted string
	line, col int
}

type scanner struct {
	src       string
	off       int
	line, col int
	baseLine  int
}

func (s *scanner) errorf(t token, format string, args ...any) error {
	return &NotationError{Line: t.line, Col: t.col, Msg: fmt.Sprintf(format, args...)}
}

// A NotationError reports text that is not valid frame notation; Line is
// the transcript line, Col the byte in it (from 1).
type NotationError struct {
	Line, Col int
	Msg       string
}

// Error returns "line:col: message".
func (e *NotationError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

func isPunct(c byte) bool {
	switch c {
	case '[', ']', '{', '}', '=', ',':
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) next() (token, error) {
	for s.off < len(s.src) && isSpace(s.src[s.off]) {
		if s.src[s.off] == '\n' {
			s.line++
			s.col = 0
		}
		s.off++
		s.col++
	}
	t := token{line: s.baseLine + s.line, col: s.col + 1}
	if s.off >= len(s.src) {
		return t, nil
	}
	c := s.src[s.off]
	switch {
	case isPunct(c):
		s.off++
		s.col++
		t.kind, t.text = tPunct, string(c)
		return t, nil
	case c == '"':
		end := s.off + 1
		for end < len(s.src) && s.src[end] != '"' {
			if s.src[end] == '\\' {
				end++
			}
			if end < len(s.src) && s.src[end] == '\n' {
				return t, s.errorf(t, "unterminated string")
			}
			end++
		}
		if end >= len(s.src) {
			return t, s.errorf(t, "unterminated string")
		}
		v, err := strconv.Unquote(s.src[s.off : end+1])
		if err != nil {
			return t, s.errorf(t, "bad string %s: %v", s.src[s.off:end+1], err)
		}
		s.col += end + 1 - s.off
		s.off = end + 1
		t.kind, t.text = tStr, v
		return t, nil
	}
	start := s.off
	for s.off < len(s.src) && !isSpace(s.src[s.off]) && !isPunct(s.src[s.off]) && s.src[s.off] != '"' {
		s.off++
	}
	s.col += s.off - start
	t.kind, t.text = tWord, s.src[start:s.off]
	return t, nil
}

// tnode is an untyped value as written: a word, a string, a list or a
// struct. compile gives it a type.
type tnode struct {
	tok    token
	list   []*tnode
	fields []tfield
	isList bool
	isRec  bool
}

type tfield struct {
	key token
	val *tnode
}

type parser struct {
	s   scanner
	tok token
}

func (p *parser) advance() error {
	t, err := p.s.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *parser) value() (*tnode, error) {
	t := p.tok
	switch {
	case t.kind == tPunct && t.text == "[":
		n := &tnode{tok: t, isList: true}
		if err := p.advance(); err != nil {
			return nil, err
		}
		for {
			if p.tok.kind == tPunct && p.tok.text == "]" {
				return n, p.advance()
			}
			if p.tok.kind == tPunct && p.tok.text == "," {
				if err := p.advance(); err != nil {
					return nil, err
				}
				continue
			}
			if p.tok.kind == tEOF {
				return nil, p.s.errorf(t, "unclosed [")
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			n.list = append(n.list, v)
		}
	case t.kind == tPunct && t.text == "{":
		n := &tnode{tok: t, isRec: true}
		if err := p.advance(); err != nil {
			return nil, err
		}
		for {
			if p.tok.kind == tPunct && p.tok.text == "}" {
				return n, p.advance()
			}
			if p.tok.kind == tPunct && p.tok.text == "," {
				if err := p.advance(); err != nil {
					return nil, err
				}
				continue
			}
			if p.tok.kind == tEOF {
				return nil, p.s.errorf(t, "unclosed {")
			}
			f, err := p.pair()
			if err != nil {
				return nil, err
			}
			n.fields = append(n.fields, f)
		}
	case t.kind == tWord || t.kind == tStr:
		return &tnode{tok: t}, p.advance()
	case t.kind == tEOF:
		return nil, p.s.errorf(t, "missing value")
	}
	return nil, p.s.errorf(t, "unexpected %q", t.text)
}

func (p *parser) pair() (tfield, error) {
	key := p.tok
	if key.kind != tWord {
		return tfield{}, p.s.errorf(key, "want field=value, have %q", key.text)
	}
	if err := p.advance(); err != nil {
		return tfield{}, err
	}
	if p.tok.kind != tPunct || p.tok.text != "=" {
		return tfield{}, p.s.errorf(p.tok, "want = after %s", key.text)
	}
	if err := p.advance(); err != nil {
		return tfield{}, err
	}
	v, err := p.value()
	if err != nil {
		return tfield{}, err
	}
	return tfield{key: key, val: v}, nil
}

// parseFrame parses the notation of one frame; line is the transcript line
// text starts on, for errors.
func parseFrame(text string, line int) (*framePattern, error) {
	p := &parser{s: scanner{src: text, baseLine: line}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	name := p.tok
	if name.kind != tWord {
		return nil, p.s.errorf(name, "want a frame name")
	}
	op, ok := opcodeNamed(name.text)
	if !ok {
		return nil, p.s.errorf(name, "unknown frame %q", name.text)
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	fp := &framePattern{op: op}
	rec := &tnode{tok: name, isRec: true}
	for p.tok.kind != tEOF {
		f, err := p.pair()
		if err != nil {
			return nil, err
		}
		switch f.key.text {
		case "req", "flags", "split":
			if f.val.tok.kind != tWord || f.val.isList || f.val.isRec {
				return nil, p.s.errorf(f.val.tok, "%s wants a number", f.key.text)
			}
			n, err := strconv.ParseUint(f.val.tok.text, 0, 32)
			if err != nil {
				return nil, p.s.errorf(f.val.tok, "%s: %v", f.key.text, err)
			}
			switch f.key.text {
			case "req":
				fp.reqID = uint32(n)
			case "flags":
				if n > math.MaxUint16 {
					return nil, p.s.errorf(f.val.tok, "flags: %d exceeds 16 bits", n)
				}
				fp.flags = wire.Flags(n)
			case "split":
				if n == 0 {
					return nil, p.s.errorf(f.val.tok, "split must be positive")
				}
				fp.split = int(n)
			}
		default:
			rec.fields = append(rec.fields, f)
		}
	}
	body, err := compile(rec, frameType(op), "", &p.s)
	if err != nil {
		return nil, err
	}
	fp.body = body
	return fp, nil
}

// A pattern is a typed value of the notation: a literal, a placeholder, a
// string with interpolations, a list or a struct.
type pattern struct {
	kind  kind
	typ   reflect.Type
	field string // spec name of the field holding it
	tok   token

	lit    reflect.Value // literal scalar
	ph     string        // placeholder name
	parts  []strPart     // string or bytes with ${} interpolation
	items  []*pattern    // list
	fields []*pattern    // struct, by Go field index; nil means zero
}

// strPart is a literal run of a string, or a placeholder in it.
type strPart struct {
	lit string
	ph  string
}

func compile(n *tnode, t reflect.Type, fieldName string, s *scanner) (*pattern, error) {
	k := kindOf(t)
	p := &pattern{kind: k, typ: t, field: fieldName, tok: n.tok}
	switch k {
	case kStruct:
		if !n.isRec {
			return nil, s.errorf(n.tok, "%s wants a {struct}", orFrame(fieldName))
		}
		fs := fieldsOf(t)
		p.fields = make([]*pattern, len(fs))
		for _, f := range n.fields {
			i := fieldIndex(fs, f.key.text)
			if i < 0 {
				return nil, s.errorf(f.key, "no field %q in %s (fields: %s)", f.key.text, typeName(t), fieldNames(fs))
			}
			if p.fields[i] != nil {
				return nil, s.errorf(f.key, "field %q given twice", f.key.text)
			}
			v, err := compile(f.val, fs[i].typ, fs[i].name, s)
			if err != nil {
				return nil, err
			}
			p.fields[i] = v
		}
		return p, nil
	case kList:
		if !n.isList {
			return nil, s.errorf(n.tok, "%s wants a [list]", fieldName)
		}
		for _, it := range n.list {
			v, err := compile(it, t.Elem(), fieldName, s)
			if err != nil {
				return nil, err
			}
			p.items = append(p.items, v)
		}
		return p, nil
	}
	if n.isList || n.isRec {
		return nil, s.errorf(n.tok, "%s wants a single value", fieldName)
	}
	text := n.tok.text
	if n.tok.kind == tWord && strings.HasPrefix(text, "$") {
		name := text[1:]
		if !validName(name) {
			return nil, s.errorf(n.tok, "bad placeholder %q", text)
		}
		if k == kBool {
			return nil, s.errorf(n.tok, "%s: a bool cannot be a placeholder", fieldName)
		}
		p.ph = name
		return p, nil
	}
	if k == kString || k == kBytes {
		if n.tok.kind != tStr {
			return nil, s.errorf(n.tok, "%s wants a quoted string, have %s", fieldName, text)
		}
		parts, err := interpolation(text)
		if err != nil {
			return nil, s.errorf(n.tok, "%s: %v", fieldName, err)
		}
		if len(parts) == 1 && parts[0].ph == "" || len(parts) == 0 {
			lit := ""
			if len(parts) == 1 {
				lit = parts[0].lit
			}
			if k == kBytes {
				p.lit = reflect.ValueOf([]byte(lit))
			} else {
				p.lit = reflect.ValueOf(lit)
			}
			return p, nil
		}
		p.parts = parts
		return p, nil
	}
	if n.tok.kind != tWord {
		return nil, s.errorf(n.tok, "%s wants a %s, have a string", fieldName, kindName(k))
	}
	v, err := parseScalar(k, t, text)
	if err != nil {
		return nil, s.errorf(n.tok, "%s: %v", fieldName, err)
	}
	p.lit = v
	return p, nil
}

func orFrame(name string) string {
	if name == "" {
		return "frame"
	}
	return name
}

func typeName(t reflect.Type) string {
	if t.Name() == "ErrorFrame" {
		return "Error"
	}
	return t.Name()
}

func fieldIndex(fs []field, name string) int {
	for i, f := range fs {
		if f.name == name {
			return i
		}
	}
	return -1
}

func fieldNames(fs []field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, " ")
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func kindName(k kind) string {
	switch k {
	case kU8, kU16, kU32, kU64:
		return "unsigned number"
	case kI64:
		return "number"
	case kF64:
		return "float"
	case kBool:
		return "true or false"
	case kUUID:
		return "UUID"
	case kCode:
		return "error code"
	case kPermission:
		return "permission kind"
	}
	return "value"
}

// interpolation splits an unquoted string into literal runs and ${name}
// placeholders; $$ is one $.
func interpolation(s string) ([]strPart, error) {
	var parts []strPart
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			lit.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			lit.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ${ in %q", s)
			}
			name := s[i+2 : i+end]
			if !validName(name) {
				return nil, fmt.Errorf("bad placeholder ${%s}", name)
			}
			if lit.Len() > 0 {
				parts = append(parts, strPart{lit: lit.String()})
				lit.Reset()
			}
			parts = append(parts, strPart{ph: name})
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 || len(parts) == 0 {
		parts = append(parts, strPart{lit: lit.String()})
	}
	return parts, nil
}

func parseScalar(k kind, t reflect.Type, text string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	switch k {
	case kU8, kU16, kU32, kU64:
		n, err := strconv.ParseUint(text, 0, t.Bits())
		if err != nil {
			return v, fmt.Errorf("bad %s %q", kindName(k), text)
		}
		v.SetUint(n)
	case kI64:
		n, err := strconv.ParseInt(text, 0, 64)
		if err != nil {
			return v, fmt.Errorf("bad number %q", text)
		}
		v.SetInt(n)
	case kF64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return v, fmt.Errorf("bad float %q", text)
		}
		v.SetFloat(f)
	case kBool:
		switch text {
		case "true":
			v.SetBool(true)
		case "false":
		default:
			return v, fmt.Errorf("want true or false, have %q", text)
		}
	case kCode:
		if c, ok := codeNamed(text); ok {
			v.SetUint(uint64(c))
			break
		}
		n, err := strconv.ParseUint(text, 0, 16)
		if err != nil {
			return v, fmt.Errorf("unknown error code %q", text)
		}
		v.SetUint(n)
	case kPermission:
		for pk := wire.PermissionKind(1); pk < 16; pk++ {
			if pk.String() == text {
				v.SetUint(uint64(pk))
				return v, nil
			}
		}
		n, err := strconv.ParseUint(text, 0, 8)
		if err != nil {
			return v, fmt.Errorf("unknown permission kind %q", text)
		}
		v.SetUint(n)
	case kUUID:
		id, err := parseUUID(text)
		if err != nil {
			return v, err
		}
		v.Set(reflect.ValueOf(id))
	default:
		return v, fmt.Errorf("no scalar notation for %s", t)
	}
	return v, nil
}

func parseUUID(text string) ([16]byte, error) {
	var id [16]byte
	h := strings.ReplaceAll(text, "-", "")
	if len(h) != 32 {
		return id, fmt.Errorf("bad UUID %q", text)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, fmt.Errorf("bad UUID %q", text)
	}
	return id, nil
}

func formatUUID(id [16]byte) string {
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
