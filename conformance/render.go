package conformance

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A namer chooses placeholders while a frame is rendered. The recorder
// implements it; nil renders every value literally.
type namer interface {
	// placeholder returns the placeholder name for the value v of field
	// name in struct parent, or false to write v literally.
	placeholder(name string, parent, v reflect.Value) (string, bool)
	// interpolate returns s with the text of bound placeholders replaced
	// by ${name} and every $ doubled, ready to quote.
	interpolate(s string) string
}

// renderer writes frames in the notation parseFrame reads.
type renderer struct {
	n namer
}

// maxLine is the length past which a frame's lists of structs go one item
// a line.
const maxLine = 100

func (r renderer) frame(reqID uint32, flags wire.Flags, split int, f wire.Frame) string {
	head := f.Opcode().String() + " req=" + strconv.FormatUint(uint64(reqID), 10)
	if flags != 0 {
		head += " flags=" + strconv.FormatUint(uint64(flags), 10)
	}
	if split != 0 {
		head += " split=" + strconv.Itoa(split)
	}
	v := reflect.ValueOf(f).Elem()
	// Render each value once (a namer binds placeholders as it goes),
	// then lay the frame out on one line or, when long, with lists of
	// structs one item a line.
	type part struct {
		name  string
		text  string   // the value, inline
		items []string // the items of a list of structs
	}
	var parts []part
	length := len(head)
	for _, fd := range fieldsOf(v.Type()) {
		fv := v.Field(fd.index)
		if isZero(fv) {
			continue
		}
		p := part{name: fd.name}
		if fd.kind == kList && kindOf(fd.typ.Elem()) == kStruct {
			for i := 0; i < fv.Len(); i++ {
				p.items = append(p.items, r.value(fd.name, v, fv.Index(i)))
			}
			p.text = "[" + strings.Join(p.items, " ") + "]"
		} else {
			p.text = r.value(fd.name, v, fv)
		}
		parts = append(parts, p)
		length += 2 + len(p.name) + len(p.text)
	}
	var b strings.Builder
	b.WriteString(head)
	for _, p := range parts {
		if length > maxLine && p.items != nil {
			b.WriteString(" " + p.name + "=[\n")
			for _, it := range p.items {
				b.WriteString("  " + it + "\n")
			}
			b.WriteString("]")
			continue
		}
		b.WriteString(" " + p.name + "=" + p.text)
	}
	return b.String()
}

// value renders v, the value of field name in struct parent.
func (r renderer) value(name string, parent, v reflect.Value) string {
	k := kindOf(v.Type())
	switch k {
	case kStruct:
		var b strings.Builder
		b.WriteByte('{')
		first := true
		for _, fd := range fieldsOf(v.Type()) {
			fv := v.Field(fd.index)
			if isZero(fv) {
				continue
			}
			if !first {
				b.WriteByte(' ')
			}
			first = false
			b.WriteString(fd.name + "=" + r.value(fd.name, v, fv))
		}
		b.WriteByte('}')
		return b.String()
	case kList:
		var b strings.Builder
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(r.value(name, parent, v.Index(i)))
		}
		b.WriteByte(']')
		return b.String()
	}
	if r.n != nil {
		if ph, ok := r.n.placeholder(name, parent, v); ok {
			return "$" + ph
		}
		if k == kString || k == kBytes {
			return strconv.Quote(r.n.interpolate(textOf(v)))
		}
	}
	return renderPlain(v)
}

// renderPlain renders a value literally, in the notation.
func renderPlain(v reflect.Value) string {
	switch kindOf(v.Type()) {
	case kStruct, kList:
		return renderer{}.value("", reflect.Value{}, v)
	case kBool:
		return strconv.FormatBool(v.Bool())
	case kCode:
		c := wire.Code(v.Uint())
		if _, ok := codeNamed(c.String()); ok {
			return c.String()
		}
		return strconv.FormatUint(v.Uint(), 10)
	case kPermission:
		pk := wire.PermissionKind(v.Uint())
		if pk >= wire.PermissionKindProduce && pk <= wire.PermissionKindAdmin {
			return pk.String()
		}
		return strconv.FormatUint(v.Uint(), 10)
	case kString, kBytes:
		return quote(textOf(v))
	}
	return textOf(v)
}

// quote quotes s for the notation: Go syntax, with $ doubled.
func quote(s string) string {
	return strconv.Quote(strings.ReplaceAll(s, "$", "$$"))
}

// renderFrame renders a received frame literally.
func renderFrame(h wire.Header, f wire.Frame) string {
	return renderer{}.frame(h.RequestID, h.Flags, 0, f)
}
