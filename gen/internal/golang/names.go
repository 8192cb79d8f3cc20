package golang

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/fila-mq/fila/gen/internal/spec"
)

// initialisms are the words written in capitals in Go names, as Go style
// asks (ApiKeyInfo is APIKeyInfo, key_id is KeyID), keyed by their lower
// case.
var initialisms = map[string]string{
	"acl": "ACL", "api": "API", "dlq": "DLQ", "http": "HTTP", "id": "ID",
	"json": "JSON", "ms": "MS", "ok": "OK", "tls": "TLS", "ttl": "TTL",
	"url": "URL", "uuid": "UUID",
}

// GoName turns a spec name into a Go name with initialisms in capitals.
// A lower_snake or UPPER_SNAKE name (a field, a code, an enum value) is
// joined in CamelCase: lease_deadline_at_ms is LeaseDeadlineAtMS,
// API_KEY_NOT_FOUND is APIKeyNotFound, OK is OK. A CamelCase name (a
// frame, a struct, an enum, an operation) keeps its words: CreateApiKey is
// CreateAPIKey, SetAcl is SetACL. The word Ok of a CamelCase name, which
// names a reply (HandshakeOk), is a word rather than an initialism there
// and stays as it is.
func GoName(s string) string {
	if isCamel(s) {
		var b strings.Builder
		for _, w := range camelWords(s) {
			if ini, ok := initialisms[strings.ToLower(w)]; ok && w != "Ok" {
				w = ini
			}
			b.WriteString(w)
		}
		return b.String()
	}
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		lower := strings.ToLower(part)
		if ini, ok := initialisms[lower]; ok {
			b.WriteString(ini)
			continue
		}
		b.WriteString(strings.ToUpper(lower[:1]) + lower[1:])
	}
	return b.String()
}

// camelWords splits a CamelCase name into its words: a word starts at a
// capital that follows a lower-case letter or a digit, or at the last
// capital of a run followed by a lower-case letter ("DLQStats" is DLQ,
// Stats).
func camelWords(s string) []string {
	rs := []rune(s)
	var words []string
	start := 0
	for i := 1; i < len(rs); i++ {
		if !unicode.IsUpper(rs[i]) {
			continue
		}
		prev := rs[i-1]
		if unicode.IsLower(prev) || unicode.IsDigit(prev) ||
			(unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			words = append(words, string(rs[start:i]))
			start = i
		}
	}
	return append(words, string(rs[start:]))
}

// isCamel reports whether s is a CamelCase name: no underscore, starting
// with a capital and holding a lower-case letter.
func isCamel(s string) bool {
	if s == "" || strings.Contains(s, "_") || !unicode.IsUpper(rune(s[0])) {
		return false
	}
	return strings.ContainsFunc(s, unicode.IsLower)
}

// CheckNames refuses a spec whose frames, structs and enums, types of one Go
// package, would share a Go name (ApiKeyInfo and APIKeyInfo are both
// APIKeyInfo).
func CheckNames(s *spec.Spec) error {
	var errs []error
	goTypes := map[string]string{}
	check := func(kind, name string) {
		if other, dup := goTypes[GoName(name)]; dup && other != name {
			errs = append(errs, fmt.Errorf("gen: %s %q: Go name %s already used by %q", kind, name, GoName(name), other))
		}
		goTypes[GoName(name)] = name
	}
	for _, e := range s.Enums {
		check("enum", e.Name)
	}
	for _, st := range s.Structs {
		check("struct", st.Name)
	}
	for _, f := range s.Frames {
		check("frame", f.Name)
	}
	return errors.Join(errs...)
}
