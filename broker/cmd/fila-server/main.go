// Command fila-server runs the Fila message broker.
//
// It needs no configuration file: every setting has a default, data goes
// to ./data, and clients connect on port 5555. A fila.toml in the working
// directory or /etc/fila/fila.toml (or --config) overrides the defaults,
// FILA_<SECTION>_<KEY> environment variables override the file, and the
// flags --listen, --data-dir and --http override the environment. See
// docs/configuration.md.
//
// Usage:
//
//	fila-server [--config PATH] [--listen ADDR] [--data-dir DIR] [--http ADDR]
//	fila-server --print-config | --version | --help
//
// Arguments other than these flags are refused (exit status 2).
//
// On SIGINT or SIGTERM it stops accepting, tells clients to go away, waits
// up to [server] shutdown_timeout for requests in flight, and exits 0.
//
// If the storage fails for good (a failed fsync, an I/O error other than a
// full disk), it exits at once with status 1 and one ERROR line naming the
// cause: nothing more can be made durable, and a restart recovers from the
// durable log. A full disk is not fatal: new messages are refused until
// space is freed, and everything else goes on (docs/operations.md).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/config"
	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/rtconf"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/server"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fila-server", flag.ContinueOnError)
	// Errors and usage are written below, not by the flag package.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cfgPath := fs.String("config", "", "read the configuration file `PATH` only (default: ./fila.toml, else /etc/fila/fila.toml, if present)")
	for _, kf := range keyFlags {
		fs.String(kf.name, "", kf.usage)
	}
	printConfig := fs.Bool("print-config", false, "print the effective configuration and where each value came from, then exit")
	showVersion := fs.Bool("version", false, "print the version and the protocol version, then exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		return usageError(stderr, flagError(err))
	}
	if fs.NArg() > 0 {
		arg := fs.Arg(0)
		msg := fmt.Sprintf("unexpected argument %q: fila-server takes flags only", arg)
		if fs.Lookup(arg) != nil {
			msg += fmt.Sprintf(" (did you mean --%s?)", arg)
		}
		return usageError(stderr, msg)
	}
	if *showVersion {
		fmt.Fprintln(stdout, "fila-server", version)
		fmt.Fprintln(stdout, protocolLine())
		return 0
	}
	// The flags given override the other layers; each sets its own key.
	var flags []config.FlagValue
	fs.Visit(func(f *flag.Flag) {
		for _, kf := range keyFlags {
			if kf.name == f.Name {
				flags = append(flags, config.FlagValue{Key: kf.key, Value: f.Value.String(), Flag: "--" + kf.name})
			}
		}
	})
	cfg, src, err := config.Load(config.LoadOptions{Path: *cfgPath, Dir: ".", Flags: flags})
	if err != nil {
		fmt.Fprintf(stderr, "fila-server: configuration: %v\n", err)
		return 2
	}
	if *printConfig {
		if err := cfg.Print(stdout, src); err != nil {
			fmt.Fprintln(stderr, "fila-server:", err)
			return 1
		}
		return 0
	}
	log := cfg.Logger(stderr)
	if f := src.File(); f != "" {
		log.Info("configuration file", "path", f)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("fila-server stopped", "err", err)
		return 1
	}
	return 0
}

// recoveryPause, set only by fault injection (faults_on.go), runs
// between opening the store and loading the queues.
var recoveryPause func()

// serve runs the broker until ctx is done.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := checkFirstStart(cfg); err != nil {
		return err
	}
	switch {
	case os.Getenv("GOGC") != "":
		log.Info("GOGC is set; ignoring server.gc_percent", "GOGC", os.Getenv("GOGC"))
	case cfg.Server.GCPercent == 0:
		defer startGCTuner()()
	default:
		debug.SetGCPercent(cfg.Server.GCPercent)
	}
	if limit := cfg.Server.MemoryLimit; limit > 0 {
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(limit)
			log.Info("memory limit", "bytes", limit)
		} else {
			log.Info("GOMEMLIMIT is set; ignoring server.memory_limit", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
		}
	}
	// The admin HTTP listener starts first, so that /healthz answers and
	// /readyz says "recovering" while the store and the queues load.
	obs, err := startObserver(cfg, log)
	if err != nil {
		return err
	}
	defer obs.stop()
	if err := os.MkdirAll(cfg.Storage.DataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	st, err := store.Open(cfg.Storage.DataDir, store.Options{
		SegmentSize: cfg.Storage.SegmentSize,
		CacheSize:   cacheSize(cfg.Storage.CacheSize),
		// A cluster node repairs its log at startup, whatever
		// storage.repair says: its peers hold what a repair drops, and
		// it rebuilds its replicas from them (cluster.Config.Rebuild).
		Repair:       cfg.Storage.Repair || cfg.Cluster.Enabled(),
		UnsafeNoSync: cfg.Storage.UnsafeNoSync,
		ReserveSize:  cfg.Storage.ReserveSize,
		Logger:       log.With("component", "store"),
		OnCommit:     obs.commit(),
	})
	if err != nil {
		return err
	}
	defer st.Close()
	obs.storeOpen(st)
	if recoveryPause != nil {
		recoveryPause()
	}
	if cfg.Storage.UnsafeNoSync {
		log.Warn("storage.unsafe_no_sync is set: acknowledged messages can be lost on a crash")
	}

	rt, err := rtconf.Open(storeKV{st})
	if err != nil {
		return err
	}
	hooks := node.NewHooks(hook.Limits{
		Timeout:                 cfg.Lua.DefaultTimeout,
		MemoryLimit:             cfg.Lua.MemoryLimit,
		CircuitBreakerThreshold: cfg.Lua.CircuitBreakerThreshold,
		CircuitBreakerCooldown:  cfg.Lua.CircuitBreakerCooldown,
	}, rt, log.With("component", "hook"))

	shardCfg := shard.Config{
		Sched: sched.Config{
			Policy:            cfg.Scheduler.Policy,
			LatencyBudget:     cmp.Or(cfg.Scheduler.LatencyBudget, -1), // 0: no latency lane
			LatencyIdle:       cfg.Scheduler.LatencyIdle,
			Quantum:           cfg.Scheduler.Quantum,
			VisibilityTimeout: cfg.Queue.VisibilityTimeout,
			MaxAttempts:       cfg.Queue.MaxAttempts,
			BackoffBase:       cfg.Queue.BackoffBase,
			BackoffMax:        cfg.Queue.BackoffMax,
			DedupWindow:       cfg.Queue.DedupWindow,
			MaxLeaseExtension: cfg.Queue.MaxLeaseExtension,
			MaxUnsettled:      cfg.Server.MaxUnsettled,
		},
		Logger:  log.With("component", "shard"),
		Failure: node.FailureHook(hooks),
	}
	scfg := server.Config{
		NodeID:                   cfg.Server.NodeID,
		MaxConnections:           cfg.Server.MaxConnections,
		MaxHandshaking:           cfg.Server.MaxHandshaking,
		MaxConnectionsPerAddress: cfg.Server.MaxConnectionsPerAddress,
		HandshakeFailureRate:     float64(cfg.Server.HandshakeFailureRate),
		HandshakeFailureBurst:    cfg.Server.HandshakeFailureBurst,
		HandshakeTimeout:         cfg.Server.HandshakeTimeout,
		ReassemblyBudget:         cfg.Server.ReassemblyBudget,
		MaxOutbound:              cfg.Server.MaxOutboundSize,
		MaxEnqueueInFlight:       cfg.Server.MaxEnqueueInFlight,
		BulkEnqueueInFlight:      cfg.Server.BulkEnqueueInFlight,
		WriteTimeout:             cfg.Server.WriteTimeout,
		FrameReadTimeout:         cfg.Server.FrameReadTimeout,
		MaxBatchSize:             cfg.Server.MaxBatchSize,
		MaxFrameSize:             int(cfg.Server.MaxFrameSize),
		Logger:                   log.With("component", "server"),
		Version:                  version,
		Metrics:                  obs.metrics(),
		Tracer:                   obs.traces(),
	}
	if err := configureSecurity(&scfg, cfg, storeKV{st}, log); err != nil {
		return err
	}
	// A single node has one shard; a cluster node has one per queue it
	// holds, opened by the cluster.
	var sh *shard.Shard
	var cn *cluster.Node
	if cfg.Cluster.Enabled() {
		cn, err = openCluster(cfg, st, shardCfg, hooks, scfg, rt, log)
		if err != nil {
			return err
		}
		defer cn.Close()
	} else {
		sh, err = shard.Open(shardCfg, st)
		if err != nil {
			return err
		}
		defer sh.Close()
	}
	// The node applies the stored throttle rates, then every change.
	n := node.New(node.Config{
		NodeID:         cfg.Server.NodeID,
		MaxMessageSize: int(cfg.Server.MaxMessageSize),
		Hooks:          hooks,
		Runtime:        rt,
		Keys:           scfg.Auth,
		Logger:         log.With("component", "node"),
		Cluster:        cn,
	}, sh)
	srv := server.New(scfg, n)

	ln, err := net.Listen("tcp", cfg.Server.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Ready from here: the listener queues connections until Serve
	// accepts them. (The log line below is what tests wait for.)
	obs.serving(scfg, n, hooks, cn)
	log.Info("fila-server listening", "addr", ln.Addr().String(), "node_id", cfg.Server.NodeID,
		"data_dir", cfg.Storage.DataDir, "tls", scfg.TLS != nil, "auth", scfg.RequireAuth, "version", version)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	var removed <-chan struct{} // nil in single-node mode: never ready
	if cn != nil {
		removed = cn.Removed()
	}

	var exitErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.Server.ShutdownTimeout)
	case <-removed:
		exitErr = cluster.ErrRemoved
		log.Error("shutting down: this node was removed from the cluster", "timeout", cfg.Server.ShutdownTimeout)
	case err := <-serveErr:
		return err
	case <-st.Failed():
		// Requests in flight cannot complete: exit now, without the
		// graceful shutdown. The deferred closes only release files.
		return fmt.Errorf("storage failed; exiting so that a restart recovers from the durable log: %w", st.Health().Err)
	}
	obs.shuttingDown()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if exitErr != nil {
		return exitErr
	}
	if sh != nil {
		return sh.Err()
	}
	return nil
}

func cacheSize(n int64) int64 {
	if n == 0 {
		return -1 // the config's 0 disables the cache; the store's 0 means default
	}
	return n
}

// storeKV adapts the store to the small key-value interfaces of the
// runtime config and auth stores: each change is its own durable group.
type storeKV struct{ st *store.Disk }

func (kv storeKV) Put(key, value []byte) error {
	var b store.Batch
	b.Put(key, value)
	b.RefuseWhenFull() // a new config entry or key can wait for space
	return kv.st.Apply(&b)
}

func (kv storeKV) Delete(key []byte) error {
	var b store.Batch
	b.Delete(key)
	return kv.st.Apply(&b)
}

func (kv storeKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			end = end[:i+1]
			break
		}
		if i == 0 {
			end = nil
		}
	}
	return kv.st.Scan(prefix, end, fn)
}
