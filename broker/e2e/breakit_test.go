package e2e

// The "break it" test: a normal producer and consumer run against one
// fila-server while, one abuse at a time, hostile clients do what the
// broker's limits are for (docs/security.md, "Limits on what one client
// can cost"). It reports the pair's throughput during each abuse as a
// ratio to its throughput unabused, and the broker's peak resident size,
// and checks that the broker survives and loses nothing it acknowledged.
//
// Each abuse runs in a process of its own (this test binary, running
// TestBreakItAttacker), from source addresses of its own, as attackers
// are other clients: its goroutines do not share the pair's Go scheduler,
// and the CPU it burns is measured apart. It still shares the machine's
// cores with the broker and the pair.
//
// FILA_BREAKIT_PHASE sets the length of each phase (default 5s);
// FILA_BREAKIT_OUT names a markdown file for the table;
// FILA_BREAKIT_ABUSES picks abuses by ID (comma-separated: noreads,
// partial, flood, huge, neverack; default all); FILA_BREAKIT_SERVER_ENV
// adds broker settings (space-separated FILA_<SECTION>_<KEY>=value) over
// the test's own; FILA_BREAKIT_NICE=19 runs the attackers at that
// niceness, to tell the broker's work apart from the attackers' own use
// of the CPU. `make break-it` runs it with 20s phases, at niceness 19. The ratios depend
// on the machine and its load, so the test reports them and does not
// assert them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

const (
	breakQueue = "work" // the normal pair's queue
	bulkQueue  = "bulk" // the huge batches' queue
	rssLimit   = 512 * mib

	attackerEnv   = "FILA_BREAKIT_ATTACKER" // set in an attacker process: its attacker, in JSON
	outcomePrefix = "breakit-outcome: "     // an attacker process's report, on stdout
)

// The broker's settings for the test: the defaults, with auth on, except
//   - the two timeouts that cut abusers off, 30s by default: at 2s, an
//     abuser is cut off within a phase, as it would be within a longer
//     attack;
//   - server.memory_limit, unset by default: the RSS target needs it.
//     Partial frames may hold the whole reassembly budget (256 MiB), and a
//     long phase of huge batches leaves hundreds of thousands of messages
//     pending; with Go's default pacing the heap may grow to twice what is
//     live, past 512 MiB (docs/benchmarks.md, "A million pending
//     messages"). 448MB leaves room for what the limit does not count; a
//     limit close to the live heap of a full reassembly budget (about
//     300 MiB), such as 384MB, has the collector run without pause.
var breakEnv = []string{
	"FILA_AUTH_ENABLED=true",
	"FILA_AUTH_BOOTSTRAP_APIKEY=" + bootstrap,
	"FILA_SERVER_WRITE_TIMEOUT=2s",
	"FILA_SERVER_FRAME_READ_TIMEOUT=2s",
	"FILA_SERVER_MEMORY_LIMIT=448MB",
}

// An abuse runs until ctx ends and returns what happened to its
// connections, in one line.
type abuse struct {
	id, name string
	run      func(ctx context.Context, a *attacker) string
}

var abuses = []abuse{
	{"noreads", "no reads", abuseNoReads},
	{"partial", "partial frames", abusePartialFrames},
	{"flood", "unauthenticated flood", abuseFlood},
	{"huge", "huge batches", abuseHugeBatches},
	{"neverack", "never acking, prefetch 0", abuseNeverAck},
}

// An attacker is what an abuse knows of the broker.
type attacker struct {
	Abuse    string // its ID
	Addr     string
	Key      string   // a valid API key with produce and consume on every queue
	AdminKey string   // for the abuse's own setup and checks, from 127.0.0.1
	IPs      []string // source addresses of its own: the per-address limits hit it, not the pair
}

// admin connects an administrative client.
func (a *attacker) admin(ctx context.Context) (*fila.Client, error) {
	return fila.Connect(ctx, a.Addr, fila.WithAPIKey(a.AdminKey))
}

// A breakRow is an abuse's phase and the baseline phase before it.
type breakRow struct{ base, abused phaseResult }

type phaseResult struct {
	name               string
	dur                time.Duration
	acked, produced    int64
	peakRSS            int64
	outcome            string
	ackedPS, producePS float64
	cpuBroker, cpuPair float64 // CPU time over the phase's length: 1 is one core
	cpuAttacker        float64
	waitBroker         float64 // time the broker's threads waited for a CPU, over the phase's length
	p50, p99           time.Duration
}

// runQueueWait returns the time the threads of process pid have spent
// runnable but waiting for a CPU, from the kernel's schedstat (Linux): on
// a shared machine, how much CPU it was denied.
func runQueueWait(pid int) time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, _ := os.ReadDir(dir)
	var sum time.Duration
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		if f := strings.Fields(string(b)); err == nil && len(f) >= 2 {
			var ns int64
			fmt.Sscan(f[1], &ns)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// pairCPU returns the CPU time this process (the pair) has used, user and
// system.
func pairCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBreakIt runs the pair through, for each abuse, a baseline phase,
// a phase under the abuse and a recovery gap.
func TestBreakIt(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test of a minute; skipped in -short mode")
	}
	if filatest.RaceBuild() {
		t.Skip("a load test: under the race detector its figures would measure the detector")
	}
	phase := 5 * time.Second
	if s := os.Getenv("FILA_BREAKIT_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("FILA_BREAKIT_PHASE=%q: want a positive duration such as 20s", s)
		}
		phase = d
	}
	gap := max(time.Second, phase/4)

	env := slices.Clone(breakEnv)
	env = append(env, strings.Fields(os.Getenv("FILA_BREAKIT_SERVER_ENV"))...)
	srv := filatest.Start(t, filatest.WithEnv(env...))
	ctx := ctxT(t, 20*phase+5*time.Minute)
	admin, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	// Every lease an abuser takes and loses counts as an attempt; the test
	// checks delivery, not dead-lettering, so allow more than three.
	if err := admin.Admin().CreateQueue(ctx, fila.NewQueueSpec(breakQueue).MaxAttempts(10)); err != nil {
		t.Fatal(err)
	}
	pairKey, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("pair").
		Permissions(fila.Produce(breakQueue), fila.Consume(breakQueue)))
	if err != nil {
		t.Fatal(err)
	}
	attackKey, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("attacker").
		Permissions(fila.Produce("*"), fila.Consume("*")))
	if err != nil {
		t.Fatal(err)
	}

	rss := startRSSSampler(t, srv)
	p := startPair(t, ctx, srv.Addr, pairKey.Secret)
	time.Sleep(gap) // warm up

	var picked []abuse
	pick := strings.Split(os.Getenv("FILA_BREAKIT_ABUSES"), ",")
	for _, ab := range abuses {
		if pick[0] == "" || slices.Contains(pick, ab.id) {
			picked = append(picked, ab)
		}
	}
	// measure runs the pair for one phase, under proc's abuse if not nil,
	// and checks that the broker came through it.
	window := 0
	measure := func(name string, proc *attackProc) phaseResult {
		t.Helper()
		window++
		rss.phase(window)
		bc0, _ := srv.CPUTime()
		pc0, bw0 := pairCPU(), runQueueWait(srv.Pid())
		p.takeLatency()
		a0, p0, t0 := p.acked.Load(), p.produced.Load(), time.Now()
		time.Sleep(phase)
		a1, p1, t1 := p.acked.Load(), p.produced.Load(), time.Now()
		bc1, _ := srv.CPUTime()
		pc1, bw1 := pairCPU(), runQueueWait(srv.Pid())
		rss.phase(-1)
		r := phaseResult{name: name, dur: t1.Sub(t0), acked: a1 - a0, produced: p1 - p0, peakRSS: rss.peak(window), outcome: "none"}
		r.ackedPS = float64(r.acked) / r.dur.Seconds()
		r.producePS = float64(r.produced) / r.dur.Seconds()
		r.cpuBroker = (bc1 - bc0).Seconds() / r.dur.Seconds()
		r.cpuPair = (pc1 - pc0).Seconds() / r.dur.Seconds()
		r.waitBroker = (bw1 - bw0).Seconds() / r.dur.Seconds()
		r.p50, r.p99 = p.takeLatency()
		if proc != nil {
			var cpu time.Duration
			r.outcome, cpu = proc.stop(t)
			r.cpuAttacker = cpu.Seconds() / r.dur.Seconds()
		}
		t.Logf("%s: pair acked %.0f msgs/s, produced %.0f msgs/s (SendBatch p50 %s, p99 %s); broker peak RSS %.0f MiB; "+
			"CPU: broker %.0f%%, pair %.0f%%, attacker %.0f%%; broker waited for a CPU %.0f%%; attacker: %s",
			r.name, r.ackedPS, r.producePS, ms1(r.p50), ms1(r.p99), float64(r.peakRSS)/mib,
			100*r.cpuBroker, 100*r.cpuPair, 100*r.cpuAttacker, 100*r.waitBroker, r.outcome)
		if _, err := srv.RSS(); err != nil {
			t.Fatalf("%s: the broker is gone: %v", name, err)
		}
		if _, err := admin.Ping(ctx); err != nil {
			t.Fatalf("%s: the broker does not answer a Ping: %v", name, err)
		}
		if r.acked == 0 {
			t.Errorf("%s: the pair acked nothing", name)
		}
		if r.peakRSS >= rssLimit {
			t.Errorf("%s: broker RSS peaked at %.0f MiB; want under %d MiB", name, float64(r.peakRSS)/mib, rssLimit/mib)
		}
		return r
	}
	// Each abuse is compared with a baseline measured just before it: on
	// a shared machine the pair's rate drifts with the other load.
	var rows []breakRow
	for i, ab := range picked {
		base := measure("baseline before "+ab.name, nil)
		a := attacker{Abuse: ab.id, Addr: srv.Addr, Key: attackKey.Secret, AdminKey: bootstrap}
		for k := range 8 {
			a.IPs = append(a.IPs, fmt.Sprintf("127.0.%d.%d", 10+i, 2+k))
		}
		rows = append(rows, breakRow{base: base, abused: measure(ab.name, startAttacker(t, a))})
		time.Sleep(gap)
	}

	p.stopProducing()
	p.waitDrained(t, ctx, 2*time.Minute)
	p.stop()
	p.check(t)
	st := stats(t, ctx, admin, breakQueue)
	if st.Ready+st.Delayed+st.Leased != 0 || st.DeadLettered != 0 {
		t.Errorf("queue %s after the drain: ready %d, delayed %d, leased %d, dead-lettered %d; want all zero",
			breakQueue, st.Ready, st.Delayed, st.Leased, st.DeadLettered)
	}
	overall := rss.stop()
	if overall >= rssLimit {
		t.Errorf("broker RSS peaked at %.0f MiB during the test; want under %d MiB", float64(overall)/mib, rssLimit/mib)
	}

	table := breakTable(rows, phase, gap, env, overall, p)
	t.Logf("\n%s", table)
	if out := os.Getenv("FILA_BREAKIT_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Errorf("write %s: %v", out, err)
		}
	}
}

// TestBreakItAttacker is an attacker process of TestBreakIt: it runs the
// abuse given in $FILA_BREAKIT_ATTACKER until its standard input closes,
// then prints what happened. Without that variable it is skipped.
func TestBreakItAttacker(t *testing.T) {
	spec := os.Getenv(attackerEnv)
	if spec == "" {
		t.Skip("run by TestBreakIt")
	}
	var a attacker
	if err := json.Unmarshal([]byte(spec), &a); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(abuses, func(ab abuse) bool { return ab.id == a.Abuse })
	if i < 0 {
		t.Fatalf("no abuse %q", a.Abuse)
	}
	run := abuses[i].run
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	outcome := run(ctx, &a)
	fmt.Printf("%s%s\n", outcomePrefix, strings.ReplaceAll(outcome, "\n", " "))
}

// An attackProc is a running attacker process.
type attackProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	outcome chan string
	stderr  bytes.Buffer
}

func startAttacker(t *testing.T, a attacker) *attackProc {
	t.Helper()
	spec, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	p := &attackProc{outcome: make(chan string, 1)}
	args := []string{os.Args[0], "-test.run=^TestBreakItAttacker$", "-test.count=1", "-test.timeout=0"}
	if n := os.Getenv("FILA_BREAKIT_NICE"); n != "" {
		args = append([]string{"nice", "-n", n}, args...)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), attackerEnv+"="+string(spec))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the attacker process: %v", err)
	}
	go func() {
		var last []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if o, ok := strings.CutPrefix(sc.Text(), outcomePrefix); ok {
				p.outcome <- o
				return
			}
			last = append(last, sc.Text())
		}
		p.outcome <- "no report: " + strings.Join(last, " | ")
	}()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// stop ends the abuse and returns its report and the CPU time the
// process used.
func (p *attackProc) stop(t *testing.T) (string, time.Duration) {
	t.Helper()
	p.stdin.Close()
	var outcome string
	select {
	case outcome = <-p.outcome:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		p.cmd.Wait()
		t.Fatalf("the attacker did not stop within a minute of its phase:\n%s", p.stderr.String())
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the attacker process: %v\n%s", err, p.stderr.String())
	}
	st := p.cmd.ProcessState
	return outcome, st.UserTime() + st.SystemTime()
}

// breakTable renders the results as markdown.
func breakTable(rows []breakRow, phase, gap time.Duration, env []string, peak int64, p *pair) string {
	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	var settings []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FILA_AUTH_BOOTSTRAP_APIKEY=") {
			settings = append(settings, "`"+kv+"`")
		}
	}
	fmt.Fprintf(&b, "# Break it\n\n")
	fmt.Fprintf(&b, "`TestBreakIt` (broker/e2e/breakit_test.go), %s. For each abuse: %v of the pair alone (the baseline), %v under the abuse, %v of recovery. "+
		"One fila-server with its defaults except %s. "+
		"The pair (one process), each attacker (one process) and the broker share the machine: %d CPUs, load average %s at the end. "+
		"The ratio is the pair's acked rate under the abuse over its baseline. "+
		"CPU is CPU time over the phase's length (100%% is one core); the broker's wait for a CPU is the time its threads were runnable "+
		"and not running (schedstat), over the phase's length: the machine's other load shows there.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), phase, phase, gap, strings.Join(settings, ", "),
		runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	if n := os.Getenv("FILA_BREAKIT_NICE"); n != "" {
		fmt.Fprintf(&b, "The attacker processes ran at niceness %s: they stand for clients on other machines, so the broker and the pair "+
			"come first for the CPU, and the attackers take what is left (their CPU column).\n\n", n)
	}
	b.WriteString("| abuse | pair acked msgs/s: baseline → abused | ratio | pair produced msgs/s (abused) | SendBatch p50 / p99: baseline → abused | " +
		"broker peak RSS | CPU under the abuse: broker / pair / attacker | broker waited for a CPU: baseline → abused | what happened to the attacker |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		ratio := "n/a"
		if r.base.ackedPS > 0 {
			ratio = fmt.Sprintf("%.2f", r.abused.ackedPS/r.base.ackedPS)
		}
		fmt.Fprintf(&b, "| %s | %.0f → %.0f | %s | %.0f | %s / %s → %s / %s | %.0f MiB | %.0f%% / %.0f%% / %.0f%% | %.0f%% → %.0f%% | %s |\n",
			r.abused.name, r.base.ackedPS, r.abused.ackedPS, ratio, r.abused.producePS,
			ms1(r.base.p50), ms1(r.base.p99), ms1(r.abused.p50), ms1(r.abused.p99), float64(r.abused.peakRSS)/mib,
			100*r.abused.cpuBroker, 100*r.abused.cpuPair, 100*r.abused.cpuAttacker,
			100*r.base.waitBroker, 100*r.abused.waitBroker, r.abused.outcome)
	}
	fmt.Fprintf(&b, "\nBroker peak RSS over the whole test: %.0f MiB (limit %d MiB). ", float64(peak)/mib, rssLimit/mib)
	fmt.Fprintf(&b, "The pair: %d messages enqueued, every one acked (%d delivered more than once).\n", p.produced.Load(), p.dups)
	return b.String()
}

// ms1 formats d in milliseconds with one decimal.
func ms1(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// rssSampler reads the broker's VmRSS every 100ms and keeps the peak of
// each phase and of the whole run.
type rssSampler struct {
	cur     atomic.Int32 // the phase being measured, -1 between phases
	mu      sync.Mutex
	peaks   map[int]int64
	overall int64
	stopCh  chan struct{}
	done    chan struct{}
}

func startRSSSampler(t *testing.T, srv *filatest.Server) *rssSampler {
	t.Helper()
	if _, err := srv.RSS(); err != nil {
		t.Skipf("cannot read the broker's RSS: %v", err)
	}
	s := &rssSampler{peaks: map[int]int64{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	s.cur.Store(-1)
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case <-tick.C:
			}
			n, err := srv.RSS()
			if err != nil {
				continue
			}
			s.mu.Lock()
			i := int(s.cur.Load())
			s.peaks[i] = max(s.peaks[i], n)
			s.overall = max(s.overall, n)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *rssSampler) phase(i int) { s.cur.Store(int32(i)) }

func (s *rssSampler) peak(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks[i]
}

// stop ends the sampling and returns the peak of the whole run.
func (s *rssSampler) stop() int64 {
	select {
	case <-s.stopCh:
	default:
		close(s.stopCh)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overall
}

// A pair is the normal producer and consumer: one client each, on
// 127.0.0.1. The producer sends batches of 16 messages of 1 KiB over four
// fairness keys, one batch at a time; the consumer has the SDK's default
// prefetch and acks each delivery.
type pair struct {
	produced, acked atomic.Int64

	mu       sync.Mutex
	ids      map[fila.ID]bool // enqueued, as the producer was told
	ackCount map[fila.ID]int  // acked by the consumer
	errs     []string
	dups     int
	latency  []time.Duration // of each SendBatch since the last takeLatency

	stopProd context.CancelFunc
	stopCons context.CancelFunc
	wg       sync.WaitGroup
	acks     sync.WaitGroup
}

func startPair(t *testing.T, ctx context.Context, addr, key string) *pair {
	t.Helper()
	p := &pair{ids: map[fila.ID]bool{}, ackCount: map[fila.ID]int{}}
	prod, err := connectKey(t, addr, key)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := connectKey(t, addr, key)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cons.Consumer().Subscribe(ctx, breakQueue)
	if err != nil {
		t.Fatal(err)
	}

	pctx, stopProd := context.WithCancel(ctx)
	cctx, stopCons := context.WithCancel(ctx)
	p.stopProd, p.stopCons = stopProd, stopCons
	batch := make([]*fila.Message, 16)
	for i := range batch {
		batch[i] = fila.NewMessage(breakQueue, make([]byte, 1024)).FairnessKey(fmt.Sprintf("tenant-%d", i%4))
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for pctx.Err() == nil {
			// Not pctx: a batch sent is waited for, so that every
			// message the broker may have taken is known.
			start := time.Now()
			res, err := prod.Producer().SendBatch(ctx, batch)
			took := time.Since(start)
			if err != nil {
				p.fail("SendBatch: %v", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ok := 0
			p.mu.Lock()
			for _, r := range res {
				if r.Err != nil {
					p.errs = append(p.errs, fmt.Sprintf("SendBatch item: %v", r.Err))
					continue
				}
				p.ids[r.ID] = true
				ok++
			}
			p.latency = append(p.latency, took)
			p.mu.Unlock()
			p.produced.Add(int64(ok))
		}
	}()
	go func() {
		defer p.wg.Done()
		for {
			d, err := sub.Next(cctx)
			if err != nil {
				if cctx.Err() == nil {
					p.fail("Next: %v", err)
				}
				return
			}
			p.acks.Add(1)
			go func() {
				defer p.acks.Done()
				if err := d.Ack(ctx); err != nil {
					p.fail("Ack: %v", err)
					return
				}
				p.mu.Lock()
				p.ackCount[d.ID()]++
				p.mu.Unlock()
				p.acked.Add(1)
			}()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *pair) fail(format string, args ...any) {
	p.mu.Lock()
	if len(p.errs) < 20 {
		p.errs = append(p.errs, fmt.Sprintf(format, args...))
	}
	p.mu.Unlock()
}

func (p *pair) stopProducing() { p.stopProd() }

// takeLatency returns the median and the 99th percentile of the SendBatch
// calls that returned since the last call.
func (p *pair) takeLatency() (p50, p99 time.Duration) {
	p.mu.Lock()
	l := p.latency
	p.latency = nil
	p.mu.Unlock()
	if len(l) == 0 {
		return 0, 0
	}
	slices.Sort(l)
	return l[len(l)/2], l[len(l)*99/100]
}

func (p *pair) stop() {
	p.stopProd()
	p.stopCons()
	p.wg.Wait()
	p.acks.Wait()
}

// waitDrained waits until the consumer has acked every message the
// producer was told was enqueued.
func (p *pair) waitDrained(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		p.mu.Lock()
		missing := 0
		for id := range p.ids {
			if p.ackCount[id] == 0 {
				missing++
			}
		}
		p.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("%d acknowledged enqueues were not consumed within %v of the producer's end", missing, d)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check fails the test for any error of the pair's calls and any message
// acked that was never enqueued, and counts redeliveries.
func (p *pair) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		t.Errorf("the normal pair: %s", e)
	}
	for id, n := range p.ackCount {
		if !p.ids[id] {
			t.Errorf("message %s acked, never enqueued", id)
		}
		if n > 1 {
			p.dups++
		}
	}
	t.Logf("the pair enqueued %d messages and acked every one; %d were acked more than once", len(p.ids), p.dups)
}

// tally counts outcomes by name, for the report.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tally) add(k string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	c.mu.Unlock()
}

// String lists the outcomes, most frequent first.
func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c.m[a] != c.m[b] {
			return c.m[b] - c.m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", c.m[k], k))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// closedBy names how a connection ended, from the error of a read or
// write, or the Error frame read.
func closedBy(ctx context.Context, f wire.Frame, err error) string {
	if code, msg := errorCode(f); code != 0 {
		switch {
		case strings.Contains(msg, "failed handshakes"):
			return "RESOURCE_EXHAUSTED (failed handshakes, at accept)"
		case strings.Contains(msg, "waiting for a handshake"):
			return "RESOURCE_EXHAUSTED (evicted, the oldest handshaking)"
		case strings.Contains(msg, "connections from"):
			return "RESOURCE_EXHAUSTED (per-address cap, at accept)"
		case strings.Contains(msg, "budget"):
			return "RESOURCE_EXHAUSTED (reassembly budget)"
		case strings.Contains(msg, "frame incomplete"):
			return "PROTOCOL_VIOLATION (frame read timeout)"
		}
		return code.String()
	}
	if ctx.Err() != nil {
		return "open at the phase's end"
	}
	var ne net.Error
	switch {
	case err == nil:
		return fmt.Sprintf("answered %v", f)
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "closed (broken pipe)"
	case errors.Is(err, io.EOF):
		return "closed (EOF)"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out on the client's side"
	}
	return err.Error()
}

// handshakeRaw dials from ip, handshakes with key and returns the
// connection, its frame reader and the broker's HandshakeOk. The
// connection is closed when ctx ends.
func handshakeRaw(ctx context.Context, addr, ip, key string) (net.Conn, *wire.FrameReader, *wire.HandshakeOk, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	context.AfterFunc(ctx, func() { nc.Close() })
	fr := wire.NewFrameReader(0, 0)
	if _, err := nc.Write(handshakeFrame(key)); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	_, f, err := readFrame(nc, fr, 30*time.Second)
	ok, isOK := f.(*wire.HandshakeOk)
	if err != nil || !isOK {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("handshake answered %v, %v", f, err)
	}
	return nc, fr, ok, nil
}

// renumber gives the frames of chunk consecutive request IDs from *next:
// a request ID may not be reused while its request is in flight.
func renumber(chunk []byte, next *uint32) {
	for off := 0; off+wire.HeaderSize <= len(chunk); {
		h, _ := wire.ParseHeader(chunk[off:])
		binary.BigEndian.PutUint32(chunk[off+8:], *next)
		*next++
		off += wire.HeaderSize + int(h.Length)
	}
}

// abuseNoReads: a connection sends Pings, unknown opcodes and requests
// that fail as fast as it can and never reads the answers, reconnecting
// when it is closed; and a subscriber with prefetch 0 on the pair's queue
// never reads its socket. Its deliveries alone (at most max_unsettled of
// 1 KiB) fit in the sockets' buffers, so it sends Pings as well, and the
// write timeout closes it.
func abuseNoReads(ctx context.Context, a *attacker) string {
	var wg sync.WaitGroup
	var conns tally
	var sent atomic.Int64
	var lived []time.Duration
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		var chunk []byte
		for len(chunk) < mib {
			chunk = wire.AppendFrame(chunk, 0, &wire.Ping{Nonce: 1})
			chunk = wire.AppendFrame(chunk, 0, &wire.UnknownFrame{Op: 0x0F01})
			chunk = wire.AppendFrame(chunk, 0, &wire.QueueStats{Name: "no-such-queue"})
		}
		for ctx.Err() == nil {
			nc, _, _, err := handshakeRaw(ctx, a.Addr, a.IPs[0], a.Key)
			if err != nil {
				if ctx.Err() == nil {
					conns.add("handshake failed: " + err.Error())
					time.Sleep(100 * time.Millisecond)
				}
				continue
			}
			start := time.Now()
			next := uint32(2)
			for {
				renumber(chunk, &next)
				n, err := nc.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					conns.add(closedBy(ctx, nil, err))
					if ctx.Err() == nil {
						mu.Lock()
						lived = append(lived, time.Since(start))
						mu.Unlock()
					}
					break
				}
			}
			nc.Close()
		}
	}()

	var subOutcome string
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, _, _, err := handshakeRaw(ctx, a.Addr, a.IPs[1], a.Key)
		if err != nil {
			subOutcome = "handshake failed: " + err.Error()
			return
		}
		defer nc.Close()
		start := time.Now()
		if _, err := nc.Write(wire.AppendFrame(nil, 2, &wire.Subscribe{Queue: breakQueue, Prefetch: 0})); err != nil {
			subOutcome = closedBy(ctx, nil, err)
			return
		}
		var pings []byte
		for len(pings) < 64<<10 {
			pings = wire.AppendFrame(pings, 0, &wire.Ping{Nonce: 1})
		}
		for next := uint32(3); ; {
			renumber(pings, &next)
			if _, err := nc.Write(pings); err != nil {
				subOutcome = fmt.Sprintf("%s %.1fs after subscribing", closedBy(ctx, nil, err), time.Since(start).Seconds())
				if ctx.Err() == nil {
					subOutcome += leasesAfter(ctx, a)
				}
				return
			}
		}
	}()
	wg.Wait()
	return fmt.Sprintf("pinger: %d MiB of requests written, answers never read; connections: %s%s. Silent subscriber: %s",
		sent.Load()/mib, conns.String(), meanLife(lived), subOutcome)
}

// leasesAfter reports the leases of the pair's queue half a second after
// an abuser that held some was closed: they return at once, so the queue
// holds no more than the pair's consumer's prefetch.
func leasesAfter(ctx context.Context, a *attacker) string {
	time.Sleep(500 * time.Millisecond)
	c, err := a.admin(ctx)
	if err != nil {
		return ""
	}
	defer c.Close()
	st, err := c.Admin().QueueStats(ctx, breakQueue)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (leases on the queue 0.5s later: %d)", st.Leased)
}

// readSmall reads one small frame, such as an Error, with a small buffer
// and no deadline: for thousands of sockets at once.
func readSmall(nc net.Conn) (wire.Frame, error) {
	fr := wire.NewFrameReader(4096, 0)
	var buf [512]byte
	for {
		h, body, ok, err := fr.Next()
		if err != nil {
			return nil, err
		}
		if ok {
			return wire.DecodeFrame(h.Opcode, body)
		}
		n, err := nc.Read(buf[:])
		fr.Feed(buf[:n])
		if err != nil && n == 0 {
			return nil, err
		}
	}
}

func meanLife(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return fmt.Sprintf(" (closed %.1fs after the handshake on average)", (sum / time.Duration(len(ds))).Seconds())
}

// abusePartialFrames: 20 connections each announce a frame of the largest
// size, send all of it but 1 MiB and stall, reconnecting when closed.
func abusePartialFrames(ctx context.Context, a *attacker) string {
	const conns = 20
	var wg sync.WaitGroup
	var out tally
	var sent atomic.Int64
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				nc, fr, ok, err := handshakeRaw(ctx, a.Addr, a.IPs[0], a.Key)
				if err != nil {
					if ctx.Err() == nil {
						out.add("handshake failed")
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				size := int(ok.MaxFrameSize)
				header := wire.AppendHeader(nil, wire.Header{Length: uint32(size), Opcode: wire.OpEnqueue, RequestID: 2})
				go func() {
					if _, err := nc.Write(header); err != nil {
						return
					}
					body := make([]byte, mib)
					for off := 0; off+mib < size; off += mib {
						n, err := nc.Write(body)
						sent.Add(int64(n))
						if err != nil {
							return
						}
					}
				}()
				_, f, err := readFrame(nc, fr, time.Hour)
				out.add(closedBy(ctx, f, err))
				nc.Close()
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d connections at a time, %d MiB of unfinished frames written; connections: %s", conns, sent.Load()/mib, out.String())
}

// abuseFlood: sockets that connect and never handshake, up to 900 open
// at a time from each of four addresses (3,600 against the broker's 1,024
// handshaking slots), each replaced when the broker closes it; and, from
// a fifth address, handshakes with a wrong key, one after another on two
// connections.
func abuseFlood(ctx context.Context, a *attacker) string {
	var wg sync.WaitGroup
	var idle, bad tally
	var opened atomic.Int64
	for _, ip := range a.IPs[:4] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, 900)
			var socks sync.WaitGroup
			defer socks.Wait()
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			for {
				select {
				case <-ctx.Done():
					return
				case slots <- struct{}{}:
				}
				nc, err := d.DialContext(ctx, "tcp", a.Addr)
				if err != nil {
					if ctx.Err() == nil {
						idle.add("dial failed")
						time.Sleep(10 * time.Millisecond)
					}
					<-slots
					continue
				}
				opened.Add(1)
				socks.Add(1)
				go func() {
					defer socks.Done()
					defer func() { <-slots }()
					stop := context.AfterFunc(ctx, func() { nc.Close() })
					defer stop()
					defer nc.Close()
					f, err := readSmall(nc)
					idle.add(closedBy(ctx, f, err))
				}()
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(a.IPs[4])}}
			for ctx.Err() == nil {
				nc, err := d.DialContext(ctx, "tcp", a.Addr)
				if err != nil {
					continue
				}
				stop := context.AfterFunc(ctx, func() { nc.Close() })
				var f wire.Frame
				if _, err = nc.Write(handshakeFrame("fila_not-a-real-key")); err == nil {
					f, err = readSmall(nc)
				}
				if ctx.Err() == nil {
					bad.add(closedBy(ctx, f, err))
				}
				stop()
				nc.Close()
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d sockets opened without a handshake: %s. Bad keys: %s", opened.Load(), idle.String(), bad.String())
}

// abuseHugeBatches: a client enqueues batches of the announced
// max_batch_size with messages as large as fit in a frame (2 KiB at the
// defaults) to a queue of its own, one after another, and every tenth
// batch one over the cap.
func abuseHugeBatches(ctx context.Context, a *attacker) string {
	admin, err := a.admin(ctx)
	if err != nil {
		return "connect: " + err.Error()
	}
	defer admin.Close()
	if err := admin.Admin().CreateQueue(ctx, fila.NewQueueSpec(bulkQueue)); err != nil {
		return "create queue: " + err.Error()
	}
	// Delete the queue afterwards, so that its backlog does not weigh on
	// the phases after.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin.Admin().DeleteQueue(dctx, bulkQueue)
	}()
	nc, fr, ok, err := handshakeRaw(ctx, a.Addr, a.IPs[0], a.Key)
	if err != nil {
		return "handshake failed: " + err.Error()
	}
	defer nc.Close()
	n := int(ok.MaxBatchSize)
	size := min(2048, int(ok.MaxFrameSize)/n-64)
	msgs := make([]wire.EnqueueMessage, n+1)
	for i := range msgs {
		msgs[i] = wire.EnqueueMessage{Queue: bulkQueue, Payload: make([]byte, size), FairnessKey: "bulk"}
	}
	big := wire.AppendFrame(nil, 2, &wire.Enqueue{Messages: msgs[:n]})
	over := wire.AppendFrame(nil, 3, &wire.Enqueue{Messages: msgs})
	var res tally
	accepted := 0
	for i := 0; ctx.Err() == nil; i++ {
		req := big
		if i%10 == 9 {
			req = over
		}
		if _, err := nc.Write(req); err != nil {
			res.add(closedBy(ctx, nil, err))
			break
		}
		_, f, err := readFrame(nc, fr, time.Hour)
		switch f := f.(type) {
		case *wire.EnqueueResult:
			for _, r := range f.Results {
				if r.Code == 0 {
					accepted++
				}
			}
			res.add(fmt.Sprintf("batches of %d answered", len(f.Results)))
		case *wire.ErrorFrame:
			res.add(fmt.Sprintf("batches of %d refused with %v", n+1, f.Code))
		default:
			res.add(closedBy(ctx, f, err))
		}
		if err != nil {
			break
		}
	}
	return fmt.Sprintf("%s; %d messages of %d bytes accepted", res.String(), accepted, size)
}

// abuseNeverAck: a Go SDK consumer with prefetch 0 on the pair's queue
// takes deliveries and never settles them.
func abuseNeverAck(ctx context.Context, a *attacker) string {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(a.IPs[0])}}
	c, err := fila.Connect(ctx, a.Addr, fila.WithAPIKey(a.Key), fila.WithoutReconnect(),
		fila.WithDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		return "connect: " + err.Error()
	}
	defer c.Close()
	sub, err := c.Consumer().Subscribe(ctx, breakQueue, fila.Prefetch(0))
	if err != nil {
		return "subscribe: " + err.Error()
	}
	held := 0
	for {
		select {
		case <-ctx.Done():
			return fmt.Sprintf("granted prefetch %d; held %d deliveries unsettled until it closed at the phase's end", sub.Prefetch(), held)
		case _, ok := <-sub.C():
			if !ok {
				return fmt.Sprintf("subscription ended after %d deliveries: %v", held, sub.Err())
			}
			held++
		}
	}
}
