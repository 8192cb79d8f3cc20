package conformance

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// The codec's frame types are plain Go structs whose fields are in spec
// order, so one reflective walk serves the text notation, the field layout
// of encoded bytes and the comparison of frames. The spec's snake_case
// field names are recovered from the Go names (TestFieldNamesMatchSpec
// checks them against spec/protocol.toml).

// kind is the wire encoding of a Go field type.
type kind uint8

const (
	kU8 kind = iota + 1
	kU16
	kU32
	kU64
	kI64
	kF64
	kBool
	kString
	kBytes
	kUUID
	kCode
	kPermission
	kStruct
	kList
)

var (
	codeType       = reflect.TypeFor[wire.Code]()
	permissionType = reflect.TypeFor[wire.PermissionKind]()
)

func kindOf(t reflect.Type) kind {
	switch t {
	case codeType:
		return kCode
	case permissionType:
		return kPermission
	}
	switch t.Kind() {
	case reflect.Uint8:
		return kU8
	case reflect.Uint16:
		return kU16
	case reflect.Uint32:
		return kU32
	case reflect.Uint64:
		return kU64
	case reflect.Int64:
		return kI64
	case reflect.Float64:
		return kF64
	case reflect.Bool:
		return kBool
	case reflect.String:
		return kString
	case reflect.Array:
		if t.Len() == 16 && t.Elem().Kind() == reflect.Uint8 {
			return kUUID
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return kBytes
		}
		return kList
	case reflect.Struct:
		return kStruct
	}
	panic(fmt.Sprintf("conformance: no wire encoding for Go type %v", t))
}

// fixedSize returns the encoded size of a fixed-size kind, or 0.
func fixedSize(k kind) int {
	switch k {
	case kU8, kBool, kPermission:
		return 1
	case kU16, kCode:
		return 2
	case kU32:
		return 4
	case kU64, kI64, kF64:
		return 8
	case kUUID:
		return 16
	}
	return 0
}

// field is one field of a frame or nested struct.
type field struct {
	name  string // spec name, such as "lease_deadline_at_ms"
	index int    // Go field index
	typ   reflect.Type
	kind  kind
}

var fieldCache sync.Map // reflect.Type -> []field

// fieldsOf returns the fields of struct type t in wire order.
func fieldsOf(t reflect.Type) []field {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]field)
	}
	fs := make([]field, t.NumField())
	for i := range fs {
		sf := t.Field(i)
		fs[i] = field{name: snake(sf.Name), index: i, typ: sf.Type, kind: kindOf(sf.Type)}
	}
	fieldCache.Store(t, fs)
	return fs
}

// snake converts a Go field name to the spec's snake_case: APIKey is
// api_key, LeaseDeadlineAtMS is lease_deadline_at_ms, and a unit MS after
// an initialism is a word of its own (MessageTTLMS is message_ttl_ms).
func snake(s string) string {
	if p, ok := strings.CutSuffix(s, "MS"); ok && len(p) > 1 && unicode.IsUpper(rune(p[len(p)-1])) {
		return snake(p) + "_ms"
	}
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// frameType returns the Go type (not pointer) of op's frame, or nil.
func frameType(op wire.Opcode) reflect.Type {
	f := wire.New(op)
	if f == nil {
		return nil
	}
	return reflect.TypeOf(f).Elem()
}

var (
	opsOnce   sync.Once
	opsByName map[string]wire.Opcode
	allOps    []wire.Opcode
)

func loadOps() {
	opsByName = map[string]wire.Opcode{}
	for op := wire.Opcode(1); op < 0x1000; op++ {
		if wire.New(op) != nil {
			opsByName[op.String()] = op
			allOps = append(allOps, op)
		}
	}
}

// opcodeNamed returns the opcode whose frame is called name ("Enqueue").
func opcodeNamed(name string) (wire.Opcode, bool) {
	opsOnce.Do(loadOps)
	op, ok := opsByName[name]
	return op, ok
}

// Opcodes returns every opcode the codec knows, in numeric order.
func Opcodes() []wire.Opcode {
	opsOnce.Do(loadOps)
	return append([]wire.Opcode(nil), allOps...)
}

var (
	codesOnce   sync.Once
	codesByName map[string]wire.Code
	allCodes    []wire.Code
)

// Codes returns every error code the codec knows (OK included), in
// numeric order.
func Codes() []wire.Code {
	codesOnce.Do(loadCodes)
	return append([]wire.Code(nil), allCodes...)
}

func loadCodes() {
	codesByName = map[string]wire.Code{}
	for c := wire.Code(0); c < 1000; c++ {
		if name := c.String(); name != fmt.Sprintf("CODE_%d", int(c)) {
			codesByName[name] = c
			allCodes = append(allCodes, c)
		}
	}
}

func codeNamed(name string) (wire.Code, bool) {
	codesOnce.Do(loadCodes)
	c, ok := codesByName[name]
	return c, ok
}
