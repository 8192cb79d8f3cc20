// Package spec reads spec/protocol.toml into a validated model of the Fila
// wire protocol: primitives, the frame header and flags, error codes, enums,
// structs, frames and operations.
//
// Load refuses a spec the generators could turn into code that drifts from
// the contract, in the manner of nats-server's errors.json checks: a
// duplicate code name or value, a domain code that no operation lists, an
// operation that lists an undeclared or non-domain code, a duplicate opcode,
// a field of an unknown type, a request without its response.
package spec

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Spec is the whole protocol.
type Spec struct {
	Protocol   Protocol    `toml:"protocol"`
	Header     []Field     `toml:"header"`
	Flags      []Flag      `toml:"flags"`
	Primitives []Primitive `toml:"primitives"`
	Codes      []Code      `toml:"codes"`
	Enums      []Enum      `toml:"enums"`
	Structs    []Struct    `toml:"structs"`
	Frames     []Frame     `toml:"frames"`
	Operations []Operation `toml:"operations"`

	structs map[string]*Struct
	enums   map[string]*Enum
	frames  map[string]*Frame
	codes   map[string]*Code
}

// Protocol holds the protocol-wide constants.
type Protocol struct {
	Version             int `toml:"version"`
	MinVersion          int `toml:"min_version"`
	DefaultPort         int `toml:"default_port"`
	HeaderSize          int `toml:"header_size"`
	DefaultMaxFrameSize int `toml:"default_max_frame_size"`
	MinMaxFrameSize     int `toml:"min_max_frame_size"`
	MaxReassembledSize  int `toml:"max_reassembled_size"`
	// MaxBatchSize is the most items a batch request may carry; every
	// operation's items list declares it as its Max.
	MaxBatchSize int `toml:"max_batch_size"`
}

// Field is one field of the header, a struct or a frame.
type Field struct {
	Name string `toml:"name"`
	Type string `toml:"type"`
	Doc  string `toml:"doc"`
	// Max, on a list field, is the most items it may hold; 0 means only
	// the bytes of the frame bound it.
	Max int `toml:"max"`
	// Optional marks a field appended after its frame or struct was first
	// published: a body that ends before it, from an older peer, decodes
	// it as its zero value. Optional fields come last.
	Optional bool `toml:"optional"`
}

// Flag is one bit of the header's flags.
type Flag struct {
	Name string `toml:"name"`
	Bit  int    `toml:"bit"`
	Doc  string `toml:"doc"`
}

// Primitive documents one wire type.
type Primitive struct {
	Name string `toml:"name"`
	Size int    `toml:"size"`
	Doc  string `toml:"doc"`
}

// Scope says how a code is used.
type Scope string

// The scopes of error codes.
const (
	ScopeOK         Scope = "ok"
	ScopeConnection Scope = "connection"
	ScopeStatus     Scope = "status"
	ScopeDomain     Scope = "domain"
)

// Code is one error code.
type Code struct {
	Name  string `toml:"name"`
	Value int    `toml:"value"`
	Scope Scope  `toml:"scope"`
	// Text is the short lower-case text of the code's error values
	// ("queue not found"); empty for OK.
	Text string `toml:"text"`
	Doc  string `toml:"doc"`
}

// Enum is a named set of integer values.
type Enum struct {
	Name   string      `toml:"name"`
	Type   string      `toml:"type"`
	Doc    string      `toml:"doc"`
	Values []EnumValue `toml:"values"`
}

// EnumValue is one value of an enum.
type EnumValue struct {
	Name  string `toml:"name"`
	Value int    `toml:"value"`
	Doc   string `toml:"doc"`
}

// Struct is a record nested in frames.
type Struct struct {
	Name   string  `toml:"name"`
	Doc    string  `toml:"doc"`
	Fields []Field `toml:"fields"`
}

// Kind says which way a frame travels and whether it is answered.
type Kind string

// The kinds of frames.
const (
	KindRequest  Kind = "request"
	KindResponse Kind = "response"
	KindPush     Kind = "push"
	KindOneway   Kind = "oneway"
)

// Frame is one opcode and its body.
type Frame struct {
	Name    string  `toml:"name"`
	Opcode  int     `toml:"opcode"`
	Kind    Kind    `toml:"kind"`
	Section string  `toml:"section"`
	Doc     string  `toml:"doc"`
	Fields  []Field `toml:"fields"`
}

// Operation ties a request frame to its response and its domain codes.
type Operation struct {
	Name     string   `toml:"name"`
	Request  string   `toml:"request"`
	Response string   `toml:"response"`
	Items    string   `toml:"items"`
	Codes    []string `toml:"codes"`
}

// Load reads and validates the spec at path.
func Load(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return Parse(b)
}

// Parse decodes and validates a spec from TOML text. Every problem found is
// reported, joined into one error.
func Parse(text []byte) (*Spec, error) {
	var s Spec
	md, err := toml.Decode(string(text), &s)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("spec: unknown keys: %s", strings.Join(keys, ", "))
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Spec) validate() error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("spec: "+format, args...))
	}

	s.structs = map[string]*Struct{}
	s.enums = map[string]*Enum{}
	s.frames = map[string]*Frame{}
	s.codes = map[string]*Code{}

	if s.Protocol.Version < 1 || s.Protocol.MinVersion < 1 || s.Protocol.MinVersion > s.Protocol.Version {
		fail("protocol: version %d, min_version %d: want 1 <= min_version <= version", s.Protocol.Version, s.Protocol.MinVersion)
	}
	if s.Protocol.MaxBatchSize < 1 || s.Protocol.MaxBatchSize > 1<<31-1 {
		fail("protocol: max_batch_size %d: want 1 to 2^31-1", s.Protocol.MaxBatchSize)
	}
	if s.Protocol.HeaderSize != 12 {
		fail("protocol: header_size %d: the codec implements a 12-byte header", s.Protocol.HeaderSize)
	}

	// Codes: unique names and values, known scopes, exactly one OK = 0.
	byValue := map[int]string{}
	for i := range s.Codes {
		c := &s.Codes[i]
		if !isUpperSnake(c.Name) {
			fail("code %q: name must be UPPER_SNAKE_CASE", c.Name)
		}
		if _, dup := s.codes[c.Name]; dup {
			fail("code %q: declared twice", c.Name)
		}
		s.codes[c.Name] = c
		if other, dup := byValue[c.Value]; dup {
			fail("code %q: value %d already used by %q", c.Name, c.Value, other)
		}
		byValue[c.Value] = c.Name
		if c.Value < 0 || c.Value > 0xFFFF {
			fail("code %q: value %d does not fit u16", c.Name, c.Value)
		}
		switch c.Scope {
		case ScopeOK:
			if c.Value != 0 {
				fail("code %q: scope ok must have value 0", c.Name)
			}
		case ScopeConnection, ScopeStatus, ScopeDomain:
			if c.Value == 0 {
				fail("code %q: value 0 is reserved for OK", c.Name)
			}
		default:
			fail("code %q: unknown scope %q", c.Name, c.Scope)
		}
		if c.Scope != ScopeOK && (c.Text == "" || c.Text != strings.ToLower(c.Text) || strings.HasSuffix(c.Text, ".")) {
			fail("code %q: text %q: want a short lower-case text without a final period", c.Name, c.Text)
		}
		if c.Doc == "" {
			fail("code %q: missing doc", c.Name)
		}
	}
	if ok, found := s.codes["OK"]; !found || ok.Scope != ScopeOK {
		fail("code OK with scope ok is required")
	}

	for i := range s.Enums {
		e := &s.Enums[i]
		if _, dup := s.enums[e.Name]; dup {
			fail("enum %q: declared twice", e.Name)
		}
		s.enums[e.Name] = e
		if !startsNounPhrase(e.Doc) {
			fail("enum %q: doc must start with a noun phrase (A, An, The or One): %q", e.Name, e.Doc)
		}
		if e.Type != "u8" && e.Type != "u16" {
			fail("enum %q: type %q: want u8 or u16", e.Name, e.Type)
		}
		seen := map[int]bool{}
		for _, v := range e.Values {
			if seen[v.Value] || v.Value == 0 {
				fail("enum %q: value %s = %d is zero or duplicated", e.Name, v.Name, v.Value)
			}
			seen[v.Value] = true
		}
	}

	for i := range s.Structs {
		st := &s.Structs[i]
		if _, dup := s.structs[st.Name]; dup {
			fail("struct %q: declared twice", st.Name)
		}
		s.structs[st.Name] = st
		// Generated code reads "Name is " and the doc.
		if !startsNounPhrase(st.Doc) {
			fail("struct %q: doc must start with a noun phrase (A, An, The or One): %q", st.Name, st.Doc)
		}
	}

	// Frames, structs and enums are types in every generated language:
	// CamelCase names. (Each backend checks its own names for clashes.)
	typeName := func(kind, name string) {
		if !isCamel(name) {
			fail("%s %q: name must be CamelCase", kind, name)
		}
	}
	for _, e := range s.Enums {
		typeName("enum", e.Name)
	}
	for _, st := range s.Structs {
		typeName("struct", st.Name)
	}
	for _, f := range s.Frames {
		typeName("frame", f.Name)
	}

	opcodes := map[int]string{}
	for i := range s.Frames {
		f := &s.Frames[i]
		if _, dup := s.frames[f.Name]; dup {
			fail("frame %q: declared twice", f.Name)
		}
		s.frames[f.Name] = f
		if other, dup := opcodes[f.Opcode]; dup {
			fail("frame %q: opcode 0x%04x already used by %q", f.Name, f.Opcode, other)
		}
		opcodes[f.Opcode] = f.Name
		if f.Opcode <= 0 || f.Opcode > 0xFFFF {
			fail("frame %q: opcode 0x%x does not fit u16 or is zero", f.Name, f.Opcode)
		}
		switch f.Kind {
		case KindRequest, KindResponse, KindPush, KindOneway:
		default:
			fail("frame %q: unknown kind %q", f.Name, f.Kind)
		}
		if f.Doc == "" {
			fail("frame %q: missing doc", f.Name)
		}
	}

	checkFields := func(owner string, fields []Field) {
		names := map[string]bool{}
		optional := false
		for _, fd := range fields {
			if optional && !fd.Optional {
				fail("%s: field %q follows an optional field and must be optional too", owner, fd.Name)
			}
			optional = optional || fd.Optional
			if names[fd.Name] {
				fail("%s: field %q declared twice", owner, fd.Name)
			}
			names[fd.Name] = true
			if !isLowerSnake(fd.Name) {
				fail("%s: field %q must be lower_snake_case", owner, fd.Name)
			}
			if err := s.checkType(fd.Type); err != nil {
				fail("%s: field %q: %v", owner, fd.Name, err)
			}
			if fd.Doc == "" {
				fail("%s: field %q: missing doc", owner, fd.Name)
			}
			if fd.Max < 0 || fd.Max > 1<<31-1 {
				fail("%s: field %q: max %d: want 1 to 2^31-1", owner, fd.Name, fd.Max)
			}
			if fd.Max != 0 && !strings.HasPrefix(fd.Type, "[]") {
				fail("%s: field %q: max applies to lists only, not %s", owner, fd.Name, fd.Type)
			}
		}
	}
	for _, st := range s.Structs {
		checkFields("struct "+st.Name, st.Fields)
	}
	for _, f := range s.Frames {
		checkFields("frame "+f.Name, f.Fields)
	}
	checkFields("header", s.Header)

	// Operations: known frames, declared domain codes, every domain code used.
	used := map[string]bool{}
	opNames := map[string]bool{}
	requests := map[string]bool{}
	for _, op := range s.Operations {
		if opNames[op.Name] {
			fail("operation %q: declared twice", op.Name)
		}
		opNames[op.Name] = true
		req, ok := s.frames[op.Request]
		if !ok {
			fail("operation %q: request frame %q is not declared", op.Name, op.Request)
		} else {
			requests[op.Request] = true
			if req.Kind != KindRequest && req.Kind != KindOneway {
				fail("operation %q: request frame %q has kind %q", op.Name, op.Request, req.Kind)
			}
			if req.Kind == KindOneway && op.Response != "" {
				fail("operation %q: oneway frame %q cannot have a response", op.Name, op.Request)
			}
			if req.Kind == KindRequest && op.Response == "" {
				fail("operation %q: request frame %q needs a response", op.Name, op.Request)
			}
		}
		if op.Response != "" {
			if resp, ok := s.frames[op.Response]; !ok {
				fail("operation %q: response frame %q is not declared", op.Name, op.Response)
			} else if resp.Kind != KindResponse {
				fail("operation %q: response frame %q has kind %q", op.Name, op.Response, resp.Kind)
			}
		}
		if op.Items != "" && ok {
			found := false
			for _, fd := range req.Fields {
				if fd.Name == op.Items && strings.HasPrefix(fd.Type, "[]") {
					found = true
					if fd.Max != s.Protocol.MaxBatchSize {
						fail("operation %q: items %q: max %d; want protocol.max_batch_size (%d)", op.Name, op.Items, fd.Max, s.Protocol.MaxBatchSize)
					}
				}
			}
			if !found {
				fail("operation %q: items %q is not a list field of %q", op.Name, op.Items, op.Request)
			}
		}
		seen := map[string]bool{}
		for _, name := range op.Codes {
			c, ok := s.codes[name]
			switch {
			case !ok:
				fail("operation %q: lists undeclared code %q", op.Name, name)
			case c.Scope != ScopeDomain:
				fail("operation %q: lists %s code %q; only domain codes are listed (status codes apply to every operation)", op.Name, c.Scope, name)
			case seen[name]:
				fail("operation %q: lists code %q twice", op.Name, name)
			}
			seen[name] = true
			used[name] = true
		}
	}
	for _, c := range s.Codes {
		if c.Scope == ScopeDomain && !used[c.Name] {
			fail("code %q: no operation lists it", c.Name)
		}
	}
	for _, f := range s.Frames {
		if (f.Kind == KindRequest || f.Kind == KindOneway) && !requests[f.Name] {
			fail("frame %q: a %s frame that no operation uses", f.Name, f.Kind)
		}
	}
	return errors.Join(errs...)
}

var scalarTypes = map[string]bool{
	"u8": true, "u16": true, "u32": true, "u64": true, "i64": true, "f64": true,
	"bool": true, "string": true, "bytes": true, "uuid": true, "code": true,
}

func (s *Spec) checkType(t string) error {
	if elem, ok := strings.CutPrefix(t, "[]"); ok {
		if strings.HasPrefix(elem, "[]") {
			return fmt.Errorf("type %q: nested lists are not supported", t)
		}
		if elem == "bytes" {
			return fmt.Errorf("type %q: lists of bytes are not supported", t)
		}
		return s.checkType(elem)
	}
	if scalarTypes[t] || s.structs[t] != nil || s.enums[t] != nil {
		return nil
	}
	return fmt.Errorf("unknown type %q", t)
}

// Struct returns the struct named name, or nil.
func (s *Spec) Struct(name string) *Struct { return s.structs[name] }

// Enum returns the enum named name, or nil.
func (s *Spec) Enum(name string) *Enum { return s.enums[name] }

// Frame returns the frame named name, or nil.
func (s *Spec) Frame(name string) *Frame { return s.frames[name] }

// Code returns the code named name, or nil.
func (s *Spec) Code(name string) *Code { return s.codes[name] }

// CodesByScope returns the codes of the given scopes, by value.
func (s *Spec) CodesByScope(scopes ...Scope) []Code {
	var out []Code
	for _, c := range s.Codes {
		for _, sc := range scopes {
			if c.Scope == sc {
				out = append(out, c)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// OperationFor returns the operation whose request is the named frame.
func (s *Spec) OperationFor(request string) *Operation {
	for i := range s.Operations {
		if s.Operations[i].Request == request {
			return &s.Operations[i]
		}
	}
	return nil
}

// ResponseOf returns the operation answered by the named response frame.
func (s *Spec) ResponseOf(response string) *Operation {
	for i := range s.Operations {
		if s.Operations[i].Response == response {
			return &s.Operations[i]
		}
	}
	return nil
}

func isUpperSnake(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func isLowerSnake(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// isCamel reports whether s is a CamelCase name: no underscore, starting
// with a capital and holding a lower-case letter.
func isCamel(s string) bool {
	if s == "" || strings.Contains(s, "_") || !unicode.IsUpper(rune(s[0])) {
		return false
	}
	return strings.ContainsFunc(s, unicode.IsLower)
}

// startsNounPhrase reports whether doc starts with an article or "One",
// so that the generated "Name is " and doc reads as a sentence.
func startsNounPhrase(doc string) bool {
	for _, p := range []string{"A ", "An ", "The ", "One "} {
		if strings.HasPrefix(doc, p) {
			return true
		}
	}
	return false
}

// MinSize is the fewest bytes a value of type t takes on the wire: a
// list's count, a primitive's size (a string's or bytes' length prefix),
// an enum's underlying type, or a struct's length prefix and the fields
// an older peer's struct also holds (those before the first optional
// one). Decoders use it to refuse a list count that the bytes left could
// not hold. It panics on a type the spec does not define (Parse rejects
// those).
func (s *Spec) MinSize(t string) int {
	if strings.HasPrefix(t, "[]") {
		return 4
	}
	switch t {
	case "u8", "bool":
		return 1
	case "u16", "code", "string":
		return 2
	case "u32", "bytes":
		return 4
	case "u64", "i64", "f64":
		return 8
	case "uuid":
		return 16
	}
	if e := s.Enum(t); e != nil {
		return s.MinSize(e.Type)
	}
	if st := s.Struct(t); st != nil {
		n := 4
		for _, f := range st.Fields {
			if f.Optional {
				break // an older peer's struct ends before it
			}
			n += s.MinSize(f.Type)
		}
		return n
	}
	panic("unknown type " + t)
}
