package conformance

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

func TestSnake(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Queue", "queue"},
		{"APIKey", "api_key"},
		{"ID", "id"},
		{"KeyID", "key_id"},
		{"DelayMS", "delay_ms"},
		{"LeaseDeadlineAtMS", "lease_deadline_at_ms"},
		{"LeaderNodeID", "leader_node_id"},
		{"OnEnqueueCalls", "on_enqueue_calls"},
		{"TTLMS", "ttl_ms"},
		{"MessageTTLMS", "message_ttl_ms"},
	}
	for _, tc := range tests {
		if got := snake(tc.in); got != tc.want {
			t.Errorf("snake(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestFieldNamesMatchSpec checks the notation's field names and wire
// encodings, recovered from the codec's Go types, against
// spec/protocol.toml.
func TestFieldNamesMatchSpec(t *testing.T) {
	data, err := os.ReadFile("../spec/protocol.toml")
	if err != nil {
		t.Skipf("no spec to compare with: %v", err)
	}
	// By lower-case name: the Go name writes initialisms in capitals
	// (APIKeyInfo), the spec does not (ApiKeyInfo).
	structs := map[string]reflect.Type{}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for _, f := range fieldsOf(rt) {
			et := f.typ
			if f.kind == kList {
				et = et.Elem()
			}
			if kindOf(et) == kStruct {
				structs[strings.ToLower(et.Name())] = et
				walk(et)
			}
		}
	}
	for _, op := range Opcodes() {
		walk(frameType(op))
	}
	section := regexp.MustCompile(`(?m)^\[\[(structs|frames)\]\]\nname = "(\w+)"`)
	fieldRE := regexp.MustCompile(`\{ name = "(\w+)", type = "([^"]+)"`)
	checked := 0
	for _, m := range section.FindAllSubmatchIndex(data, -1) {
		kindOfSection, name := string(data[m[2]:m[3]]), string(data[m[4]:m[5]])
		rest := data[m[1]:]
		end := bytes.Index(rest, []byte("\n]"))
		if bytes.HasPrefix(bytes.TrimSpace(rest[bytes.Index(rest, []byte("fields = ")):]), []byte("fields = []")) {
			end = 0
		}
		var rt reflect.Type
		if kindOfSection == "frames" {
			op, ok := opcodeNamed(name)
			if !ok {
				t.Errorf("spec frame %s: no opcode of that name", name)
				continue
			}
			rt = frameType(op)
		} else if rt = structs[strings.ToLower(name)]; rt == nil {
			t.Errorf("spec struct %s: not used by any frame type", name)
			continue
		}
		var spec [][2]string
		for _, fm := range fieldRE.FindAllSubmatch(rest[:max(end, 0)], -1) {
			spec = append(spec, [2]string{string(fm[1]), string(fm[2])})
		}
		fs := fieldsOf(rt)
		if len(fs) != len(spec) {
			t.Errorf("%s: %d fields in Go, %d in the spec", name, len(fs), len(spec))
			continue
		}
		for i, f := range fs {
			if f.name != spec[i][0] {
				t.Errorf("%s field %d: snake(Go name) = %q; spec %q", name, i, f.name, spec[i][0])
			}
			if want := specKind(spec[i][1]); want != 0 && want != f.kind {
				t.Errorf("%s.%s: Go type %v; spec type %s", name, f.name, f.typ, spec[i][1])
			}
		}
		checked++
	}
	if checked < 50 {
		t.Errorf("checked %d frames and structs; the spec has more", checked)
	}
}

func specKind(typ string) kind {
	if strings.HasPrefix(typ, "[]") {
		return kList
	}
	switch typ {
	case "u8":
		return kU8
	case "u16":
		return kU16
	case "u32":
		return kU32
	case "u64":
		return kU64
	case "i64":
		return kI64
	case "f64":
		return kF64
	case "bool":
		return kBool
	case "string":
		return kString
	case "bytes":
		return kBytes
	case "uuid":
		return kUUID
	case "code":
		return kCode
	case "PermissionKind":
		return kPermission
	}
	return kStruct
}

// seed returns the seed of a randomized test: $SEED, or the clock.
func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SEED=%q: %v", v, err)
		}
		s = n
	}
	t.Logf("SEED=%d", s)
	return s
}

// randomValue fills v with random field values: strings with quotes,
// dollars and non-ASCII bytes, lists of up to three items.
func randomValue(r *rand.Rand, v reflect.Value) {
	switch kindOf(v.Type()) {
	case kU8, kU16, kU32, kU64, kCode, kPermission:
		v.SetUint(r.Uint64() >> (64 - v.Type().Bits()))
	case kI64:
		v.SetInt(int64(r.Uint64()))
	case kF64:
		v.SetFloat(r.NormFloat64() * 1000)
	case kBool:
		v.SetBool(r.IntN(2) == 1)
	case kString, kBytes:
		alphabet := []string{"a", "Z", "9", " ", `"`, `\`, "$", "${x}", "é", "\x00", "\n", "-"}
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		if v.Kind() == reflect.String {
			v.SetString(b.String())
		} else {
			v.SetBytes([]byte(b.String()))
		}
	case kUUID:
		var id [16]byte
		for i := range id {
			id[i] = byte(r.UintN(256))
		}
		v.Set(reflect.ValueOf(id))
	case kStruct:
		for i := 0; i < v.NumField(); i++ {
			randomValue(r, v.Field(i))
		}
	case kList:
		n := r.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			randomValue(r, s.Index(i))
		}
		v.Set(s)
	}
}

// TestNotationRoundTrip renders random frames of every opcode, parses the
// notation back and checks it encodes to the same bytes; and that the
// field layout of those bytes covers them exactly.
func TestNotationRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(seed(t), 1))
	for _, op := range Opcodes() {
		for range 20 {
			f := wire.New(op)
			randomValue(r, reflect.ValueOf(f).Elem())
			reqID := r.Uint32()
			want := wire.AppendFrame(nil, reqID, f)
			text := renderer{}.frame(reqID, 0, 0, f)
			fp, err := parseFrame(text, 1)
			if err != nil {
				t.Fatalf("parseFrame(%q) = %v", text, err)
			}
			got, err := fp.encode(newBindings())
			if err != nil {
				t.Fatalf("encode(%q) = %v", text, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("parseFrame(render(%v)) encodes differently:\n%s\n%s", op, text, strings.Join(byteDiff(want, got), "\n"))
			}
			spans, err := layout(op, want[wire.HeaderSize:])
			if err != nil {
				t.Fatalf("layout(%v) = %v", op, err)
			}
			end := 0
			for _, s := range spans {
				if s.start != end || s.end < s.start {
					t.Fatalf("layout(%v): span %s at %d-%d after %d", op, s.name(), s.start, s.end, end)
				}
				end = s.end
			}
			if end != len(want)-wire.HeaderSize {
				t.Fatalf("layout(%v) covers %d of %d bytes", op, end, len(want)-wire.HeaderSize)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"unknown directive", "frobnicate\n", "bad.txt:1: unknown directive"},
		{"unknown frame", "client\nEnqeue req=1\n", "bad.txt:2:1: unknown frame \"Enqeue\""},
		{"unknown field", "client\nPing req=1 nonse=5\n", "2:12: no field \"nonse\" in Ping (fields: nonce)"},
		{"bad number", "client\nPing req=1 nonce=five\n", "2:18: nonce: bad unsigned number \"five\""},
		{"unquoted string", "client\nGetConfig req=1 key=abc\n", "key wants a quoted string"},
		{"bad code", "server\nError req=1 code=OOPS\n", "unknown error code \"OOPS\""},
		{"bad hex", "client\nPing req=1\n----\nzz\n", "hex:"},
		{"bad placeholder", "client\nPing req=1 nonce=$1x\n", "bad placeholder"},
		{"unclosed list", "client\nEnqueue req=1 messages=[{queue=\"q\"}\n", "unclosed ["},
		{"bad tick", "tick soon\n", "tick: bad duration"},
		{"bad target", "targets browser\n", "unknown target"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad", []byte(tc.src))
			var pe *ParseError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) = %v; want a *ParseError containing %q", tc.src, err, tc.want)
			}
		})
	}
}

func TestInterpolation(t *testing.T) {
	b := newBindings()
	id := [16]byte{0x01, 0x93, 15: 0x07}
	b.bind("id1", reflect.ValueOf(id), "id")
	b.bind("lease1", reflect.ValueOf(uint64(42)), "lease")
	b.bind("key1", reflect.ValueOf("fd19c2a1023043c0"), "key_id")
	tests := []struct{ in, want string }{
		{"ack q " + formatUUID(id) + ": lease 42: lease expired", "ack q ${id1}: lease ${lease1}: lease expired"},
		{"at most 420 or 142", "at most 420 or 142"},
		{"costs $5", "costs $$5"},
		{`revoke key "fd19c2a1023043c0"`, `revoke key "${key1}"`},
	}
	for _, tc := range tests {
		if got := b.interpolate(tc.in); got != tc.want {
			t.Errorf("interpolate(%q) = %q; want %q", tc.in, got, tc.want)
		}
		parts, err := interpolation(b.interpolate(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := expand(parts, b); err != nil || got != tc.in {
			t.Errorf("expand(interpolate(%q)) = %q, %v; want it back", tc.in, got, err)
		}
	}
}
