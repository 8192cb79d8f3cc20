package config

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
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
	kindPeers                // an array of "ID@host:port" strings
	kindFloat                // a TOML float or integer
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
	case kindPeers:
		return peersForm
	case kindFloat:
		return "a number"
	}
	panic("config: unknown kind")
}

// A field is one configuration key.
type field struct {
	section string // "queue"
	name    string // "visibility_timeout"
	kind    kind
	// ptr returns a pointer to the field's value in c: *string, *Secret,
	// *int, *int64, *uint64, *bool, *time.Duration, *slog.Level or
	// *map[uint64]string.
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
var sections = []string{"server", "storage", "cluster", "scheduler", "queue", "lua", "auth", "tls", "http", "telemetry", "log"}

// Limits of values, shared by the checks and the documentation.
const (
	maxReassembled = 256 * Megabyte // spec: protocol.max_reassembled_size
	minFrame       = 4 * Kilobyte   // spec: protocol.min_max_frame_size
	maxBatch       = 65536          // spec: protocol.max_batch_size
	maxQuantum     = 1 << 30
	maxCount       = 1000000
	minSecretLen   = 16
	maxNodeIDLen   = 255
	maxRaftID      = 1<<63 - 1 // the largest TOML integer
	maxReplicas    = 7
	maxPeers       = 1000 // spec: ClusterStatusResult.nodes max
)

// peersForm and peersEnvForm describe cluster.peers in a file and in the
// environment.
const (
	peersForm    = `an array of "ID@host:port" strings, such as ["1@10.0.0.1:5556", "2@10.0.0.2:5556"]`
	peersEnvForm = `a comma-separated list of ID@host:port, such as "1@10.0.0.1:5556,2@10.0.0.2:5556"`
)

var fields = []field{
	{"server", "listen_addr", kindString,
		func(c *Config) any { return &c.Server.ListenAddr }, checkHostPort(func(c *Config) string { return c.Server.ListenAddr })},
	{"server", "node_id", kindString,
		func(c *Config) any { return &c.Server.NodeID }, checkName(func(c *Config) string { return c.Server.NodeID })},
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
	{"server", "gc_percent", kindInt,
		func(c *Config) any { return &c.Server.GCPercent },
		intIn(0, 1000, func(c *Config) int64 { return int64(c.Server.GCPercent) })},
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

	{"cluster", "node_id", kindInt,
		func(c *Config) any { return &c.Cluster.NodeID }, checkRaftID},
	{"cluster", "cluster_id", kindString,
		func(c *Config) any { return &c.Cluster.ClusterID }, checkName(func(c *Config) string { return c.Cluster.ClusterID })},
	{"cluster", "peer_listen_addr", kindString,
		func(c *Config) any { return &c.Cluster.PeerListenAddr }, checkPeerListen},
	{"cluster", "advertise_addr", kindString,
		func(c *Config) any { return &c.Cluster.AdvertiseAddr }, checkAdvertise},
	{"cluster", "peers", kindPeers,
		func(c *Config) any { return &c.Cluster.Peers }, checkPeers},
	{"cluster", "join", kindBool,
		func(c *Config) any { return &c.Cluster.Join }, nil},
	{"cluster", "replication_factor", kindInt,
		func(c *Config) any { return &c.Cluster.ReplicationFactor },
		intIn(1, maxReplicas, func(c *Config) int64 { return int64(c.Cluster.ReplicationFactor) })},
	{"cluster", "tick_interval", kindDuration,
		func(c *Config) any { return &c.Cluster.TickInterval },
		durationIn(time.Millisecond, 10*time.Second, func(c *Config) time.Duration { return c.Cluster.TickInterval })},
	{"cluster", "election_ticks", kindInt,
		func(c *Config) any { return &c.Cluster.ElectionTicks }, checkElectionTicks},
	{"cluster", "heartbeat_ticks", kindInt,
		func(c *Config) any { return &c.Cluster.HeartbeatTicks },
		intIn(1, 100, func(c *Config) int64 { return int64(c.Cluster.HeartbeatTicks) })},
	{"cluster", "snapshot_log_size", kindSize,
		func(c *Config) any { return &c.Cluster.SnapshotLogSize },
		sizeIn(Kilobyte, Terabyte, func(c *Config) int64 { return c.Cluster.SnapshotLogSize })},
	{"cluster", "meta_snapshot_entries", kindInt,
		func(c *Config) any { return &c.Cluster.MetaSnapshotEntries },
		intIn(2, 100_000_000, func(c *Config) int64 { return int64(c.Cluster.MetaSnapshotEntries) })},
	{"cluster", "snapshot_rate", kindSize,
		func(c *Config) any { return &c.Cluster.SnapshotRate }, checkSnapshotRate},

	{"scheduler", "policy", kindString,
		func(c *Config) any { return &c.Scheduler.Policy }, checkPolicy},
	{"scheduler", "latency_budget", kindInt,
		func(c *Config) any { return &c.Scheduler.LatencyBudget },
		intIn(0, sched.MaxLatencyBudget, func(c *Config) int64 { return int64(c.Scheduler.LatencyBudget) })},
	{"scheduler", "latency_idle", kindDuration,
		func(c *Config) any { return &c.Scheduler.LatencyIdle }, checkLatencyIdle},
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

	{"http", "listen_addr", kindString,
		func(c *Config) any { return &c.HTTP.ListenAddr }, checkHTTPListen},
	{"http", "pprof", kindBool,
		func(c *Config) any { return &c.HTTP.Pprof }, checkPprof},

	{"telemetry", "metrics_top_keys", kindInt,
		func(c *Config) any { return &c.Telemetry.MetricsTopKeys },
		intIn(0, 1000, func(c *Config) int64 { return int64(c.Telemetry.MetricsTopKeys) })},
	{"telemetry", "otlp_endpoint", kindString,
		func(c *Config) any { return &c.Telemetry.OTLPEndpoint }, checkOTLPEndpoint},
	{"telemetry", "otlp_interval", kindDuration,
		func(c *Config) any { return &c.Telemetry.OTLPInterval },
		durationIn(100*time.Millisecond, time.Hour, func(c *Config) time.Duration { return c.Telemetry.OTLPInterval })},
	{"telemetry", "trace_sample_ratio", kindFloat,
		func(c *Config) any { return &c.Telemetry.TraceSampleRatio }, checkSampleRatio},

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
// a table or array) into the Go value of kind k. If it cannot, it returns
// the accepted form as want.
func parseValue(k kind, v any) (value any, want string) {
	switch k {
	case kindString:
		s, ok := v.(string)
		return s, wantIf(k, ok)
	case kindSecret:
		s, ok := v.(string)
		return Secret(s), wantIf(k, ok)
	case kindInt:
		n, ok := v.(int64)
		return n, wantIf(k, ok)
	case kindBool:
		b, ok := v.(bool)
		return b, wantIf(k, ok)
	case kindFloat:
		switch n := v.(type) {
		case float64:
			return n, ""
		case int64:
			return float64(n), ""
		}
		return nil, k.form()
	case kindPeers:
		list, ok := v.([]any)
		if !ok {
			return nil, peersForm
		}
		entries := make([]string, len(list))
		for i, e := range list {
			if entries[i], ok = e.(string); !ok {
				return nil, peersForm
			}
		}
		return parsePeers(entries, peersForm)
	}
	s, ok := v.(string)
	if !ok {
		return nil, k.form()
	}
	return parseString(k, s)
}

// parseString converts s, the text of an environment variable or of a TOML
// string, into the Go value of kind k. If it cannot, it returns the
// accepted form as want.
func parseString(k kind, s string) (value any, want string) {
	switch k {
	case kindString:
		return s, ""
	case kindSecret:
		return Secret(s), ""
	case kindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n, wantIf(k, err == nil)
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		return b, wantIf(k, err == nil)
	case kindFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return f, wantIf(k, err == nil)
	case kindDuration:
		d, err := ParseDuration(s)
		return d, wantIf(k, err == nil)
	case kindSize:
		n, err := ParseSize(s)
		return n, wantIf(k, err == nil)
	case kindLevel:
		l, ok := parseLevel(s)
		return l, wantIf(k, ok)
	case kindPeers:
		var entries []string
		if strings.TrimSpace(s) != "" {
			entries = strings.Split(s, ",")
		}
		return parsePeers(entries, peersEnvForm)
	}
	return nil, k.form()
}

// wantIf returns "" if ok, or else the form of k.
func wantIf(k kind, ok bool) string {
	if ok {
		return ""
	}
	return k.form()
}

// parsePeers parses "ID@host:port" entries, spaces around them ignored,
// into a map from ID to address: nil for none. It checks their syntax and
// that no ID repeats; checkPeers checks the rest. On failure it returns
// what it wants, beginning with form.
func parsePeers(entries []string, form string) (map[uint64]string, string) {
	var m map[uint64]string
	for _, e := range entries {
		e = strings.TrimSpace(e)
		idText, addr, ok := strings.Cut(e, "@")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || err != nil {
			return nil, form + "; " + quote(e) + ` is not "ID@host:port" with a positive integer ID`
		}
		if _, dup := m[id]; dup {
			return nil, form + fmt.Sprintf(", with distinct IDs; ID %d is listed twice", id)
		}
		if m == nil {
			m = make(map[uint64]string, len(entries))
		}
		m[id] = addr
	}
	return m, ""
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
	case *float64:
		*p = v.(float64)
	case *time.Duration:
		*p = v.(time.Duration)
	case *slog.Level:
		*p = v.(slog.Level)
	case *int64:
		*p = v.(int64)
	case *int:
		n := v.(int64)
		*p = int(max(min(n, 1<<31), -1<<31))
	case *uint64:
		n := v.(int64)
		if n < 0 {
			*p = math.MaxUint64 // out of range, like any negative value
		} else {
			*p = uint64(n)
		}
	case *map[uint64]string:
		*p = v.(map[uint64]string)
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
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
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
	case *uint64:
		return strconv.FormatUint(*p, 10)
	case *map[uint64]string:
		return formatPeers(*p)
	}
	panic(fmt.Sprintf("config: %s: unexpected field type", f.key()))
}

// formatPeers writes peers as a TOML array of "ID@host:port" strings in
// the order of their IDs.
func formatPeers(peers map[uint64]string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range sortedIDs(peers) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quote(strconv.FormatUint(id, 10) + "@" + peers[id]))
	}
	b.WriteByte(']')
	return b.String()
}

func sortedIDs(peers map[uint64]string) []uint64 {
	ids := make([]uint64, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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

// checkSnapshotRate allows 0 (no bound) or 1MB to 1TB.
func checkSnapshotRate(c *Config) string {
	if n := c.Cluster.SnapshotRate; n != 0 && (n < Megabyte || n > Terabyte) {
		return fmt.Sprintf("0 (no bound) or a size from %s to %s", FormatSize(Megabyte), FormatSize(Terabyte))
	}
	return ""
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

// checkName checks a name such as server.node_id: 1 to 255 bytes of
// letters, digits and ".-_:".
func checkName(get func(*Config) string) func(*Config) string {
	return func(c *Config) string {
		id := get(c)
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

func checkLatencyIdle(c *Config) string {
	if d := c.Scheduler.LatencyIdle; d < time.Millisecond || d > sched.MaxLatencyIdle {
		return "a duration from 1ms to " + FormatDuration(sched.MaxLatencyIdle)
	}
	return ""
}

func checkPolicy(c *Config) string {
	if e := sched.CheckPolicy(c.Scheduler.Policy); e != nil || c.Scheduler.Policy == "" {
		return `"drr" or "stfq"`
	}
	return ""
}

func checkFormat(c *Config) string {
	if f := c.Log.Format; f != FormatText && f != FormatJSON {
		return `"text" or "json"`
	}
	return ""
}

// The checks of [cluster].

func checkRaftID(c *Config) string {
	if c.Cluster.NodeID > maxRaftID {
		return fmt.Sprintf("an integer from 0 (single-node mode) to %d", uint64(maxRaftID))
	}
	return ""
}

// checkOTLPEndpoint checks telemetry.otlp_endpoint: empty (off),
// host:port, or an http(s) URL with a host.
func checkOTLPEndpoint(c *Config) string {
	if c.Telemetry.OTLPEndpoint == "" {
		return ""
	}
	if _, err := c.Telemetry.OTLPBase(); err != nil {
		return "empty, host:port, or an http:// or https:// URL with a host"
	}
	return ""
}

func checkSampleRatio(c *Config) string {
	if r := c.Telemetry.TraceSampleRatio; !(r >= 0 && r <= 1) {
		return "a number from 0 to 1"
	}
	return ""
}

// checkHTTPListen checks http.listen_addr: empty (off) or host:port.
func checkHTTPListen(c *Config) string {
	if c.HTTP.ListenAddr == "" {
		return ""
	}
	if checkHostPort(func(c *Config) string { return c.HTTP.ListenAddr })(c) != "" {
		return `empty (off) or host:port with a numeric port, such as "127.0.0.1:9555"`
	}
	return ""
}

// checkPprof checks that http.pprof has a listener to be served on.
func checkPprof(c *Config) string {
	if c.HTTP.Pprof && c.HTTP.ListenAddr == "" {
		return "false unless http.listen_addr is set: the profiles are served on the admin HTTP listener"
	}
	return ""
}

// checkPeerListen checks that peer_listen_addr is host:port and, in
// cluster mode, that it cannot collide with server.listen_addr: the same
// port on hosts that may overlap (equal, or either unspecified).
func checkPeerListen(c *Config) string {
	if want := checkHostPort(func(c *Config) string { return c.Cluster.PeerListenAddr })(c); want != "" {
		return want
	}
	if !c.Cluster.Enabled() {
		return ""
	}
	peerHost, peerPort, _ := net.SplitHostPort(c.Cluster.PeerListenAddr)
	host, port, err := net.SplitHostPort(c.Server.ListenAddr)
	if err != nil || port != peerPort || port == "0" || !hostsOverlap(host, peerHost) {
		return "" // a bad server.listen_addr is reported on its own
	}
	return "host:port with a port other than server.listen_addr's (" + port + "), which listens on the same host"
}

// checkAdvertise checks that advertise_addr, when set, is an address
// clients can dial.
func checkAdvertise(c *Config) string {
	addr := c.Cluster.AdvertiseAddr
	if addr == "" {
		return ""
	}
	host, port, ok := splitDialAddr(addr)
	if ok {
		return ""
	}
	want := "host:port that clients can reach: a host name or IP address other than 0.0.0.0 or ::, and a port from 1 to 65535"
	if _, listenPort, err := net.SplitHostPort(c.Server.ListenAddr); err == nil && listenPort == "0" && port == "0" && !isUnspecified(host) {
		want += "; server.listen_addr's port is 0, so set it explicitly"
	}
	return want
}

// checkPeers checks cluster.peers against cluster.node_id: none in
// single-node mode; in cluster mode, valid IDs and distinct dialable
// addresses, this node's ID among them.
func checkPeers(c *Config) string {
	cl := &c.Cluster
	if !cl.Enabled() {
		if len(cl.Peers) > 0 {
			return "no peers while cluster.node_id is 0 (single-node mode); set cluster.node_id to this node's ID to turn cluster mode on"
		}
		return ""
	}
	if len(cl.Peers) == 0 {
		return fmt.Sprintf("the initial members, this node (cluster.node_id = %d) included, as %s; required in cluster mode", cl.NodeID, peersForm)
	}
	if len(cl.Peers) > maxPeers {
		return fmt.Sprintf("at most %d members; %d are listed", maxPeers, len(cl.Peers))
	}
	byAddr := make(map[string]uint64, len(cl.Peers))
	for _, id := range sortedIDs(cl.Peers) {
		addr := cl.Peers[id]
		if id == 0 || id > maxRaftID {
			return fmt.Sprintf("peer IDs from 1 to %d; %d is not", uint64(maxRaftID), id)
		}
		if _, _, ok := splitDialAddr(addr); !ok {
			return fmt.Sprintf("peer addresses host:port, with a host name or IP address other than 0.0.0.0 or :: and a port from 1 to 65535; %s (ID %d) is not", quote(addr), id)
		}
		if other, dup := byAddr[addr]; dup {
			return fmt.Sprintf("distinct peer addresses; %s is listed for IDs %d and %d", quote(addr), other, id)
		}
		byAddr[addr] = id
	}
	if _, ok := cl.Peers[cl.NodeID]; !ok {
		return fmt.Sprintf("the initial members, this node included: an entry for cluster.node_id = %d", cl.NodeID)
	}
	return ""
}

func checkElectionTicks(c *Config) string {
	if n := c.Cluster.ElectionTicks; n < 2 || n > 1000 || n <= c.Cluster.HeartbeatTicks {
		return fmt.Sprintf("an integer from 2 to 1000, more than heartbeat_ticks (%d)", c.Cluster.HeartbeatTicks)
	}
	return ""
}

// splitDialAddr splits addr, an address to dial, into its host and port
// and reports whether both are valid: a host name or an IP address other
// than an unspecified one, and a port from 1 to 65535.
func splitDialAddr(addr string) (host, port string, ok bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return host, port, err == nil && n != 0 && validHost(host) && !isUnspecified(host)
}

// validHost reports whether h is an IP address or a host name: at most 253
// bytes of letters, digits and ".-_".
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		b := h[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

// isUnspecified reports whether a listener's host means every address:
// empty, 0.0.0.0 or ::.
func isUnspecified(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// hostsOverlap reports whether listeners on hosts a and b may share
// addresses: either is unspecified, or both name the same address.
func hostsOverlap(a, b string) bool {
	if isUnspecified(a) || isUnspecified(b) {
		return true
	}
	ia, errA := netip.ParseAddr(a)
	ib, errB := netip.ParseAddr(b)
	if errA == nil && errB == nil {
		return ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(a, b)
}
