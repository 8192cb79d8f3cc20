package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// FileName is the configuration file Load looks for in the working
// directory.
const FileName = "fila.toml"

// DefaultSystemPath is the configuration file Load tries when the working
// directory has none.
const DefaultSystemPath = "/etc/fila/fila.toml"

// envPrefix starts every environment variable Load reads.
const envPrefix = "FILA_"

// LoadOptions says where Load looks. The zero value searches the process's
// working directory, then DefaultSystemPath, and reads the process's
// environment.
type LoadOptions struct {
	// Path is the file named with --config. When set, only it is read, and
	// a missing file is an error.
	Path string
	// Dir is the directory searched for FileName first; empty means the
	// process's working directory.
	Dir string
	// SystemPath is the file tried when Dir has no FileName; empty means
	// DefaultSystemPath.
	SystemPath string
	// Env is the environment, as "NAME=value" strings in the form of
	// os.Environ; nil means os.Environ(). An empty, non-nil slice is an
	// empty environment.
	Env []string
	// Hostname supplies the default server.node_id; nil means os.Hostname.
	Hostname func() (string, error)
	// Flags are the values given on the command line, which override the
	// environment, the file and the defaults. Later ones override earlier
	// ones for the same key.
	Flags []FlagValue
}

// A FlagValue is the value of one key given by a command-line flag.
type FlagValue struct {
	// Key is the key the flag sets, "section.name", such as
	// "server.listen_addr".
	Key string
	// Value is the value as written, in the form an environment variable
	// takes: "127.0.0.1:5555", "30s", "true".
	Value string
	// Flag is the flag as Sources names it, such as "--listen".
	Flag string
}

// An Origin is the layer a value came from.
type Origin uint8

// The layers, from lowest to highest precedence.
const (
	FromDefault Origin = iota // built in
	FromFile                  // fila.toml
	FromEnv                   // a FILA_<SECTION>_<KEY> variable
	FromFlag                  // a command-line flag
)

// A Source says where one value came from.
type Source struct {
	Origin Origin
	// Name is the file's path for FromFile, the variable's name for
	// FromEnv and the flag, such as "--listen", for FromFlag. For FromDefault it is empty, or says what the default was
	// derived from: "hostname" for a node ID or an advertised address
	// taken from the host name, "server.listen_addr" for an advertised
	// address that is the client listener's, "a quarter of
	// server.memory_limit" for the reassembly budget.
	Name string
}

// String returns "default", "default (hostname)", "file <path>",
// "env <NAME>" or "flag <--name>".
func (s Source) String() string {
	switch s.Origin {
	case FromFile:
		return "file " + s.Name
	case FromEnv:
		return "env " + s.Name
	case FromFlag:
		return "flag " + s.Name
	}
	if s.Name != "" {
		return "default (" + s.Name + ")"
	}
	return "default"
}

// Sources records where each value of a loaded Config came from.
type Sources struct {
	file string
	keys map[string]Source
}

// File returns the path of the configuration file that was read, or "" if
// none was.
func (s *Sources) File() string { return s.file }

// Of returns the source of the value of key, named "section.name" as in
// "queue.visibility_timeout". Keys never set are FromDefault.
func (s *Sources) Of(key string) Source { return s.keys[key] }

// A KeyError reports a key Load does not know or a value it does not
// accept. Load joins one KeyError per problem with errors.Join.
type KeyError struct {
	// Key is "section.name", or the section's name for an unknown section.
	Key string
	// Value is the value as written, or "<redacted>" for a secret; empty
	// when there is no single value to show.
	Value string
	// Source is where the key or value came from.
	Source Source
	// Want describes what is accepted instead.
	Want string
	// Unknown is true if Key itself is not a configuration key.
	Unknown bool
}

// Error returns "config: [unknown key ]<key>[ = <value>] (<source>): want
// <form>".
func (e *KeyError) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.Unknown {
		b.WriteString("unknown key ")
	}
	b.WriteString(e.Key)
	if e.Value != "" {
		b.WriteString(" = ")
		b.WriteString(e.Value)
	}
	b.WriteString(" (")
	b.WriteString(e.Source.String())
	b.WriteString("): want ")
	b.WriteString(e.Want)
	return b.String()
}

// Load returns the effective configuration: the defaults, overridden by the
// configuration file, overridden by the environment, overridden by the
// command-line flags (opts.Flags), and where each value came from.
//
// The file is opts.Path when set; otherwise the first of FileName in
// opts.Dir and opts.SystemPath that exists; with none, only defaults and
// the environment apply. Each key `name` of section `[section]` is also set
// by the variable FILA_<SECTION>_<NAME> (FILA_QUEUE_VISIBILITY_TIMEOUT);
// other FILA_ variables, such as the CLI's FILA_ADDR, are ignored unless
// their first word names a section.
//
// Load fails with one joined error listing every problem: a *KeyError for
// each unknown section, key, variable or flag key and each value of the wrong form or
// out of range (each names the key, the value as written and the accepted
// form; secrets are shown as "<redacted>"), or an error for a file that
// cannot be read or parsed.
func Load(opts LoadOptions) (Config, *Sources, error) {
	path, data, err := readFile(opts)
	if err != nil {
		return Config{}, nil, err
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	hostname := opts.Hostname
	if hostname == nil {
		hostname = os.Hostname
	}
	return load(path, data, env, opts.Flags, hostname)
}

// load is Load after the file, if any, was read: path is "" for none.
func load(path string, data []byte, env []string, flags []FlagValue, hostname func() (string, error)) (Config, *Sources, error) {
	l := &loader{
		c:       Default(),
		src:     &Sources{file: path, keys: make(map[string]Source, len(fields))},
		written: make(map[string]string),
		failed:  make(map[string]bool),
	}
	if path != "" {
		if err := l.applyFile(path, data); err != nil {
			return Config{}, nil, err
		}
	}
	l.applyEnv(env)
	l.applyFlags(flags)

	var hostOnce struct {
		name string
		err  error
		done bool
	}
	host := func() (string, error) {
		if !hostOnce.done {
			hostOnce.name, hostOnce.err = hostname()
			hostOnce.done = true
		}
		return hostOnce.name, hostOnce.err
	}

	if l.c.Server.NodeID == "" {
		l.src.keys["server.node_id"] = Source{Origin: FromDefault, Name: "hostname"}
		delete(l.written, "server.node_id")
		name, err := host()
		if err != nil {
			l.errs = append(l.errs, &KeyError{Key: "server.node_id", Source: l.src.keys["server.node_id"],
				Want: "a node ID; the host name is unavailable (" + err.Error() + ")"})
			l.failed["server.node_id"] = true
		}
		l.c.Server.NodeID = name
	}

	// In cluster mode, clients are sent to this node by advertise_addr: by
	// default the client listener's address, or the host name with its
	// port when it listens on every address. Single-node mode needs none.
	if l.c.Cluster.Enabled() && l.c.Cluster.AdvertiseAddr == "" {
		const key = "cluster.advertise_addr"
		delete(l.written, key)
		listenHost, listenPort, err := net.SplitHostPort(l.c.Server.ListenAddr)
		switch {
		case err != nil:
			l.failed[key] = true // server.listen_addr's error says it all
		case !isUnspecified(listenHost):
			l.src.keys[key] = Source{Origin: FromDefault, Name: "server.listen_addr"}
			l.c.Cluster.AdvertiseAddr = l.c.Server.ListenAddr
		default:
			l.src.keys[key] = Source{Origin: FromDefault, Name: "hostname"}
			name, err := host()
			if err != nil {
				l.errs = append(l.errs, &KeyError{Key: key, Source: l.src.keys[key],
					Want: "host:port that clients can reach; the host name is unavailable (" + err.Error() + ")"})
				l.failed[key] = true
				break
			}
			l.c.Cluster.AdvertiseAddr = net.JoinHostPort(name, listenPort)
		}
	}

	// The reassembly budget's default follows a memory limit: a quarter of
	// it, so that requests still arriving cannot hold most of the memory
	// the garbage collector is keeping the broker under.
	if limit := l.c.Server.MemoryLimit; limit > 0 && l.src.keys["server.reassembly_budget"].Origin == FromDefault &&
		l.c.Server.ReassemblyBudget > limit/4 {
		l.c.Server.ReassemblyBudget = max(limit/4, 1<<20)
		l.src.keys["server.reassembly_budget"] = Source{Origin: FromDefault, Name: "a quarter of server.memory_limit"}
	}

	for i := range fields {
		f := &fields[i]
		if f.check == nil || l.failed[f.key()] {
			continue
		}
		if want := f.check(&l.c); want != "" {
			value, ok := l.written[f.key()]
			if !ok {
				value = f.format(&l.c)
			}
			l.errs = append(l.errs, &KeyError{Key: f.key(), Value: value, Source: l.src.keys[f.key()], Want: want})
		}
	}
	if len(l.errs) > 0 {
		return Config{}, nil, errors.Join(l.errs...)
	}
	return l.c, l.src, nil
}

// A loader holds the state of one Load.
type loader struct {
	c       Config
	src     *Sources
	written map[string]string // key → its value as written, for errors
	failed  map[string]bool   // keys whose value did not parse
	errs    []error
}

// set stores v for f, from source from, written as text.
func (l *loader) set(f *field, v any, from Source, text string) {
	f.set(&l.c, v)
	l.src.keys[f.key()] = from
	l.written[f.key()] = text
	delete(l.failed, f.key()) // a later layer replaces a bad value
}

// readFile finds and reads the configuration file, returning an empty path
// if there is none.
func readFile(opts LoadOptions) (path string, data []byte, err error) {
	if opts.Path != "" {
		data, err := os.ReadFile(opts.Path)
		if err != nil {
			return "", nil, fmt.Errorf("config: read --config file: %w", err)
		}
		return opts.Path, data, nil
	}
	system := opts.SystemPath
	if system == "" {
		system = DefaultSystemPath
	}
	for _, p := range []string{filepath.Join(opts.Dir, FileName), system} {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("config: read config file: %w", err)
		}
		return p, data, nil
	}
	return "", nil, nil
}

// applyFile parses data, the file at path, into l.c. It records a
// *KeyError for each unknown key and bad value, in the order of the file,
// and returns an error if data is not TOML.
func (l *loader) applyFile(path string, data []byte) error {
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		// Not wrapped: a toml.ParseError quotes its input, which may hold
		// a secret; tomlErrorText redacts it.
		return fmt.Errorf("config: parse %s: %s", path, tomlErrorText(err, data))
	}
	from := Source{Origin: FromFile, Name: path}
	badSection := make(map[string]bool)
	for _, key := range md.Keys() {
		switch len(key) {
		case 1:
			name := key[0]
			v := raw[name]
			if !knownSection(name) {
				badSection[name] = true
				l.errs = append(l.errs, &KeyError{Key: name, Value: render(v, mayBeSecret(name)), Source: from, Unknown: true,
					Want: "a section: [" + strings.Join(sections, "], [") + "]" + suggest(name, sections, "[", "]")})
				continue
			}
			if _, ok := v.(map[string]any); !ok {
				badSection[name] = true
				l.errs = append(l.errs, &KeyError{Key: name, Value: render(v, mayBeSecret(name)), Source: from,
					Want: "a table: [" + name + "]"})
			}
		case 2:
			section, name := key[0], key[1]
			if badSection[section] {
				continue
			}
			table, _ := raw[section].(map[string]any)
			f := lookupField(section, name)
			if f == nil {
				l.errs = append(l.errs, unknownKeyError(section, name, render(table[name], mayBeSecret(name)), from, false))
				continue
			}
			text := render(table[name], f.kind == kindSecret)
			v, want := parseValue(f.kind, table[name])
			if want != "" {
				l.failed[f.key()] = true
				l.errs = append(l.errs, &KeyError{Key: f.key(), Value: text, Source: from, Want: want})
				continue
			}
			l.set(f, v, from, text)
		}
		// Longer keys lie inside a value already reported as not a
		// scalar, or inside an unknown key.
	}
	return nil
}

// applyEnv applies the FILA_<SECTION>_<KEY> variables of env to l.c, in
// name order. A later duplicate of a name wins, as with os.Getenv.
func (l *loader) applyEnv(env []string) {
	vars := make(map[string]string)
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, envPrefix) {
			vars[name] = value
		}
	}
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.Sort(names)

	for _, name := range names {
		upperSection, upperKey, ok := strings.Cut(name[len(envPrefix):], "_")
		section := strings.ToLower(upperSection)
		if !ok || upperSection != strings.ToUpper(section) || !knownSection(section) {
			continue // not ours: FILA_ADDR, FILA_API_KEY
		}
		key := strings.ToLower(upperKey)
		from := Source{Origin: FromEnv, Name: name}
		f := lookupField(section, key)
		if f == nil || upperKey != strings.ToUpper(key) {
			value := strconv.Quote(vars[name])
			if mayBeSecret(key) {
				value = quote(redacted)
			}
			l.errs = append(l.errs, unknownKeyError(section, key, value, from, true))
			continue
		}
		text := strconv.Quote(vars[name])
		if f.kind == kindSecret {
			text = quote(redacted)
		}
		v, want := parseString(f.kind, vars[name])
		if want != "" {
			l.failed[f.key()] = true
			l.errs = append(l.errs, &KeyError{Key: f.key(), Value: text, Source: from, Want: want})
			continue
		}
		l.set(f, v, from, text)
	}
}

// applyFlags applies the command-line values of flags to l.c, in order.
func (l *loader) applyFlags(flags []FlagValue) {
	for _, fv := range flags {
		from := Source{Origin: FromFlag, Name: fv.Flag}
		section, name, _ := strings.Cut(fv.Key, ".")
		f := lookupField(section, name)
		text := strconv.Quote(fv.Value)
		if f == nil {
			if mayBeSecret(name) {
				text = quote(redacted)
			}
			l.errs = append(l.errs, &KeyError{Key: fv.Key, Value: text, Source: from, Unknown: true,
				Want: "a configuration key, section.name"})
			continue
		}
		if f.kind == kindSecret {
			text = quote(redacted)
		}
		v, want := parseString(f.kind, fv.Value)
		if want != "" {
			l.failed[f.key()] = true
			l.errs = append(l.errs, &KeyError{Key: f.key(), Value: text, Source: from, Want: want})
			continue
		}
		l.set(f, v, from, text)
	}
}

// mayBeSecret reports whether an unknown key's name suggests that its value
// is a credential (a misspelled bootstrap_apikey), so that its value is not
// shown.
func mayBeSecret(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"key", "secret", "token", "pass", "cred", "auth"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func unknownKeyError(section, name, value string, from Source, env bool) *KeyError {
	var known []string
	for i := range fields {
		if fields[i].section == section {
			known = append(known, fields[i].name)
		}
	}
	want := "a key of [" + section + "]: " + strings.Join(known, ", ")
	if s := nearest(name, known); s != "" {
		want = "a key of [" + section + "]; did you mean " + s
		if env {
			want += " (" + lookupField(section, s).env() + ")"
		}
		want += "?"
	}
	return &KeyError{Key: section + "." + name, Value: value, Source: from, Want: want, Unknown: true}
}

func suggest(name string, candidates []string, before, after string) string {
	if s := nearest(name, candidates); s != "" {
		return "; did you mean " + before + s + after + "?"
	}
	return ""
}

// nearest returns the candidate closest to name in edit distance, if it is
// at most 2 edits away, or "".
func nearest(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// render writes a decoded TOML value for an error message, cut to a
// readable length.
func render(v any, secret bool) string {
	if secret {
		return quote(redacted)
	}
	var s string
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		s = quote(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		s = strconv.FormatBool(v)
	case time.Time:
		s = v.Format(time.RFC3339Nano)
	case map[string]any:
		s = "a table"
	case []map[string]any:
		s = "an array of tables"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = render(e, false)
		}
		s = "[" + strings.Join(parts, ", ") + "]"
	default:
		s = fmt.Sprint(v)
	}
	const maxLen = 80
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

// tomlErrorText returns the text of a TOML parse error. Its detail may
// quote the input, so it is replaced when it could show a secret: when the
// error is on or just after a line that sets a secret, or quotes such a
// line's value.
func tomlErrorText(err error, data []byte) string {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return "syntax error"
	}
	line := pe.Position.Line
	for i, text := range strings.Split(string(data), "\n") {
		for j := range fields {
			f := &fields[j]
			name, value, ok := strings.Cut(text, "=")
			if f.kind != kindSecret || !ok || !strings.Contains(name, f.name) {
				continue
			}
			value = strings.Trim(value, " \t\r\"'")
			if line == i+1 || line == i+2 || (value != "" && strings.Contains(pe.Message, value)) {
				return fmt.Sprintf("line %d: syntax error near %s (detail not shown: it may quote a secret)", line, f.key())
			}
		}
	}
	return fmt.Sprintf("line %d: %s", line, pe.Message)
}
