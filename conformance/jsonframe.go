package conformance

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// The JSON form of frames, shared with the drivers of foreign cores (see
// docs/conformance.md, "The driver protocol"): an object of the frame's
// fields by their spec names; u64 and i64 as decimal strings (JSON numbers
// lose precision above 2^53), bytes as hex, UUIDs in their canonical
// 8-4-4-4-12 form, codes and enum values by their spec names, lists as
// arrays and structs as objects.

// FrameJSON returns f's fields in their JSON form.
func FrameJSON(f wire.Frame) map[string]any {
	v := reflect.ValueOf(f).Elem()
	return structJSON(v)
}

func structJSON(v reflect.Value) map[string]any {
	out := map[string]any{}
	for _, fd := range fieldsOf(v.Type()) {
		out[fd.name] = valueJSON(fd.kind, v.Field(fd.index))
	}
	return out
}

func valueJSON(k kind, v reflect.Value) any {
	switch k {
	case kU8, kU16, kU32:
		return v.Uint()
	case kU64:
		return strconv.FormatUint(v.Uint(), 10)
	case kI64:
		return strconv.FormatInt(v.Int(), 10)
	case kF64:
		return v.Float()
	case kBool:
		return v.Bool()
	case kString:
		return v.String()
	case kBytes:
		return hex.EncodeToString(v.Bytes())
	case kUUID:
		var id [16]byte
		reflect.Copy(reflect.ValueOf(&id).Elem(), v)
		return formatUUID(id)
	case kCode:
		return wire.Code(v.Uint()).String()
	case kPermission:
		return strings.ToUpper(wire.PermissionKind(v.Uint()).String())
	case kStruct:
		return structJSON(v)
	case kList:
		items := make([]any, v.Len())
		ek := kindOf(v.Type().Elem())
		for i := range items {
			items[i] = valueJSON(ek, v.Index(i))
		}
		return items
	}
	panic(fmt.Sprintf("conformance: no JSON form for kind %d", k))
}

// parseCode reads a code's name, or CODE_<n> for one the codec does not
// know.
func parseCode(name string) (wire.Code, error) {
	if c, ok := codeNamed(name); ok {
		return c, nil
	}
	if n, ok := strings.CutPrefix(name, "CODE_"); ok {
		v, err := strconv.ParseUint(n, 10, 16)
		if err == nil {
			return wire.Code(v), nil
		}
	}
	return 0, fmt.Errorf("unknown code %q", name)
}
