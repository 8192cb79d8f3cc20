package config

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// The key table below is the one place that knows every key: its section,
// its name, the form of its value, where it lives in Config and which values
// are valid. Load, Print, the environment names and the tests all walk it.

// A kind is the form of a key's value.
type kind uint8

const (
	kindString   kind = iota // a TOML string
	kindSecret               // a TOML string never shown
	kindInt                  // a TOML integer
	kindBool                 // true or false
	kindDuration             // a string such as "30s"
	kindSize                 // a string such as "8MB"
	kindLevel                // "debug", "info", "warn" or "error"
)

// form describes the values of k in error messages.
func (k kind) form() string {
	switch k {
	case kindString, kindSecret:
		return "a string"
	case kindInt:
		return "an integer"
	case kindBool:
		return "true or false"
	case kindDuration:
		return durationForm
	case kindSize:
		return sizeForm
	case kindLevel:
		return `one of "debug", "info", "warn", "error"`
	}
	panic("config: unknown kind")
}

// A field is one configuration key.
type field struct {
	section string // "queue"
	name    string // "visibility_timeout"
	kind    kind
	// ptr returns a pointer to the field's value in c: *string, *Secret,
	// *int, *int64, *bool, *time.Duration or *slog.Level.
	ptr func(c *Config) any
	// check returns "" if the field's value in c is valid, or else the form
	// a valid value takes. It may read other fields of c.
	check func(c *Config) string
}

// key returns the field's dotted name, such as "queue.visibility_timeout".
func (f *field) key() string { return f.section + "." + f.name }

// env returns the environment variable that sets the field, such as
// FILA_QUEUE_VISIBILITY_TIMEOUT.
func (f *field) env() string {
	return "FILA_" + strings.ToUpper(f.section) + "_" + strings.ToUpper(f.name)
}

// sections lists the sections in the order Print writes them.
var sections = []string{"server", "storage", "scheduler", "queue", "lua", "auth", "tls", "telemetry", "log"}

// Limits of values, shared by the checks and the documentation.
const (
	maxReassembled = 256 * Megabyte // spec: protocol.max_reassembled_size
	minFrame       = 4 * Kilobyte   // spec: protocol.min_max_frame_size
	maxBatch       = 65536          // spec: protocol.max_batch_size
	maxQuantum     = 1 << 30
	maxCount       = 1000000
	minSecretLen   = 16
	maxNodeIDLen   = 255
)

var fields = []field{
	{"server", "listen_addr", kindString,
		func(c *Config) any { return &c.Server.ListenAddr }, checkHostPort(func(c *Config) string { return c.Server.ListenAddr })},
	{"server", "node_id", kindString,
		func(c *Config) any { return &c.Server.NodeID }, checkNodeID},
	{"server", "max_message_size", kindSize,
		func(c *Config) any { return &c.Server.MaxMessageSize },
		sizeIn(1, maxReassembled, func(c *Config) int64 { return c.Server.MaxMessageSize })},
	{"server", "max_frame_size", kindSize,
		func(c *Config) any { return &c.Server.MaxFrameSize },
		sizeIn(minFrame, maxReassembled, func(c *Config) int64 { return c.Server.MaxFrameSize })},
	{"server", "max_connections", kindInt,
		func(c *Config) any { return &c.Server.MaxConnections },
		intIn(0, 1<<31-1, func(c *Config) int64 { return int64(c.Server.MaxConnections) })},
	{"server", "max_handshaking", kindInt,
		func(c *Config) any { return &c.Server.MaxHandshaking },
		intIn(1, maxCount, func(c *Config) int64 { return int64(c.Server.MaxHandshaking) })},
	{"server", "max_connections_per_address", kindInt,
		func(c *Config) any { return &c.Server.MaxConnectionsPerAddress },
		intIn(0, 1<<31-1, func(c *Config) int64 { return int64(c.Server.MaxConnectionsPerAddress) })},
	{"server", "handshake_failure_rate", kindInt,
		func(c *Config) any { return &c.Server.HandshakeFailureRate },
		intIn(0, maxCount, func(c *Config) int64 { return int64(c.Server.HandshakeFailureRate) })},
	{"server", "handshake_failure_burst", kindInt,
		func(c *Config) any { return &c.Server.HandshakeFailureBurst },
		intIn(1, maxCount, func(c *Config) int64 { return int64(c.Server.HandshakeFailureBurst) })},
	{"server", "handshake_timeout", kindDuration,
		func(c *Config) any { return &c.Server.HandshakeTimeout },
		durationAtLeast(time.Millisecond, func(c *Config) time.Duration { return c.Server.HandshakeTimeout })},
	{"server", "max_unsettled", kindInt,
		func(c *Config) any { return &c.Server.MaxUnsettled },
		intIn(1, 1<<32-1, func(c *Config) int64 { return int64(c.Server.MaxUnsettled) })},
	{"server", "reassembly_budget", kindSize,
		func(c *Config) any { return &c.Server.ReassemblyBudget },
		sizeIn(Megabyte, 1<<40, func(c *Config) int64 { return c.Server.ReassemblyBudget })},
	{"server", "max_outbound_size", kindSize,
		func(c *Config) any { return &c.Server.MaxOutboundSize },
		sizeIn(64*Kilobyte, Gigabyte, func(c *Config) int64 { return c.Server.MaxOutboundSize })},
	{"server", "max_enqueue_in_flight", kindSize,
		func(c *Config) any { return &c.Server.MaxEnqueueInFlight },
		sizeIn(64*Kilobyte, Gigabyte, func(c *Config) int64 { return c.Server.MaxEnqueueInFlight })},
	{"server", "bulk_enqueue_in_flight", kindSize,
		func(c *Config) any { return &c.Server.BulkEnqueueInFlight },
		sizeIn(4*Kilobyte, Gigabyte, func(c *Config) int64 { return c.Server.BulkEnqueueInFlight })},
	{"server", "write_timeout", kindDuration,
		func(c *Config) any { return &c.Server.WriteTimeout },
		durationAtLeast(time.Millisecond, func(c *Config) time.Duration { return c.Server.WriteTimeout })},
	{"server", "frame_read_timeout", kindDuration,
		func(c *Config) any { return &c.Server.FrameReadTimeout },
		durationAtLeast(time.Millisecond, func(c *Config) time.Duration { return c.Server.FrameReadTimeout })},
	{"server", "max_batch_size", kindInt,
		func(c *Config) any { return &c.Server.MaxBatchSize },
		intIn(1, maxBatch, func(c *Config) int64 { return int64(c.Server.MaxBatchSize) })},
	{"server", "memory_limit", kindSize,
		func(c *Config) any { return &c.Server.MemoryLimit },
		sizeIn(0, 1<<40, func(c *Config) int64 { return c.Server.MemoryLimit })},
	{"server", "shutdown_timeout", kindDuration,
		func(c *Config) any { return &c.Server.ShutdownTimeout },
		durationAtLeast(0, func(c *Config) time.Duration { return c.Server.ShutdownTimeout })},

	{"storage", "data_dir", kindString,
		func(c *Config) any { return &c.Storage.DataDir }, nonEmpty(func(c *Config) string { return c.Storage.DataDir })},
	{"storage", "segment_size", kindSize,
		func(c *Config) any { return &c.Storage.SegmentSize },
		sizeIn(Megabyte, 4*Gigabyte, func(c *Config) int64 { return c.Storage.SegmentSize })},
	{"storage", "cache_size", kindSize,
		func(c *Config) any { return &c.Storage.CacheSize },
		sizeIn(0, Terabyte, func(c *Config) int64 { return c.Storage.CacheSize })},
	{"storage", "repair", kindBool,
		func(c *Config) any { return &c.Storage.Repair }, nil},
	{"storage", "reserve_size", kindSize,
		func(c *Config) any { return &c.Storage.ReserveSize },
		sizeIn(0, Terabyte, func(c *Config) int64 { return c.Storage.ReserveSize })},
	{"storage", "unsafe_no_sync", kindBool,
		func(c *Config) any { return &c.Storage.UnsafeNoSync }, nil},

	{"scheduler", "quantum", kindInt,
		func(c *Config) any { return &c.Scheduler.Quantum },
		intIn(1, maxQuantum, func(c *Config) int64 { return c.Scheduler.Quantum })},

	{"queue", "visibility_timeout", kindDuration,
		func(c *Config) any { return &c.Queue.VisibilityTimeout }, checkQueue("visibility_timeout")},
	{"queue", "max_attempts", kindInt,
		func(c *Config) any { return &c.Queue.MaxAttempts }, checkQueue("max_attempts")},
	{"queue", "backoff_base", kindDuration,
		func(c *Config) any { return &c.Queue.BackoffBase }, checkQueue("backoff_base")},
	{"queue", "backoff_max", kindDuration,
		func(c *Config) any { return &c.Queue.BackoffMax }, checkQueue("backoff_max")},
	{"queue", "dedup_window", kindDuration,
		func(c *Config) any { return &c.Queue.DedupWindow }, checkQueue("dedup_window")},
	{"queue", "max_lease_extension", kindDuration,
		func(c *Config) any { return &c.Queue.MaxLeaseExtension },
		durationIn(sched.MinQueueDuration, sched.MaxLeaseExtensionLimit, func(c *Config) time.Duration { return c.Queue.MaxLeaseExtension })},

	{"lua", "default_timeout", kindDuration,
		func(c *Config) any { return &c.Lua.DefaultTimeout },
		durationAtLeast(time.Microsecond, func(c *Config) time.Duration { return c.Lua.DefaultTimeout })},
	{"lua", "memory_limit", kindSize,
		func(c *Config) any { return &c.Lua.MemoryLimit },
		sizeIn(64*Kilobyte, 4*Gigabyte, func(c *Config) int64 { return c.Lua.MemoryLimit })},
	{"lua", "circuit_breaker_threshold", kindInt,
		func(c *Config) any { return &c.Lua.CircuitBreakerThreshold },
		intIn(1, maxCount, func(c *Config) int64 { return int64(c.Lua.CircuitBreakerThreshold) })},
	{"lua", "circuit_breaker_cooldown", kindDuration,
		func(c *Config) any { return &c.Lua.CircuitBreakerCooldown },
		durationAtLeast(time.Millisecond, func(c *Config) time.Duration { return c.Lua.CircuitBreakerCooldown })},

	{"auth", "enabled", kindBool,
		func(c *Config) any { return &c.Auth.Enabled }, nil},
	{"auth", "bootstrap_apikey", kindSecret,
		func(c *Config) any { return &c.Auth.BootstrapAPIKey }, checkBootstrap},

	{"tls", "cert_file", kindString,
		func(c *Config) any { return &c.TLS.CertFile },
		requiredWith(func(c *Config) (string, string, string) { return c.TLS.CertFile, c.TLS.KeyFile, "tls.key_file" })},
	{"tls", "key_file", kindString,
		func(c *Config) any { return &c.TLS.KeyFile },
		requiredWith(func(c *Config) (string, string, string) { return c.TLS.KeyFile, c.TLS.CertFile, "tls.cert_file" })},
	{"tls", "client_ca_file", kindString,
		func(c *Config) any { return &c.TLS.ClientCAFile }, checkClientCA},

	{"telemetry", "otlp_endpoint", kindString,
		func(c *Config) any { return &c.Telemetry.OTLPEndpoint }, nil},

	{"log", "level", kindLevel,
		func(c *Config) any { return &c.Log.Level }, nil},
	{"log", "format", kindString,
		func(c *Config) any { return &c.Log.Format }, checkFormat},
}

// fieldIndex maps "section.name" to the field.
var fieldIndex = func() map[string]*field {
	m := make(map[string]*field, len(fields))
	for i := range fields {
		m[fields[i].key()] = &fields[i]
	}
	return m
}()

func lookupField(section, name string) *field { return fieldIndex[section+"."+name] }

func knownSection(s string) bool {
	for _, t := range sections {
		if s == t {
			return true
		}
	}
	return false
}

// parseValue converts a TOML value (string, int64, bool, float64, a time or
// a table or array) into the Go value of kind k, or reports false.
func parseValue(k kind, v any) (any, bool) {
	switch k {
	case kindString:
		s, ok := v.(string)
		return s, ok
	case kindSecret:
		s, ok := v.(string)
		return Secret(s), ok
	case kindInt:
		n, ok := v.(int64)
		return n, ok
	case kindBool:
		b, ok := v.(bool)
		return b, ok
	}
	s, ok := v.(string)
	if !ok {
		return nil, false
	}
	return parseString(k, s)
}

// parseString converts s, the text of an environment variable or of a TOML
// string, into the Go value of kind k, or reports false.
func parseString(k kind, s string) (any, bool) {
	switch k {
	case kindString:
		return s, true
	case kindSecret:
		return Secret(s), true
	case kindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n, err == nil
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		return b, err == nil
	case kindDuration:
		d, err := ParseDuration(s)
		return d, err == nil
	case kindSize:
		n, err := ParseSize(s)
		return n, err == nil
	case kindLevel:
		l, ok := parseLevel(s)
		return l, ok
	}
	return nil, false
}

// set stores v, a value returned by parseValue or parseString for f.kind,
// in c. An integer out of the range of an int field is stored clamped; the
// field's check then rejects it.
func (f *field) set(c *Config, v any) {
	switch p := f.ptr(c).(type) {
	case *string:
		*p = v.(string)
	case *Secret:
		*p = v.(Secret)
	case *bool:
		*p = v.(bool)
	case *time.Duration:
		*p = v.(time.Duration)
	case *slog.Level:
		*p = v.(slog.Level)
	case *int64:
		*p = v.(int64)
	case *int:
		n := v.(int64)
		*p = int(max(min(n, 1<<31), -1<<31))
	default:
		panic(fmt.Sprintf("config: %s: unexpected field type %T", f.key(), p))
	}
}

// format writes f's value in c as a TOML value; secrets are redacted.
func (f *field) format(c *Config) string {
	switch p := f.ptr(c).(type) {
	case *string:
		return quote(*p)
	case *Secret:
		return quote(p.String())
	case *bool:
		return strconv.FormatBool(*p)
	case *time.Duration:
		return quote(FormatDuration(*p))
	case *slog.Level:
		return quote(levelName(*p))
	case *int64:
		if f.kind == kindSize {
			return quote(FormatSize(*p))
		}
		return strconv.FormatInt(*p, 10)
	case *int:
		return strconv.Itoa(*p)
	}
	panic(fmt.Sprintf("config: %s: unexpected field type", f.key()))
}

func parseLevel(s string) (slog.Level, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	}
	return 0, false
}

func levelName(l slog.Level) string { return strings.ToLower(l.String()) }

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// The checks.

func intIn(lo, hi int64, get func(*Config) int64) func(*Config) string {
	return func(c *Config) string {
		if n := get(c); n < lo || n > hi {
			return fmt.Sprintf("an integer from %d to %d", lo, hi)
		}
		return ""
	}
}

func sizeIn(lo, hi int64, get func(*Config) int64) func(*Config) string {
	return func(c *Config) string {
		if n := get(c); n < lo || n > hi {
			return fmt.Sprintf("a size from %s to %s", FormatSize(lo), FormatSize(hi))
		}
		return ""
	}
}

func durationAtLeast(lo time.Duration, get func(*Config) time.Duration) func(*Config) string {
	return func(c *Config) string {
		if get(c) < lo {
			if lo == 0 {
				return "a duration of zero or more"
			}
			return "a duration of at least " + FormatDuration(lo)
		}
		return ""
	}
}

func nonEmpty(get func(*Config) string) func(*Config) string {
	return func(c *Config) string {
		if get(c) == "" {
			return "a non-empty string"
		}
		return ""
	}
}

func checkHostPort(get func(*Config) string) func(*Config) string {
	return func(c *Config) string {
		_, port, err := net.SplitHostPort(get(c))
		if err == nil {
			if _, perr := strconv.ParseUint(port, 10, 16); perr == nil {
				return ""
			}
		}
		return `host:port with a numeric port, such as "0.0.0.0:5555" or "[::1]:5555"`
	}
}

func checkNodeID(c *Config) string {
	id := c.Server.NodeID
	if id == "" || len(id) > maxNodeIDLen {
		return `1 to 255 bytes of letters, digits and ".-_:"`
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(".-_:", b) >= 0) {
			return `1 to 255 bytes of letters, digits and ".-_:"`
		}
	}
	return ""
}

func durationIn(lo, hi time.Duration, get func(*Config) time.Duration) func(*Config) string {
	return func(c *Config) string {
		if d := get(c); d < lo || d > hi {
			return "a duration from " + FormatDuration(lo) + " to " + FormatDuration(hi)
		}
		return ""
	}
}

// checkQueue checks the [queue] key name with the bounds CreateQueue
// applies to the same setting (sched.QueueSettings.Check), so that both
// accept the same values and word their refusals alike.
func checkQueue(name string) func(*Config) string {
	return func(c *Config) string {
		q := &c.Queue
		set := sched.QueueSettings{
			VisibilityTimeout: q.VisibilityTimeout,
			MaxAttempts:       int64(q.MaxAttempts),
			BackoffBase:       q.BackoffBase,
			BackoffMax:        q.BackoffMax,
			DedupWindow:       q.DedupWindow,
		}
		for _, e := range set.Check(q.MaxLeaseExtension) {
			if e.Setting == name {
				return e.Want
			}
		}
		return ""
	}
}

func checkBootstrap(c *Config) string {
	if s := c.Auth.BootstrapAPIKey; s != "" && len(s) < minSecretLen {
		return fmt.Sprintf("empty, or a secret of at least %d bytes", minSecretLen)
	}
	return ""
}

func requiredWith(get func(*Config) (self, other, otherKey string)) func(*Config) string {
	return func(c *Config) string {
		self, other, otherKey := get(c)
		if self == "" && other != "" {
			return "a file path, required when " + otherKey + " is set"
		}
		return ""
	}
}

func checkClientCA(c *Config) string {
	if c.TLS.ClientCAFile != "" && c.TLS.CertFile == "" {
		return "empty unless tls.cert_file and tls.key_file are set (mTLS needs TLS)"
	}
	return ""
}

func checkFormat(c *Config) string {
	if f := c.Log.Format; f != FormatText && f != FormatJSON {
		return `"text" or "json"`
	}
	return ""
}
