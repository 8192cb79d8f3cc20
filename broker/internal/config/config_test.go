package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// env is a test environment.
type env map[string]string

func (e env) list() []string {
	l := []string{} // non-nil: an empty environment, not the process's
	for k, v := range e {
		l = append(l, k+"="+v)
	}
	return l
}

// setup returns LoadOptions that search a fresh working directory holding
// file (none if empty) and a system path that does not exist, with
// environment e and host name "host-1".
func setup(t *testing.T, file string, e env) LoadOptions {
	t.Helper()
	dir := t.TempDir()
	if file != "" {
		writeFile(t, filepath.Join(dir, FileName), file)
	}
	return LoadOptions{
		Dir:        dir,
		SystemPath: filepath.Join(dir, "etc", "fila.toml"),
		Env:        e.list(),
		Hostname:   func() (string, error) { return "host-1", nil },
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, opts LoadOptions) (Config, *Sources) {
	t.Helper()
	c, src, err := Load(opts)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	return c, src
}

// TestDefaultsNoFile loads with no file and no variables and checks every
// key of the design's sample, and the keys added to it, against its
// documented default.
func TestDefaultsNoFile(t *testing.T) {
	c, src := mustLoad(t, setup(t, "", nil))
	want := Default()
	want.Server.NodeID = "host-1"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load() = %+v; want %+v", c, want)
	}
	if src.File() != "" {
		t.Errorf("Sources.File() = %q; want \"\"", src.File())
	}
	defaults := map[string]string{
		"server.listen_addr":                 `"0.0.0.0:5555"`,
		"server.node_id":                     `"host-1"`,
		"server.max_message_size":            `"16MB"`,
		"server.max_frame_size":              `"16MB"`,
		"server.max_connections":             `10000`,
		"server.max_unsettled":               `1000`,
		"server.max_handshaking":             `1024`,
		"server.max_connections_per_address": `1000`,
		"server.handshake_failure_rate":      `10`,
		"server.handshake_failure_burst":     `20`,
		"server.handshake_timeout":           `"10s"`,
		"server.reassembly_budget":           `"256MB"`,
		"server.max_outbound_size":           `"4MB"`,
		"server.max_enqueue_in_flight":       `"2MB"`,
		"server.bulk_enqueue_in_flight":      `"32KB"`,
		"server.write_timeout":               `"30s"`,
		"server.frame_read_timeout":          `"30s"`,
		"server.max_batch_size":              `4096`,
		"server.memory_limit":                `"0B"`,
		"server.gc_percent":                  `0`,
		"server.shutdown_timeout":            `"10s"`,
		"storage.data_dir":                   `"data"`,
		"storage.segment_size":               `"8MB"`,
		"storage.cache_size":                 `"16MB"`,
		"storage.repair":                     `false`,
		"storage.unsafe_no_sync":             `false`,
		"storage.reserve_size":               `"64MB"`,
		"cluster.node_id":                    `0`,
		"cluster.cluster_id":                 `"fila"`,
		"cluster.peer_listen_addr":           `"0.0.0.0:5556"`,
		"cluster.advertise_addr":             `""`,
		"cluster.peers":                      `[]`,
		"cluster.join":                       `false`,
		"cluster.replication_factor":         `3`,
		"cluster.tick_interval":              `"100ms"`,
		"cluster.election_ticks":             `10`,
		"cluster.heartbeat_ticks":            `1`,
		"cluster.snapshot_log_size":          `"64MB"`,
		"cluster.meta_snapshot_entries":      `4096`,
		"cluster.snapshot_rate":              `"0B"`,
		"scheduler.policy":                   `"stfq"`,
		"scheduler.latency_budget":           `10`,
		"scheduler.latency_idle":             `"100ms"`,
		"scheduler.quantum":                  `1000`,
		"queue.visibility_timeout":           `"30s"`,
		"queue.max_attempts":                 `3`,
		"queue.backoff_base":                 `"1s"`,
		"queue.backoff_max":                  `"1m"`,
		"queue.dedup_window":                 `"5m"`,
		"queue.max_lease_extension":          `"12h"`,
		"lua.default_timeout":                `"10ms"`,
		"lua.memory_limit":                   `"8MB"`,
		"lua.circuit_breaker_threshold":      `3`,
		"lua.circuit_breaker_cooldown":       `"30s"`,
		"auth.enabled":                       `false`,
		"auth.bootstrap_apikey":              `""`,
		"tls.cert_file":                      `""`,
		"tls.key_file":                       `""`,
		"tls.client_ca_file":                 `""`,
		"telemetry.otlp_endpoint":            `""`,
		"telemetry.metrics_top_keys":         "20",
		"telemetry.otlp_interval":            `"10s"`,
		"telemetry.trace_sample_ratio":       "0.01",
		"http.listen_addr":                   `""`,
		"http.pprof":                         `false`,
		"log.level":                          `"info"`,
		"log.format":                         `"text"`,
	}
	if len(defaults) != len(fields) {
		t.Errorf("the test lists %d keys; the table has %d", len(defaults), len(fields))
	}
	for i := range fields {
		f := &fields[i]
		if got := f.format(&c); got != defaults[f.key()] {
			t.Errorf("default %s = %s; want %s", f.key(), got, defaults[f.key()])
		}
		wantSrc := Source{Origin: FromDefault}
		if f.key() == "server.node_id" {
			wantSrc.Name = "hostname"
		}
		if got := src.Of(f.key()); got != wantSrc {
			t.Errorf("Sources.Of(%q) = %v; want %v", f.key(), got, wantSrc)
		}
	}
}

const fullFile = `
[server]
listen_addr = "127.0.0.1:6000"
node_id = "node-a"
max_message_size = "1MB"
max_frame_size = "64KiB"
max_connections = 50
max_handshaking = 64
max_connections_per_address = 20
handshake_failure_rate = 2
handshake_failure_burst = 5
handshake_timeout = "3s"
max_unsettled = 200
reassembly_budget = "64MB"
max_outbound_size = "1MB"
max_enqueue_in_flight = "512KB"
bulk_enqueue_in_flight = "16KB"
write_timeout = "5s"
frame_read_timeout = "7s"
max_batch_size = 512
memory_limit = "1GB"
gc_percent = 80
shutdown_timeout = "2s"

[storage]
data_dir = "/var/lib/fila"
segment_size = "128MB"
cache_size = "0"
repair = true
reserve_size = "0"
unsafe_no_sync = true

[cluster]
node_id = 2
cluster_id = "prod-eu"
peer_listen_addr = "127.0.0.1:6001"
advertise_addr = "broker-2.example.com:6000"
peers = ["1@10.0.0.1:6001", "2@127.0.0.1:6001", "3@[fd00::3]:6001"]
join = true
replication_factor = 5
tick_interval = "50ms"
election_ticks = 20
heartbeat_ticks = 2
snapshot_log_size = "16MB"
meta_snapshot_entries = 1000
snapshot_rate = "32MB"

[scheduler]
policy = "stfq"
latency_budget = 20
latency_idle = "1s"
quantum = 4096

[queue]
visibility_timeout = "45s"
max_attempts = 5
backoff_base = "250ms"
backoff_max = "2m"
dedup_window = "1h"
max_lease_extension = "2h"

[lua]
default_timeout = "5ms"
memory_limit = "16MB"
circuit_breaker_threshold = 10
circuit_breaker_cooldown = "1m"

[auth]
enabled = true
bootstrap_apikey = "bootstrap-secret-0123456789"

[tls]
cert_file = "server.crt"
key_file = "server.key"
client_ca_file = "clients.pem"

[http]
listen_addr = "127.0.0.1:9555"
pprof = true

[telemetry]
otlp_endpoint = "collector:4318"
otlp_interval = "30s"
trace_sample_ratio = 0.25
metrics_top_keys = 50

[log]
level = "debug"
format = "json"
`

func fullConfig() Config {
	return Config{
		Server: ServerConfig{
			ListenAddr: "127.0.0.1:6000", NodeID: "node-a", MaxMessageSize: 1 << 20,
			MaxFrameSize: 64 << 10, MaxConnections: 50, MaxUnsettled: 200, MaxHandshaking: 64, MaxConnectionsPerAddress: 20,
			HandshakeFailureRate: 2, HandshakeFailureBurst: 5, HandshakeTimeout: 3 * time.Second,
			ReassemblyBudget: 64 << 20, MaxOutboundSize: 1 << 20, MaxEnqueueInFlight: 512 << 10, BulkEnqueueInFlight: 16 << 10, WriteTimeout: 5 * time.Second, FrameReadTimeout: 7 * time.Second,
			MaxBatchSize: 512, MemoryLimit: 1 << 30, GCPercent: 80, ShutdownTimeout: 2 * time.Second,
		},
		Storage: StorageConfig{
			DataDir: "/var/lib/fila", SegmentSize: 128 << 20, CacheSize: 0, Repair: true, UnsafeNoSync: true,
		},
		Cluster: ClusterConfig{
			NodeID: 2, ClusterID: "prod-eu", PeerListenAddr: "127.0.0.1:6001", AdvertiseAddr: "broker-2.example.com:6000",
			Peers:             map[uint64]string{1: "10.0.0.1:6001", 2: "127.0.0.1:6001", 3: "[fd00::3]:6001"},
			Join:              true,
			ReplicationFactor: 5, TickInterval: 50 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
			SnapshotLogSize: 16 * Megabyte, MetaSnapshotEntries: 1000, SnapshotRate: 32 * Megabyte,
		},
		Scheduler: SchedulerConfig{Policy: "stfq", LatencyBudget: 20, LatencyIdle: time.Second, Quantum: 4096},
		Queue: QueueConfig{
			VisibilityTimeout: 45 * time.Second, MaxAttempts: 5, BackoffBase: 250 * time.Millisecond,
			BackoffMax: 2 * time.Minute, DedupWindow: time.Hour, MaxLeaseExtension: 2 * time.Hour,
		},
		Lua: LuaConfig{
			DefaultTimeout: 5 * time.Millisecond, MemoryLimit: 16 << 20,
			CircuitBreakerThreshold: 10, CircuitBreakerCooldown: time.Minute,
		},
		Auth:      AuthConfig{Enabled: true, BootstrapAPIKey: "bootstrap-secret-0123456789"},
		TLS:       TLSConfig{CertFile: "server.crt", KeyFile: "server.key", ClientCAFile: "clients.pem"},
		HTTP:      HTTPConfig{ListenAddr: "127.0.0.1:9555", Pprof: true},
		Telemetry: TelemetryConfig{OTLPEndpoint: "collector:4318", OTLPInterval: 30 * time.Second, TraceSampleRatio: 0.25, MetricsTopKeys: 50},
		Log:       LogConfig{Level: slog.LevelDebug, Format: FormatJSON},
	}
}

func TestFileValues(t *testing.T) {
	opts := setup(t, fullFile, nil)
	c, src := mustLoad(t, opts)
	if want := fullConfig(); !reflect.DeepEqual(c, want) {
		t.Errorf("Load() = %+v; want %+v", c, want)
	}
	path := filepath.Join(opts.Dir, FileName)
	if src.File() != path {
		t.Errorf("Sources.File() = %q; want %q", src.File(), path)
	}
	for i := range fields {
		want := Source{Origin: FromFile, Name: path}
		if got := src.Of(fields[i].key()); got != want {
			t.Errorf("Sources.Of(%q) = %v; want %v", fields[i].key(), got, want)
		}
	}
}

func TestFileSearchOrder(t *testing.T) {
	t.Run("working directory before system path", func(t *testing.T) {
		opts := setup(t, "[scheduler]\nquantum = 1\n", nil)
		writeFile(t, opts.SystemPath, "[scheduler]\nquantum = 2\n")
		c, src := mustLoad(t, opts)
		if c.Scheduler.Quantum != 1 || src.File() != filepath.Join(opts.Dir, FileName) {
			t.Errorf("Load() quantum = %d from %q; want 1 from the working directory", c.Scheduler.Quantum, src.File())
		}
	})
	t.Run("system path when the working directory has none", func(t *testing.T) {
		opts := setup(t, "", nil)
		writeFile(t, opts.SystemPath, "[scheduler]\nquantum = 2\n")
		c, src := mustLoad(t, opts)
		if c.Scheduler.Quantum != 2 || src.File() != opts.SystemPath {
			t.Errorf("Load() quantum = %d from %q; want 2 from %q", c.Scheduler.Quantum, src.File(), opts.SystemPath)
		}
		if got := src.Of("scheduler.quantum"); got.Origin != FromFile || got.Name != opts.SystemPath {
			t.Errorf("Sources.Of(scheduler.quantum) = %v; want file %s", got, opts.SystemPath)
		}
	})
	t.Run("explicit path only", func(t *testing.T) {
		opts := setup(t, "[scheduler]\nquantum = 1\n", nil)
		opts.Path = filepath.Join(t.TempDir(), "other.toml")
		writeFile(t, opts.Path, "[scheduler]\nquantum = 3\n")
		c, src := mustLoad(t, opts)
		if c.Scheduler.Quantum != 3 || src.File() != opts.Path {
			t.Errorf("Load() quantum = %d from %q; want 3 from %q", c.Scheduler.Quantum, src.File(), opts.Path)
		}
	})
	t.Run("explicit path missing", func(t *testing.T) {
		opts := setup(t, "[scheduler]\nquantum = 1\n", nil)
		opts.Path = filepath.Join(t.TempDir(), "missing.toml")
		_, _, err := Load(opts)
		if err == nil || !strings.Contains(err.Error(), opts.Path) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load(Path: missing) error = %v; want a not-exist error naming %s", err, opts.Path)
		}
	})
	t.Run("unreadable file is an error, not skipped", func(t *testing.T) {
		opts := setup(t, "", nil)
		if err := os.Mkdir(filepath.Join(opts.Dir, FileName), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Load(opts); err == nil {
			t.Errorf("Load() with a directory named %s = nil error; want an error", FileName)
		}
	})
}

func TestEnvOverFile(t *testing.T) {
	file := "[scheduler]\nquantum = 2000\n[queue]\nvisibility_timeout = \"45s\"\n"
	opts := setup(t, file, env{
		"FILA_SCHEDULER_QUANTUM":       "3000",
		"FILA_LOG_LEVEL":               "warn",
		"FILA_STORAGE_UNSAFE_NO_SYNC":  "true",
		"FILA_SERVER_MAX_MESSAGE_SIZE": "2MB",
		"FILA_AUTH_BOOTSTRAP_APIKEY":   "env-bootstrap-secret-abcdef",
		"FILA_ADDR":                    "localhost:5555", // the CLI's: ignored
		"FILA_API_KEY":                 "cli-secret",     // the CLI's: ignored
		"FILA":                         "x",
		"fila_scheduler_quantum":       "1", // not upper case: not ours
		"OTHER_FILA_SCHEDULER_QUANTUM": "1",
	})
	c, src := mustLoad(t, opts)
	checks := []struct {
		key  string
		got  any
		want any
		src  Source
	}{
		{"scheduler.quantum", c.Scheduler.Quantum, int64(3000), Source{FromEnv, "FILA_SCHEDULER_QUANTUM"}},
		{"queue.visibility_timeout", c.Queue.VisibilityTimeout, 45 * time.Second, Source{FromFile, filepath.Join(opts.Dir, FileName)}},
		{"log.level", c.Log.Level, slog.LevelWarn, Source{FromEnv, "FILA_LOG_LEVEL"}},
		{"storage.unsafe_no_sync", c.Storage.UnsafeNoSync, true, Source{FromEnv, "FILA_STORAGE_UNSAFE_NO_SYNC"}},
		{"server.max_message_size", c.Server.MaxMessageSize, int64(2 << 20), Source{FromEnv, "FILA_SERVER_MAX_MESSAGE_SIZE"}},
		{"auth.bootstrap_apikey", c.Auth.BootstrapAPIKey, Secret("env-bootstrap-secret-abcdef"), Source{FromEnv, "FILA_AUTH_BOOTSTRAP_APIKEY"}},
		{"server.listen_addr", c.Server.ListenAddr, "0.0.0.0:5555", Source{FromDefault, ""}},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v; want %v", ck.key, ck.got, ck.want)
		}
		if got := src.Of(ck.key); got != ck.src {
			t.Errorf("Sources.Of(%q) = %v; want %v", ck.key, got, ck.src)
		}
	}
}

func TestEnvNames(t *testing.T) {
	for _, tt := range []struct{ key, env string }{
		{"scheduler.quantum", "FILA_SCHEDULER_QUANTUM"},
		{"lua.circuit_breaker_threshold", "FILA_LUA_CIRCUIT_BREAKER_THRESHOLD"},
		{"auth.bootstrap_apikey", "FILA_AUTH_BOOTSTRAP_APIKEY"},
		{"tls.client_ca_file", "FILA_TLS_CLIENT_CA_FILE"},
	} {
		if got := fieldIndex[tt.key].env(); got != tt.env {
			t.Errorf("env(%q) = %q; want %q", tt.key, got, tt.env)
		}
	}
}

// TestErrors covers every way a file or a variable can be refused: each
// error names the key (or variable), the value and the accepted form.
func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  env
		want []string // substrings of the error
	}{
		{"unknown key", "[server]\nlisten_adr = \"x:1\"\n", nil,
			[]string{`unknown key server.listen_adr = "x:1"`, "(file ", "did you mean listen_addr?"}},
		{"unknown key, no near match", "[queue]\ncolour = \"blue\"\n", nil,
			[]string{`unknown key queue.colour = "blue"`, "want a key of [queue]: visibility_timeout, max_attempts"}},
		{"unknown section", "[servr]\nlisten_addr = \"x:1\"\n", nil,
			[]string{"unknown key servr = a table", "want a section: [server], [storage]", "did you mean [server]?"}},
		{"top-level scalar", "quantum = 5\n", nil,
			[]string{"unknown key quantum = 5", "want a section"}},
		{"section not a table", "server = 5\n", nil,
			[]string{"server = 5", "want a table: [server]"}},
		{"nested table", "[server.tls]\ncert_file = \"a\"\n", nil,
			[]string{"unknown key server.tls = a table"}},
		{"integer as string", "[scheduler]\nquantum = \"1000\"\n", nil,
			[]string{`scheduler.quantum = "1000"`, "want an integer"}},
		{"float for integer", "[scheduler]\nquantum = 1.5\n", nil,
			[]string{`scheduler.quantum = 1.5`, "want an integer"}},
		{"duration as integer", "[queue]\nvisibility_timeout = 30\n", nil,
			[]string{"queue.visibility_timeout = 30", `want a duration`, `such as "30s"`}},
		{"duration without unit", "[queue]\nvisibility_timeout = \"30\"\n", nil,
			[]string{`queue.visibility_timeout = "30"`, `want a duration`}},
		{"size as integer", "[lua]\nmemory_limit = 8388608\n", nil,
			[]string{"lua.memory_limit = 8388608", "want a size", `such as "64MB"`}},
		{"size with bad unit", "[lua]\nmemory_limit = \"8XB\"\n", nil,
			[]string{`lua.memory_limit = "8XB"`, "want a size"}},
		{"bool as string", "[auth]\nenabled = \"yes\"\n", nil,
			[]string{`auth.enabled = "yes"`, "want true or false"}},
		{"bad level", "[log]\nlevel = \"verbose\"\n", nil,
			[]string{`log.level = "verbose"`, `want one of "debug", "info", "warn", "error"`}},
		{"bad format", "[log]\nformat = \"xml\"\n", nil,
			[]string{`log.format = "xml"`, `want "text" or "json"`}},
		{"unknown policy", "[scheduler]\npolicy = \"fifo\"\n", nil,
			[]string{`scheduler.policy = "fifo"`, `want "drr" or "stfq"`}},
		{"quantum zero", "[scheduler]\nquantum = 0\n", nil,
			[]string{"scheduler.quantum = 0", "want an integer from 1 to 1073741824"}},
		{"max attempts zero", "[queue]\nmax_attempts = 0\n", nil,
			[]string{"queue.max_attempts = 0", "want an integer from 1 to 1000000"}},
		{"huge int for int field", "[queue]\nmax_attempts = 9223372036854775807\n", nil,
			[]string{"queue.max_attempts = 9223372036854775807", "want an integer from 1 to 1000000"}},
		{"frame too small", "[server]\nmax_frame_size = \"1KB\"\n", nil,
			[]string{`server.max_frame_size = "1KB"`, "want a size from 4KB to 256MB"}},
		{"message too large", "[server]\nmax_message_size = \"1GB\"\n", nil,
			[]string{`server.max_message_size = "1GB"`, "want a size from 1B to 256MB"}},
		{"zero visibility timeout", "[queue]\nvisibility_timeout = \"0s\"\n", nil,
			[]string{`queue.visibility_timeout = "0s"`, "want a duration from 1ms to max_lease_extension (12h)"}},
		{"zero max lease extension", "[queue]\nmax_lease_extension = \"0s\"\n", nil,
			[]string{`queue.max_lease_extension = "0s"`, "want a duration from 1ms to 168h"}},
		{"max lease extension too long", "", env{"FILA_QUEUE_MAX_LEASE_EXTENSION": "169h"},
			[]string{`queue.max_lease_extension = "169h" (env FILA_QUEUE_MAX_LEASE_EXTENSION): want a duration from 1ms to 168h`}},
		{"visibility timeout above max lease extension", "[queue]\nvisibility_timeout = \"2h\"\nmax_lease_extension = \"1h\"\n", nil,
			[]string{`queue.visibility_timeout = "2h"`, "want a duration from 1ms to max_lease_extension (1h)"}},
		{"dedup window too long", "[queue]\ndedup_window = \"720h\"\n", nil,
			[]string{`queue.dedup_window = "720h"`, "want a duration from 1ms to 168h"}},
		{"backoff base too long", "[queue]\nbackoff_base = \"48h\"\nbackoff_max = \"48h\"\n", nil,
			[]string{`queue.backoff_base = "48h"`, "want a duration from 1ms to 24h", `queue.backoff_max = "48h"`, "want a duration from backoff_base (48h) to 24h"}},
		{"negative shutdown timeout", "[server]\nshutdown_timeout = \"-1s\"\n", nil,
			[]string{`server.shutdown_timeout = "-1s"`, "want a duration of zero or more"}},
		{"backoff max below base", "[queue]\nbackoff_base = \"10s\"\nbackoff_max = \"5s\"\n", nil,
			[]string{`queue.backoff_max = "5s"`, "want a duration from backoff_base (10s) to 24h"}},
		{"bad listen addr", "[server]\nlisten_addr = \"5555\"\n", nil,
			[]string{`server.listen_addr = "5555"`, "want host:port"}},
		{"bad node id", "[server]\nnode_id = \"has space\"\n", nil,
			[]string{`server.node_id = "has space"`, `letters, digits and ".-_:"`}},
		{"empty data dir", "[storage]\ndata_dir = \"\"\n", nil,
			[]string{`storage.data_dir = ""`, "want a non-empty string"}},
		{"cert without key", "[tls]\ncert_file = \"a.crt\"\n", nil,
			[]string{`tls.key_file = ""`, "required when tls.cert_file is set"}},
		{"key without cert", "[tls]\nkey_file = \"a.key\"\n", nil,
			[]string{`tls.cert_file = ""`, "required when tls.key_file is set"}},
		{"client CA without TLS", "[tls]\nclient_ca_file = \"ca.pem\"\n", nil,
			[]string{`tls.client_ca_file = "ca.pem"`, "mTLS needs TLS"}},
		{"short bootstrap key", "[auth]\nbootstrap_apikey = \"short\"\n", nil,
			[]string{`auth.bootstrap_apikey = "<redacted>"`, "at least 16 bytes"}},
		{"otlp endpoint with a path but no scheme", "[telemetry]\notlp_endpoint = \"collector/v1\"\n", nil,
			[]string{`telemetry.otlp_endpoint = "collector/v1"`, "want empty, host:port, or an http:// or https:// URL with a host"}},
		{"otlp endpoint grpc scheme", "", env{"FILA_TELEMETRY_OTLP_ENDPOINT": "grpc://collector:4317"},
			[]string{`telemetry.otlp_endpoint = "grpc://collector:4317" (env FILA_TELEMETRY_OTLP_ENDPOINT)`, "want empty, host:port"}},
		{"pprof without the listener", "[http]\npprof = true\n", nil,
			[]string{"http.pprof = true", "want false unless http.listen_addr is set"}},
		{"sample ratio above 1", "[telemetry]\ntrace_sample_ratio = 1.5\n", nil,
			[]string{"telemetry.trace_sample_ratio = 1.5", "want a number from 0 to 1"}},
		{"sample ratio not a number", "", env{"FILA_TELEMETRY_TRACE_SAMPLE_RATIO": "half"},
			[]string{`telemetry.trace_sample_ratio = "half" (env FILA_TELEMETRY_TRACE_SAMPLE_RATIO): want a number`}},
		{"otlp interval too short", "[telemetry]\notlp_interval = \"10ms\"\n", nil,
			[]string{`telemetry.otlp_interval = "10ms"`, "want a duration from 100ms to 1h"}},
		{"toml syntax", "[server]\nlisten_addr = \n", nil,
			[]string{"config: parse ", "fila.toml: line 2: "}},
		{"unknown variable", "", env{"FILA_SERVER_LISTEN_ADR": "x:1"},
			[]string{`unknown key server.listen_adr = "x:1" (env FILA_SERVER_LISTEN_ADR)`, "did you mean listen_addr (FILA_SERVER_LISTEN_ADDR)?"}},
		{"variable with lower-case key", "", env{"FILA_SERVER_listen_addr": "x:1"},
			[]string{"unknown key server.listen_addr", "(env FILA_SERVER_listen_addr)"}},
		{"bad variable value", "", env{"FILA_QUEUE_MAX_ATTEMPTS": "many"},
			[]string{`queue.max_attempts = "many" (env FILA_QUEUE_MAX_ATTEMPTS): want an integer`}},
		{"bad variable duration", "", env{"FILA_QUEUE_BACKOFF_MAX": "1 minute"},
			[]string{`queue.backoff_max = "1 minute" (env FILA_QUEUE_BACKOFF_MAX): want a duration`}},
		{"variable out of range", "", env{"FILA_SCHEDULER_QUANTUM": "0"},
			[]string{`scheduler.quantum = "0" (env FILA_SCHEDULER_QUANTUM): want an integer from 1`}},
		{"every problem reported", "[server]\nbogus = 1\n[queue]\nmax_attempts = 0\n", env{"FILA_LOG_FORMAT": "xml"},
			[]string{"unknown key server.bogus", "queue.max_attempts = 0", `log.format = "xml"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, src, err := Load(setup(t, tt.file, tt.env))
			if err == nil {
				t.Fatalf("Load(%q, %v) = %+v, nil; want an error", tt.file, tt.env, c)
			}
			if src != nil {
				t.Errorf("Load(%q) returned Sources with an error", tt.file)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load(%q, %v) error =\n%v\nwant it to contain %q", tt.file, tt.env, err, w)
				}
			}
		})
	}
}

func TestKeyErrorFields(t *testing.T) {
	opts := setup(t, "[queue]\nvisibility_timeout = \"soon\"\n", nil)
	_, _, err := Load(opts)
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("Load() error = %v; want a *KeyError", err)
	}
	want := KeyError{
		Key: "queue.visibility_timeout", Value: `"soon"`,
		Source: Source{FromFile, filepath.Join(opts.Dir, FileName)}, Want: durationForm,
	}
	if *ke != want {
		t.Errorf("KeyError = %+v; want %+v", *ke, want)
	}
}

func TestHostnameUnavailable(t *testing.T) {
	opts := setup(t, "", nil)
	opts.Hostname = func() (string, error) { return "", errors.New("no uts namespace") }
	if _, _, err := Load(opts); err == nil || !strings.Contains(err.Error(), "server.node_id") ||
		!strings.Contains(err.Error(), "no uts namespace") {
		t.Errorf("Load() error = %v; want one naming server.node_id and the cause", err)
	}
	opts = setup(t, "[server]\nnode_id = \"n1\"\n", nil)
	opts.Hostname = func() (string, error) { t.Error("Hostname called with node_id set"); return "", nil }
	if c, _ := mustLoad(t, opts); c.Server.NodeID != "n1" {
		t.Errorf("NodeID = %q; want \"n1\"", c.Server.NodeID)
	}
}

// TestSecretsNeverShown sets the bootstrap key in a file and the
// environment and looks for it in everything the package writes.
func TestSecretsNeverShown(t *testing.T) {
	const secret = "Sup3r-Secret-Bootstrap-Key"
	c, src := mustLoad(t, setup(t, "[auth]\nbootstrap_apikey = \""+secret+"\"\n", nil))
	if string(c.Auth.BootstrapAPIKey) != secret {
		t.Fatalf("BootstrapAPIKey = %q; want the configured secret", string(c.Auth.BootstrapAPIKey))
	}
	var out bytes.Buffer
	if err := c.Print(&out, src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `bootstrap_apikey = "<redacted>"`) {
		t.Errorf("Print() = %s; want bootstrap_apikey = \"<redacted>\"", out.String())
	}
	c.Logger(&out).Info("boot", "config", c, "auth", c.Auth)
	c.Log.Format = FormatJSON
	c.Logger(&out).Info("boot", "config", c, "key", c.Auth.BootstrapAPIKey)
	js, _ := json.Marshal(c)
	out.Write(js)
	fmt.Fprintf(&out, "%v %+v %#v %s %q", c, c, c, c.Auth.BootstrapAPIKey, c.Auth.BootstrapAPIKey)
	if strings.Contains(out.String(), secret) {
		t.Errorf("output shows the secret:\n%s", out.String())
	}

	leaks := []struct {
		name string
		file string
		env  env
	}{
		{"short in file", "[auth]\nbootstrap_apikey = \"s3cr3t\"\n", nil},
		{"short in env", "", env{"FILA_AUTH_BOOTSTRAP_APIKEY": "s3cr3t"}},
		{"wrong type", "[auth]\nbootstrap_apikey = 735173\n", nil},
		{"syntax error", "[auth]\nbootstrap_apikey = s3cr3t\n", nil},
		{"unterminated", "[auth]\nbootstrap_apikey = \"s3cr3t\n", nil},
		{"misspelled key", "[auth]\nbootstrap_api_key = \"s3cr3t\"\n", nil},
		{"misspelled variable", "", env{"FILA_AUTH_BOOTSTRAP_API_KEY": "s3cr3t"}},
	}
	for _, tt := range leaks {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Load(setup(t, tt.file, tt.env))
			if err == nil {
				t.Fatalf("Load(%q) = nil error; want one", tt.file)
			}
			if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "735173") {
				t.Errorf("Load(%q) error = %v; shows the secret", tt.file, err)
			}
			if !strings.Contains(err.Error(), "bootstrap") {
				t.Errorf("Load(%q) error = %v; want it to name the key", tt.file, err)
			}
		})
	}
}

// TestPrintRoundTrip checks that --print-config output is a configuration
// file that loads back to the same configuration.
func TestPrintRoundTrip(t *testing.T) {
	for _, file := range []string{"", fullFile} {
		c, src := mustLoad(t, setup(t, file, env{"FILA_SCHEDULER_QUANTUM": "7"}))
		var out bytes.Buffer
		if err := c.Print(&out, src); err != nil {
			t.Fatal(err)
		}
		printed := out.String()
		if c.Auth.BootstrapAPIKey != "" {
			// Print redacts the secret; put it back to load the output.
			printed = strings.Replace(printed, `"<redacted>"`, quote(string(c.Auth.BootstrapAPIKey)), 1)
		}
		back, _ := mustLoad(t, setup(t, printed, nil))
		if !reflect.DeepEqual(back, c) {
			t.Errorf("Load(Print(c)) = %+v; want %+v\nprinted:\n%s", back, c, out.String())
		}
	}
}

func TestPrintSources(t *testing.T) {
	opts := setup(t, "[scheduler]\nquantum = 2000\n", env{"FILA_LOG_LEVEL": "debug"})
	c, src := mustLoad(t, opts)
	var out bytes.Buffer
	if err := c.Print(&out, src); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(opts.Dir, FileName)
	for _, want := range []string{
		"\n[server]\nlisten_addr = \"0.0.0.0:5555\"",
		`node_id = "host-1"`, "# default (hostname)\n",
		"quantum = 2000          # file " + path + "\n",
		`level = "debug"  # env FILA_LOG_LEVEL` + "\n",
		`format = "text"  # default` + "\n",
		"# Read from " + path,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Print() =\n%s\nwant it to contain %q", out.String(), want)
		}
	}
	out.Reset()
	if err := c.Print(&out, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "# default") {
		t.Errorf("Print(nil sources) =\n%s\nwant no source comments", out.String())
	}
}

func TestLogger(t *testing.T) {
	c := Default()
	var out bytes.Buffer
	c.Logger(&out).Info("queue created", "queue", "orders")
	if got := out.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "queue=orders") ||
		strings.Count(got, "\n") != 1 {
		t.Errorf("text Logger wrote %q; want one key=value line with queue=orders", got)
	}

	out.Reset()
	c.Log = LogConfig{Level: slog.LevelWarn, Format: FormatJSON}
	l := c.Logger(&out)
	l.Info("dropped")
	l.Warn("throttled", "queue", "orders", "key", "provider:stripe")
	var ev map[string]any
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		t.Fatalf("json Logger wrote %q: %v", out.String(), err)
	}
	if ev["msg"] != "throttled" || ev["queue"] != "orders" || ev["key"] != "provider:stripe" || ev["level"] != "WARN" {
		t.Errorf("json Logger wrote %v; want the warn event with queue and key", ev)
	}
}

func TestSecretFormatting(t *testing.T) {
	for _, tt := range []struct {
		s    Secret
		want string
	}{{"", ""}, {"abc", "<redacted>"}} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Secret.String() = %q; want %q", got, tt.want)
		}
		if got := fmt.Sprintf("%v|%s|%q|%#v", tt.s, tt.s, tt.s, tt.s); strings.Contains(got, "abc") {
			t.Errorf("fmt of Secret = %q; shows the secret", got)
		}
	}
}

// TestDocsListEveryKey keeps docs/configuration.md in step with the key
// table: every key appears in a table row with its variable and default.
func TestDocsListEveryKey(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("read docs: %v", err)
	}
	c := Default()
	c.Server.NodeID = "" // documented as the host name
	rows := make(map[string]string)
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `") {
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			rows[name] = line
		}
	}
	section := ""
	for i := range fields {
		f := &fields[i]
		if f.section != section {
			section = f.section
			if !strings.Contains(string(doc), "### ["+section+"]") {
				t.Errorf("docs/configuration.md has no heading ### [%s]", section)
			}
		}
		row, ok := rows[f.key()]
		if !ok {
			t.Errorf("docs/configuration.md has no row for `%s`", f.key())
			continue
		}
		if !strings.Contains(row, "`"+f.env()+"`") {
			t.Errorf("docs row for %s lacks `%s`: %s", f.key(), f.env(), row)
		}
		derived := f.key() == "server.node_id" || f.key() == "cluster.advertise_addr"
		if def := f.format(&c); !strings.Contains(row, "`"+def+"`") && !derived {
			t.Errorf("docs row for %s lacks its default `%s`: %s", f.key(), def, row)
		}
	}
}

// TestReassemblyBudgetFollowsMemoryLimit: with server.memory_limit set, the
// reassembly budget's default is a quarter of it when that is less than
// 256MB; a budget that was set is kept.
func TestReassemblyBudgetFollowsMemoryLimit(t *testing.T) {
	cases := []struct {
		env  env
		want int64
		src  Source
	}{
		{env{}, 256 << 20, Source{FromDefault, ""}},
		{env{"FILA_SERVER_MEMORY_LIMIT": "448MB"}, 112 << 20, Source{FromDefault, "a quarter of server.memory_limit"}},
		{env{"FILA_SERVER_MEMORY_LIMIT": "4GB"}, 256 << 20, Source{FromDefault, ""}},
		{env{"FILA_SERVER_MEMORY_LIMIT": "448MB", "FILA_SERVER_REASSEMBLY_BUDGET": "300MB"}, 300 << 20,
			Source{FromEnv, "FILA_SERVER_REASSEMBLY_BUDGET"}},
	}
	for _, tc := range cases {
		c, src := mustLoad(t, setup(t, "", tc.env))
		if c.Server.ReassemblyBudget != tc.want || src.Of("server.reassembly_budget") != tc.src {
			t.Errorf("with %v: reassembly budget %d from %v; want %d from %v",
				tc.env, c.Server.ReassemblyBudget, src.Of("server.reassembly_budget"), tc.want, tc.src)
		}
	}
}

func TestOTLPBase(t *testing.T) {
	for ep, want := range map[string]string{
		"collector:4318":                 "http://collector:4318",
		"[::1]:4318":                     "http://[::1]:4318",
		"http://collector:4318":          "http://collector:4318",
		"https://otel.example.com/otlp/": "https://otel.example.com/otlp",
	} {
		got, err := TelemetryConfig{OTLPEndpoint: ep}.OTLPBase()
		if err != nil || got != want {
			t.Errorf("OTLPBase(%q) = %q, %v; want %q", ep, got, err, want)
		}
	}
	for _, ep := range []string{"", "collector", "collector:4318/v1", "ftp://x", "http://", "http://c:1/?a=b"} {
		if got, err := (TelemetryConfig{OTLPEndpoint: ep}).OTLPBase(); err == nil {
			t.Errorf("OTLPBase(%q) = %q; want an error", ep, got)
		}
	}
}
