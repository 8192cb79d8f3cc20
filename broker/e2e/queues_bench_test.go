package e2e

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

var manyQueuesN = flag.Int("e2e.queues", 10_000, "queues for BenchmarkManyQueues")

// BenchmarkManyQueues creates e2e.queues queues (each with its DLQ) on a
// real broker and reports what they cost it: its RSS with them (and per
// queue, over the RSS of the empty broker), then, after a SIGKILL and a
// restart on the same data, the time until it serves again (listening
// and answering QueueStats) and its RSS then. "idle" leaves the queues
// empty; "small" enqueues 5 messages of 1 KiB to each; "cluster-idle" is
// "idle" on a one-node cluster, where each queue is a Raft group with a
// shard of its own, and serving means an enqueue to the last queue
// created succeeds (its group has elected a leader).
//
// It also reports the creation rate over the first and the last tenth of
// the queues (a cost that grew with the number of queues would show as a
// falling rate); the time and size of a /metrics scrape with every queue,
// and the RSS after it; and the broker's goroutines, stack and heap in
// use as that scrape reports them. The targets are 100 MiB of RSS and
// 2 s of restart for 10,000 idle queues; this reports, it does not
// assert them.
//
// With FILA_BENCH_PROFILES=DIR the broker serves its profiles
// (http.pprof), and the benchmark saves in DIR, for go tool pprof, a CPU
// profile of the creation of the last tenth of the queues and one of the
// restart's first seconds (FILA_BENCH_CPU_SECONDS, default 5), and a heap
// profile (after a collection), the allocations so far and the
// goroutines of the broker with the queues created, after the restart
// and after the scrape. Run it alone:
//
//	go test ./e2e -run '^$' -bench ManyQueues -benchtime 1x -timeout 60m
func BenchmarkManyQueues(b *testing.B) {
	for _, tc := range []struct {
		name    string
		msgs    int
		cluster bool
	}{{"idle", 0, false}, {"small", 5, false}, {"cluster-idle", 0, true}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				manyQueues(b, *manyQueuesN, tc.msgs, tc.cluster)
			}
		})
	}
}

// manyQueues runs one round of BenchmarkManyQueues: n queues of msgs
// messages each, on a single node or a one-node cluster.
func manyQueues(b *testing.B, n, msgs int, cluster bool) {
	adminAddr := filatest.FreePorts(b, 1)[0]
	profiles := os.Getenv("FILA_BENCH_PROFILES")
	env := filatest.WithEnv("FILA_HTTP_LISTEN_ADDR=" + adminAddr)
	if profiles != "" {
		env = filatest.WithEnv("FILA_HTTP_LISTEN_ADDR="+adminAddr, "FILA_HTTP_PPROF=true")
	}
	base := func(at string) string {
		return filepath.Join(profiles, strings.ReplaceAll(b.Name(), "/", "-")+"-"+at)
	}
	// cpu starts a CPU profile of the broker, saved as
	// DIR/<sub-benchmark>-<at>-cpu.pprof, once its admin listener
	// answers; the returned function waits for it.
	cpu := func(at string) func() {
		if profiles == "" {
			return func() {}
		}
		secs := cmp.Or(os.Getenv("FILA_BENCH_CPU_SECONDS"), "5")
		done := make(chan error, 1)
		go func() {
			url := "http://" + adminAddr + "/debug/pprof/profile?seconds=" + secs
			for {
				err := saveURL(url, base(at)+"-cpu.pprof")
				if err == nil || !strings.Contains(err.Error(), "connection refused") {
					done <- err
					return
				}
				time.Sleep(5 * time.Millisecond) // restarting: not listening yet
			}
		}()
		return func() {
			if err := <-done; err != nil {
				b.Error(err)
			}
		}
	}
	// profile saves the broker's heap and goroutines as DIR/<sub-benchmark>-<at>-*.
	profile := func(at string) {
		if profiles == "" {
			return
		}
		base := base(at)
		for _, p := range []struct{ path, file string }{
			{"/debug/pprof/heap?gc=1", base + "-heap.pprof"},
			{"/debug/pprof/allocs", base + "-allocs.pprof"},
			{"/debug/pprof/goroutine?debug=1", base + "-goroutines.txt"},
		} {
			if err := saveURL("http://"+adminAddr+p.path, p.file); err != nil {
				b.Fatal(err)
			}
		}
	}
	var srv *filatest.Server
	if cluster {
		srv = filatest.StartCluster(b, 1, env).Nodes[0]
	} else {
		srv = filatest.Start(b, env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { c.Close() }()
	time.Sleep(time.Second) // the empty broker settled
	rss0, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(inMiB(rss0), "RSS-empty-MiB")

	name := func(i int) string { return fmt.Sprintf("q%05d", i) }
	tenth := max(n/10, 1)
	var first, last time.Duration
	for lo := 0; lo < n; lo += tenth {
		hi := min(lo+tenth, n)
		cpuDone := func() {}
		if hi == n {
			cpuDone = cpu("create-last-tenth")
		}
		t0 := time.Now()
		if err := parallel(16, lo, hi, func(i int) error {
			return c.Admin().CreateQueue(ctx, fila.NewQueueSpec(name(i)))
		}); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		cpuDone()
		if lo == 0 {
			first = d
		}
		last = d
	}
	b.ReportMetric(float64(tenth)/first.Seconds(), "create-first-tenth-queues/s")
	b.ReportMetric(float64(tenth)/last.Seconds(), "create-last-tenth-queues/s")
	if msgs > 0 {
		payload := make([]byte, 1024)
		if err := parallel(16, 0, n, func(i int) error {
			batch := make([]*fila.Message, msgs)
			for j := range batch {
				batch[j] = fila.NewMessage(name(i), payload)
			}
			res, err := c.Producer().SendBatch(ctx, batch)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // let the broker's GC settle
	rss, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(inMiB(rss), "RSS-MiB")
	b.ReportMetric(float64(rss-rss0)/float64(n)/1024, "RSS-KiB/queue")
	profile("created")
	c.Close()

	srv.Kill()
	cpuDone := cpu("restart")
	t0 := time.Now()
	srv.Restart(b)
	if c, err = fila.Connect(ctx, srv.Addr); err != nil {
		b.Fatal(err)
	}
	st, err := c.Admin().QueueStats(ctx, name(n-1))
	if err != nil {
		b.Fatal(err)
	}
	extra := 0 // messages enqueued after the restart
	if cluster {
		// A follower answers QueueStats; an enqueue needs the leader.
		b.ReportMetric(time.Since(t0).Seconds(), "restart-stats-s")
		extra = 1
		for {
			_, err := c.Producer().Enqueue(ctx, name(n-1), []byte("x"))
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.ReportMetric(time.Since(t0).Seconds(), "restart-s")
	rss2, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(inMiB(rss2), "RSS-after-restart-MiB")
	cpuDone()
	profile("restarted")
	if st.Ready != uint64(msgs) {
		b.Errorf("after the restart: %s has %d ready; want %d", name(n-1), st.Ready, msgs)
	}
	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ready := uint64(0)
	for _, q := range qs {
		ready += q.Ready
	}
	if len(qs) != 2*n || ready != uint64(n*msgs+extra) {
		b.Errorf("after the restart: %d queues (DLQs included), %d messages ready; want %d and %d", len(qs), ready, 2*n, n*msgs+extra)
	}

	t1 := time.Now()
	size, series, rt, err := scrapeSize(ctx, "http://"+adminAddr+"/metrics",
		"go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes")
	scraped := time.Since(t1)
	if err != nil {
		b.Fatal(err)
	}
	// The runtime's figures are read before the queues' at each scrape:
	// they are the broker's after the restart.
	b.ReportMetric(rt["go_goroutines"], "goroutines")
	b.ReportMetric(rt["go_memstats_stack_inuse_bytes"]/(1<<20), "stack-MiB")
	b.ReportMetric(rt["go_memstats_heap_inuse_bytes"]/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(scraped.Seconds(), "scrape-s")
	b.ReportMetric(float64(size)/(1<<20), "scrape-MiB")
	b.ReportMetric(float64(series), "scrape-series")
	rss3, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(inMiB(rss3), "RSS-after-scrape-MiB")
	profile("scraped")
}

// parallel calls fn(i) for every i from lo to hi on workers goroutines,
// and returns the first error.
func parallel(workers, lo, hi int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  = lo
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= hi || stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// saveURL writes the body of a GET of url to file.
func saveURL(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// scrapeSize reads a Prometheus text exposition and returns its size,
// its number of samples, and the values of the samples named in want
// (unlabelled ones, such as go_goroutines), by name.
func scrapeSize(ctx context.Context, url string, want ...string) (size, series int, values map[string]float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	values = map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series++
		name, v, ok := strings.Cut(line, " ")
		if ok && slices.Contains(want, name) {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				values[name] = f
			}
		}
	}
	return len(body), series, values, nil
}
