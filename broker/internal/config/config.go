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
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is the broker's effective boot configuration. The zero value is not
// useful; start from Default or Load. Each field's doc names its TOML key,
// its unit and its default.
type Config struct {
	Server    ServerConfig
	Storage   StorageConfig
	Cluster   ClusterConfig
	Scheduler SchedulerConfig
	Queue     QueueConfig
	Lua       LuaConfig
	Auth      AuthConfig
	TLS       TLSConfig
	HTTP      HTTPConfig
	Telemetry TelemetryConfig
	Log       LogConfig
}

// ServerConfig is the [server] section: the listener and connection limits.
type ServerConfig struct {
	// ListenAddr is the TCP address to accept clients on, host:port
	// (listen_addr, default "0.0.0.0:5555").
	ListenAddr string
	// NodeID names this node to clients (HandshakeOk.node_id) and in logs
	// (node_id); the cluster's Raft ID is Cluster.NodeID. The default, empty
	// in the file, is the machine's host name, resolved by Load. At most 255
	// bytes of letters, digits and ".-_:".
	NodeID string
	// MaxMessageSize is the largest message, payload plus headers, in bytes
	// that Enqueue accepts; larger ones fail with MESSAGE_TOO_LARGE
	// (max_message_size, default 16MB, at most 256MB).
	MaxMessageSize int64
	// MaxFrameSize is the largest frame body in bytes the server accepts and
	// announces at handshake (max_frame_size, default 16MB, from 4KB to
	// 256MB). Larger values travel as continuation frames.
	MaxFrameSize int64
	// MaxConnections caps the client connections that completed the
	// handshake; a handshake over the cap is answered RESOURCE_EXHAUSTED and
	// its connection closed. Connections still handshaking count toward
	// MaxHandshaking instead. Zero means no cap
	// (max_connections, default 10000).
	MaxConnections int
	// MaxHandshaking caps the connections accepted and not yet handshaken;
	// accepting one more closes the oldest of them (max_handshaking,
	// default 1024, from 1 to 1000000).
	MaxHandshaking int
	// MaxConnectionsPerAddress caps the open connections from one IPv4
	// address or IPv6 /64, handshaking or not; one more is refused at
	// accept. Zero means no cap (max_connections_per_address, default
	// 1000).
	MaxConnectionsPerAddress int
	// HandshakeFailureRate is how many failed handshakes (bad API key,
	// bad version, malformed or non-Fila first bytes, handshake timeout,
	// eviction from the handshaking pool, and a connection closed after
	// the handshake for a protocol violation or a connection limit) one
	// address may make per second on average; while it is over, its new
	// connections are refused at accept. Zero turns the check off
	// (handshake_failure_rate, default 10).
	HandshakeFailureRate int
	// HandshakeFailureBurst is how many failed handshakes one address may
	// make in a row before HandshakeFailureRate applies
	// (handshake_failure_burst, default 20, from 1 to 1000000).
	HandshakeFailureBurst int
	// HandshakeTimeout bounds the time from accept to a complete Handshake
	// frame (handshake_timeout, default 10s).
	HandshakeTimeout time.Duration
	// MaxUnsettled caps the deliveries one subscription may hold unsettled
	// (leased and not yet acked, nacked, retried, released or expired),
	// whatever credit its client grants; a Subscribe with prefetch 0 is
	// granted this much credit, and a larger prefetch is granted this
	// much (max_unsettled, default 1000, from 1 to 4294967295).
	MaxUnsettled int
	// ReassemblyBudget bounds the bytes all connections together may hold
	// for requests still arriving: a frame received in part (beyond its
	// first 64 KiB) and the frames of a continuation; a connection that
	// would take the total over it is closed with RESOURCE_EXHAUSTED
	// (reassembly_budget, default 256MB, or a quarter of MemoryLimit when
	// that is set and smaller; from 1MB to 1TB).
	ReassemblyBudget int64
	// MaxOutboundSize bounds the bytes of answers one connection may have
	// waiting to be written; over it the server stops reading that
	// connection's requests until the client reads its answers
	// (max_outbound_size, default 4MB, from 64KB to 1GB).
	MaxOutboundSize int64
	// MaxEnqueueInFlight bounds the bytes of message bodies one connection
	// may have on their way to disk (submitted and not yet durable); over
	// it the server stops reading the connection until its earlier
	// enqueues are answered, so one producer of huge batches delays the
	// others' commits by a bounded amount (max_enqueue_in_flight, default
	// 2MB, from 64KB to 1GB).
	MaxEnqueueInFlight int64
	// BulkEnqueueInFlight separates sparse producers from bulk ones: a
	// connection whose enqueues in flight, with the rest of its request,
	// fit in it is sparse; while a sparse producer enqueues, every bulk
	// producer is held to as many bytes of bodies in flight as the sparse
	// producers ask for (at least a quarter of this, at most this), in
	// chunks of that size, so that the commits the sparse one waits for
	// stay small (bulk_enqueue_in_flight, default 32KB, from 4KB to 1GB;
	// at most max_enqueue_in_flight, which a larger value acts as).
	BulkEnqueueInFlight int64
	// WriteTimeout closes a connection whose socket takes no bytes for
	// this long: a client, or a consumer, that stopped reading
	// (write_timeout, default 30s).
	WriteTimeout time.Duration
	// FrameReadTimeout closes a connection that sent part of a frame and
	// nothing more for this long; connections between frames may stay
	// idle (frame_read_timeout, default 30s).
	FrameReadTimeout time.Duration
	// MaxBatchSize is the most items one batch request may carry (messages
	// of an Enqueue, items of an Ack, Nack, RetryAfter, ExtendLease or
	// Release), announced to clients at handshake; a request with more
	// fails with INVALID_ARGUMENT (max_batch_size, default 4096, from 1 to
	// 65536).
	MaxBatchSize int
	// MemoryLimit is a soft limit on the broker's memory in bytes: the
	// garbage collector works harder as the heap approaches it, keeping the
	// resident size near it under bursts of large messages (Go's
	// runtime/debug.SetMemoryLimit). Zero means no limit; the GOMEMLIMIT
	// environment variable, when set, takes precedence
	// (memory_limit, default 0).
	MemoryLimit int64
	// GCPercent is the garbage collector's headroom: a collection starts
	// when the heap has grown by this percentage of what the last one
	// left live (Go's GOGC, runtime/debug.SetGCPercent). 0, the default,
	// sizes it from the live heap after each collection: a growth of
	// max(64 MiB, a quarter of the live heap), at most 100 %, so a small
	// broker collects as Go's default would while one holding a large
	// backlog stays within a quarter of its live heap (the per-message
	// state is pointer-free, so collections stay cheap). The GOGC
	// environment variable, when set, takes precedence (gc_percent,
	// default 0, from 0 to 1000).
	GCPercent int
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

// ClusterConfig is the [cluster] section. Cluster mode is on when Enabled
// (NodeID != 0); otherwise the broker is a single node with no Raft, and the
// other keys are checked but unused.
type ClusterConfig struct {
	// NodeID is this node's Raft ID: a positive integer, unique in the
	// cluster and never reused, not even for a node that replaces a removed
	// one. Zero means single-node mode (node_id, default 0, at most
	// 9223372036854775807).
	NodeID uint64
	// ClusterID is a name all nodes of one cluster share; a peer that
	// presents another refuses the connection (cluster_id, default "fila";
	// 1 to 255 bytes of letters, digits and ".-_:").
	ClusterID string
	// PeerListenAddr is the TCP address, host:port, the peer transport
	// accepts other nodes on (peer_listen_addr, default "0.0.0.0:5556").
	// In cluster mode its port must differ from server.listen_addr's when
	// the two hosts can overlap.
	PeerListenAddr string
	// AdvertiseAddr is the host:port clients should use to reach this
	// node's client listener, sent in NOT_LEADER hints (advertise_addr).
	// The default, empty in the file, is resolved by Load in cluster mode
	// only: server.listen_addr if its host is specific, else the machine's
	// host name with server.listen_addr's port. Its host must not be
	// 0.0.0.0 or ::, and its port not 0.
	AdvertiseAddr string
	// Peers maps the Raft ID of each initial member of the cluster, this
	// node included, to the host:port of its peer transport (peers, an
	// array of "ID@host:port" strings; default empty). Required in cluster
	// mode, and must hold NodeID; IDs from 1 to 9223372036854775807,
	// addresses distinct. With Join, the members to reach, and this node.
	Peers map[uint64]string
	// Join starts this node as a new member of a running cluster (join,
	// default false): it waits until a member adds it (fila cluster
	// add-node) instead of starting a cluster of its own with Peers as
	// its members. Peers then lists members it may reach, and this node.
	// A node that has joined ignores it on later starts.
	Join bool
	// ReplicationFactor is the number of replicas of each queue, capped to
	// the number of nodes when a queue is placed (replication_factor,
	// default 3, from 1 to 7).
	ReplicationFactor int
	// TickInterval is the length of one Raft tick (tick_interval, default
	// 100ms, from 1ms to 10s).
	TickInterval time.Duration
	// ElectionTicks is the number of ticks a follower waits without hearing
	// from a leader before it campaigns (election_ticks, default 10, that
	// is 1s; from 2 to 1000, and more than HeartbeatTicks).
	ElectionTicks int
	// HeartbeatTicks is the number of ticks between a leader's heartbeats
	// (heartbeat_ticks, default 1, from 1 to 100).
	HeartbeatTicks int
	// SnapshotLogSize is how many bytes of Raft log a queue's replica
	// applies between two snapshots of its state (snapshot_log_size,
	// default 64MB, from 1KB to 1TB; at least twice the last snapshot's
	// size, too). Each snapshot lets the queue's log be compacted up to
	// it, and is what a follower that lags behind the compacted log is
	// sent.
	SnapshotLogSize int64
	// MetaSnapshotEntries is how many entries the meta group applies
	// between two snapshots of its state (meta_snapshot_entries, default
	// 4096, from 2 to 100,000,000). Each snapshot lets the meta group's
	// log be compacted up to it, and is what a node that lags behind the
	// compacted log is sent.
	MetaSnapshotEntries int
	// SnapshotRate bounds the bytes per second a node sends of each
	// queue snapshot it streams to a follower (snapshot_rate, default 0:
	// no bound; otherwise from 1MB to 1TB), so that catching a follower
	// up leaves the leader's disk and network to its clients.
	SnapshotRate int64
}

// Enabled reports whether cluster mode is on: whether NodeID is set.
func (c ClusterConfig) Enabled() bool { return c.NodeID != 0 }

// SchedulerConfig is the [scheduler] section: how queues share their
// consumers among fairness keys.
type SchedulerConfig struct {
	// Policy is the fair scheduling policy of queues created without one
	// (policy, default "stfq"): "stfq", start-time fair queueing (Goyal,
	// Vin & Cheng, SIGCOMM 1996) with a latency lane for keys that were
	// idle, whose shares hold at every time scale, in messages; or "drr",
	// deficit round robin, whose shares hold over whole rounds, in payload
	// bytes. A queue keeps the policy it was
	// created with, or follows this setting when it was created without
	// one.
	Policy string
	// LatencyBudget is the latency lane's budget of stfq queues created
	// without one: the deliveries a fairness key gets ahead of the
	// backlogged keys when it becomes backlogged after latency_idle with
	// nothing pending, or when it has not been served more than its share
	// (latency_budget, default 10, from 0, no latency lane, to 1000000).
	LatencyBudget int
	// LatencyIdle is how long a key must have had nothing pending to
	// enter the latency lane even if it was served more than its share,
	// for stfq queues created without their own (latency_idle, default
	// 100ms, from 1ms to 1h).
	LatencyIdle time.Duration
	// Quantum is the deficit a fairness key earns per unit of weight per DRR
	// round, in cost units (payload bytes); M. Shreedhar and G. Varghese,
	// "Efficient Fair Queuing using Deficit Round Robin", SIGCOMM 1995
	// (quantum, default 1000, from 1 to 1073741824).
	Quantum int64
}

// QueueConfig is the [queue] section: defaults for queues created without
// their own values (CreateQueue fields left zero), and the longest lease.
// The first five keys take the values CreateQueue accepts for the same
// settings (sched.QueueSettings.Check).
type QueueConfig struct {
	// VisibilityTimeout is the default lease length: how long a delivered
	// message stays leased before it is redelivered
	// (visibility_timeout, default 30s, from 1ms to max_lease_extension).
	VisibilityTimeout time.Duration
	// MaxAttempts is the default number of deliveries before a message is
	// dead-lettered (max_attempts, default 3, from 1 to 1000000).
	MaxAttempts int
	// BackoffBase is the default delay after a first failed attempt, doubled
	// after each further one (backoff_base, default 1s, from 1ms to 24h).
	BackoffBase time.Duration
	// BackoffMax caps the retry delay (backoff_max, default 60s, from
	// backoff_base to 24h).
	BackoffMax time.Duration
	// DedupWindow is how long an idempotency key is remembered
	// (dedup_window, default 5m, from 1ms to 168h).
	DedupWindow time.Duration
	// MaxLeaseExtension is the longest duration ExtendLease accepts, and
	// the longest visibility timeout of a queue; longer ones fail with
	// INVALID_ARGUMENT (max_lease_extension, default 12h, from 1ms to
	// 168h).
	MaxLeaseExtension time.Duration
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

// HTTPConfig is the [http] section: the admin HTTP listener, with
// /healthz, /readyz and /metrics (docs/operations.md).
type HTTPConfig struct {
	// ListenAddr is where the admin HTTP listener listens, host:port;
	// empty turns it off (listen_addr, default empty). It serves HTTPS
	// with the [tls] files when they are set. With auth on, /metrics
	// needs a key with admin on "*" unless this is a loopback address.
	ListenAddr string
	// Pprof serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/ on the admin listener, behind the same key check as
	// /metrics (pprof, default false). CPU and trace profiles run for the
	// request's seconds parameter, up to 5 minutes.
	Pprof bool
}

// TelemetryConfig is the [telemetry] section.
type TelemetryConfig struct {
	// MetricsTopKeys is how many fairness keys of each queue, the most
	// backlogged, get per-key metrics, bounding their series (0 to 1000;
	// metrics_top_keys, default 20; 0: none).
	MetricsTopKeys int

	// OTLPEndpoint is the OTLP/HTTP receiver to export OpenTelemetry
	// metrics and traces to: host:port (plain HTTP) or an http:// or
	// https:// base URL, to which /v1/metrics and /v1/traces are added, as
	// with OTEL_EXPORTER_OTLP_ENDPOINT; empty disables export
	// (otlp_endpoint, default empty).
	OTLPEndpoint string
	// OTLPInterval is how often metrics, and the spans batched since the
	// last export, are sent (100ms to 1h; otlp_interval, default 10s).
	OTLPInterval time.Duration
	// TraceSampleRatio is the fraction of messages enqueued without a
	// sampled W3C traceparent header that the broker traces, from 0 to 1
	// (trace_sample_ratio, default 0.01). Messages whose traceparent says
	// sampled are always traced; ones that say not sampled never are.
	TraceSampleRatio float64
}

// OTLPBase returns the base URL of OTLPEndpoint, without a trailing
// slash: "http://host:port" for host:port, the URL itself otherwise. The
// error names the endpoint when it is neither.
func (t TelemetryConfig) OTLPBase() (string, error) {
	ep := t.OTLPEndpoint
	bad := fmt.Errorf("otlp endpoint %q: want host:port or an http:// or https:// URL", ep)
	if !strings.Contains(ep, "://") {
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" || port == "" || strings.ContainsAny(ep, "/?#") {
			return "", bad
		}
		return "http://" + ep, nil
	}
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", bad
	}
	return strings.TrimSuffix(u.String(), "/"), nil
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
// variable sets anything: the values in each field's doc. Server.NodeID
// and Cluster.AdvertiseAddr are left empty; Load fills in the first, and
// the second in cluster mode.
func Default() Config {
	return Config{
		Server: ServerConfig{
			ListenAddr:               "0.0.0.0:5555",
			MaxMessageSize:           16 * Megabyte,
			MaxFrameSize:             16 * Megabyte,
			MaxConnections:           10000,
			MaxUnsettled:             1000,
			MaxHandshaking:           1024,
			MaxConnectionsPerAddress: 1000,
			HandshakeFailureRate:     10,
			HandshakeFailureBurst:    20,
			HandshakeTimeout:         10 * time.Second,
			ReassemblyBudget:         256 * Megabyte,
			MaxOutboundSize:          4 * Megabyte,
			MaxEnqueueInFlight:       2 * Megabyte,
			BulkEnqueueInFlight:      32 * Kilobyte,
			WriteTimeout:             30 * time.Second,
			FrameReadTimeout:         30 * time.Second,
			MaxBatchSize:             4096,
			ShutdownTimeout:          10 * time.Second,
		},
		Storage: StorageConfig{
			DataDir:     "data",
			SegmentSize: 8 * Megabyte,
			CacheSize:   16 * Megabyte,
			ReserveSize: 64 * Megabyte,
		},
		Cluster: ClusterConfig{
			ClusterID:           "fila",
			PeerListenAddr:      "0.0.0.0:5556",
			ReplicationFactor:   3,
			TickInterval:        100 * time.Millisecond,
			ElectionTicks:       10,
			HeartbeatTicks:      1,
			SnapshotLogSize:     64 * Megabyte,
			MetaSnapshotEntries: 4096,
		},
		Scheduler: SchedulerConfig{Policy: "stfq", LatencyBudget: 10, LatencyIdle: 100 * time.Millisecond, Quantum: 1000},
		Queue: QueueConfig{
			VisibilityTimeout: 30 * time.Second,
			MaxAttempts:       3,
			BackoffBase:       time.Second,
			BackoffMax:        60 * time.Second,
			DedupWindow:       5 * time.Minute,
			MaxLeaseExtension: 12 * time.Hour,
		},
		Lua: LuaConfig{
			DefaultTimeout:          10 * time.Millisecond,
			MemoryLimit:             8 * Megabyte,
			CircuitBreakerThreshold: 3,
			CircuitBreakerCooldown:  30 * time.Second,
		},
		Telemetry: TelemetryConfig{MetricsTopKeys: 20, OTLPInterval: 10 * time.Second, TraceSampleRatio: 0.01},
		Log:       LogConfig{Level: slog.LevelInfo, Format: FormatText},
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
