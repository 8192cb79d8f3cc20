// Package config reads the broker's boot configuration: the file layer
// (fila.toml) and the environment layer (FILA_<SECTION>_<KEY> variables),
// over built-in defaults for every key, so that the broker runs with no file
// at all.
//
// Load searches for the file, applies the environment over it, checks every
// value and returns the effective Config together with Sources, which says
// where each value came from; Config.Print writes both for
// `fila-server --print-config`. Durations and sizes are strings with units
// ("30s", "8MB"); see ParseDuration and ParseSize.
//
// The runtime store (package rtconf) is a separate, live layer and is not
// read here.
package config

import (
	"log/slog"
	"time"
)

// Config is the broker's effective boot configuration. The zero value is not
// useful; start from Default or Load. Each field's doc names its TOML key,
// its unit and its default.
type Config struct {
	Server    ServerConfig
	Storage   StorageConfig
	Scheduler SchedulerConfig
	Queue     QueueConfig
	Lua       LuaConfig
	Auth      AuthConfig
	TLS       TLSConfig
	Telemetry TelemetryConfig
	Log       LogConfig
}

// ServerConfig is the [server] section: the listener and connection limits.
type ServerConfig struct {
	// ListenAddr is the TCP address to accept clients on, host:port
	// (listen_addr, default "0.0.0.0:5555").
	ListenAddr string
	// NodeID names this node to clients (HandshakeOk.node_id) and, later, to
	// the cluster (node_id). The default, empty in the file, is the machine's
	// host name, resolved by Load. At most 255 bytes of letters, digits and
	// ".-_:".
	NodeID string
	// MaxMessageSize is the largest message, payload plus headers, in bytes
	// that Enqueue accepts; larger ones fail with MESSAGE_TOO_LARGE
	// (max_message_size, default 16MB, at most 256MB).
	MaxMessageSize int64
	// MaxFrameSize is the largest frame body in bytes the server accepts and
	// announces at handshake (max_frame_size, default 16MB, from 4KB to
	// 256MB). Larger values travel as continuation frames.
	MaxFrameSize int64
	// MaxConnections caps open client connections; a connection over the cap
	// is closed right after accept. Zero means no cap
	// (max_connections, default 10000).
	MaxConnections int
	// ReassemblyBudget bounds the bytes all connections together may hold
	// for requests arriving in continuation frames (requests larger than
	// max_frame_size); a connection that would take the total over it is
	// closed with RESOURCE_EXHAUSTED (reassembly_budget, default 256MB,
	// from 1MB to 1TB).
	ReassemblyBudget int64
	// MemoryLimit is a soft limit on the broker's memory in bytes: the
	// garbage collector works harder as the heap approaches it, keeping the
	// resident size near it under bursts of large messages (Go's
	// runtime/debug.SetMemoryLimit). Zero means no limit; the GOMEMLIMIT
	// environment variable, when set, takes precedence
	// (memory_limit, default 0).
	MemoryLimit int64
	// ShutdownTimeout is how long a shutdown waits for requests in flight to
	// finish after sending GoAway, before closing connections
	// (shutdown_timeout, default 10s).
	ShutdownTimeout time.Duration
}

// StorageConfig is the [storage] section: the write-ahead log and its index.
type StorageConfig struct {
	// DataDir is the directory holding the log and its state, created if
	// missing; relative paths are relative to the working directory
	// (data_dir, default "data").
	DataDir string
	// SegmentSize is the size in bytes at which the log starts a new segment
	// file (segment_size, default 8MB, from 1MB to 4GB). The log keeps the
	// newest segment in memory, so smaller segments cost less to append to.
	SegmentSize int64
	// CacheSize bounds the memory in bytes used to cache payloads read back
	// from the log; zero disables the cache (cache_size, default 16MB).
	CacheSize int64
	// Repair lets startup go on past damage and missing data instead of
	// refusing to start: it drops only the damaged records (at worst the
	// rest of the damaged segment) and keeps every other, starts without a
	// log tail that is missing or truncated, and logs exactly what it
	// dropped. A torn final record (a crash mid-write) is always cut, with
	// or without Repair (repair, default false).
	Repair bool
	// ReserveSize is the space in bytes the broker preallocates in the data
	// directory (a file named RESERVE) and frees when the disk fills, so
	// that acks, lease state and compaction still have room while new
	// messages are refused; zero disables it, and a full disk then stalls
	// every write until space is freed (reserve_size, default 64MB, up to
	// 1TB).
	ReserveSize int64
	// UnsafeNoSync skips fsync: acknowledged writes can be lost on a crash or
	// power failure. For benchmarks and throwaway tests only
	// (unsafe_no_sync, default false).
	UnsafeNoSync bool
}

// SchedulerConfig is the [scheduler] section: Deficit Round Robin.
type SchedulerConfig struct {
	// Quantum is the deficit a fairness key earns per unit of weight per DRR
	// round, in cost units (payload bytes); M. Shreedhar and G. Varghese,
	// "Efficient Fair Queuing using Deficit Round Robin", SIGCOMM 1995
	// (quantum, default 1000, from 1 to 1073741824).
	Quantum int64
}

// QueueConfig is the [queue] section: defaults for queues created without
// their own values (CreateQueue fields left zero).
type QueueConfig struct {
	// VisibilityTimeout is the default lease length: how long a delivered
	// message stays leased before it is redelivered
	// (visibility_timeout, default 30s).
	VisibilityTimeout time.Duration
	// MaxAttempts is the default number of deliveries before a message is
	// dead-lettered (max_attempts, default 3, from 1 to 1000000).
	MaxAttempts int
	// BackoffBase is the default delay after a first failed attempt, doubled
	// after each further one (backoff_base, default 1s).
	BackoffBase time.Duration
	// BackoffMax caps the retry delay; at least BackoffBase
	// (backoff_max, default 60s).
	BackoffMax time.Duration
	// DedupWindow is how long an idempotency key is remembered
	// (dedup_window, default 5m).
	DedupWindow time.Duration
}

// LuaConfig is the [lua] section: the hook sandbox.
type LuaConfig struct {
	// DefaultTimeout is the longest one hook call may run
	// (default_timeout, default 10ms).
	DefaultTimeout time.Duration
	// MemoryLimit is the most memory in bytes one hook's Lua state may
	// allocate (memory_limit, default 8MB).
	MemoryLimit int64
	// CircuitBreakerThreshold is the number of consecutive failed hook calls
	// that open a queue's circuit breaker, after which the hook is bypassed
	// (circuit_breaker_threshold, default 3, from 1 to 1000000).
	CircuitBreakerThreshold int
	// CircuitBreakerCooldown is how long an open breaker bypasses the hook
	// before one trial call is let through
	// (circuit_breaker_cooldown, default 30s).
	CircuitBreakerCooldown time.Duration
}

// AuthConfig is the [auth] section: API keys.
type AuthConfig struct {
	// Enabled requires every connection to present a valid API key at
	// handshake (enabled, default false).
	Enabled bool
	// BootstrapAPIKey, when set, is a secret that authenticates with every
	// permission on every queue. It is meant to mint real keys and then be
	// removed. At least 16 bytes when set; never printed or logged
	// (bootstrap_apikey, default empty).
	BootstrapAPIKey Secret
}

// TLSConfig is the [tls] section. With CertFile and KeyFile set the listener
// speaks TLS 1.2 or later; with ClientCAFile set as well, clients must present
// a certificate signed by one of its CAs (mTLS).
type TLSConfig struct {
	// CertFile is the PEM certificate chain of the server (cert_file,
	// default empty: plain TCP). Set together with KeyFile.
	CertFile string
	// KeyFile is the PEM private key of CertFile (key_file, default empty).
	KeyFile string
	// ClientCAFile is a PEM bundle of CAs that sign client certificates;
	// setting it requires mTLS (client_ca_file, default empty).
	ClientCAFile string
}

// TelemetryConfig is the [telemetry] section.
type TelemetryConfig struct {
	// OTLPEndpoint is where to export OpenTelemetry traces and metrics over
	// OTLP, host:port or a URL; empty disables export
	// (otlp_endpoint, default empty).
	OTLPEndpoint string
}

// LogConfig is the [log] section. See Config.Logger.
type LogConfig struct {
	// Level is the least severe level logged: debug, info, warn or error
	// (level, default info).
	Level slog.Level
	// Format is "text" (logfmt-style key=value) or "json", one line per
	// event (format, default "text").
	Format string
}

// Log formats.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// Default returns the configuration used when no file and no environment
// variable sets anything: the values in each field's doc. NodeID is left
// empty; Load fills it with the host name.
func Default() Config {
	return Config{
		Server: ServerConfig{
			ListenAddr:       "0.0.0.0:5555",
			MaxMessageSize:   16 * Megabyte,
			MaxFrameSize:     16 * Megabyte,
			MaxConnections:   10000,
			ReassemblyBudget: 256 * Megabyte,
			ShutdownTimeout:  10 * time.Second,
		},
		Storage: StorageConfig{
			DataDir:     "data",
			SegmentSize: 8 * Megabyte,
			CacheSize:   16 * Megabyte,
			ReserveSize: 64 * Megabyte,
		},
		Scheduler: SchedulerConfig{Quantum: 1000},
		Queue: QueueConfig{
			VisibilityTimeout: 30 * time.Second,
			MaxAttempts:       3,
			BackoffBase:       time.Second,
			BackoffMax:        60 * time.Second,
			DedupWindow:       5 * time.Minute,
		},
		Lua: LuaConfig{
			DefaultTimeout:          10 * time.Millisecond,
			MemoryLimit:             8 * Megabyte,
			CircuitBreakerThreshold: 3,
			CircuitBreakerCooldown:  30 * time.Second,
		},
		Log: LogConfig{Level: slog.LevelInfo, Format: FormatText},
	}
}

// Secret is a string that must not leak: fmt, slog and encoding packages see
// "<redacted>" when it is set and "" when it is empty. Convert with
// string(s) at the one place the secret is used.
type Secret string

const redacted = "<redacted>"

// String returns "<redacted>", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString is String, so that %#v does not leak the secret either.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText writes String, so encoders never see the secret.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
