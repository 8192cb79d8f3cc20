package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/broker/internal/tmpfs"
	fila "github.com/fila-mq/fila/sdk/go"
)

// Storage failures against a real fila-server: a full disk, a lost log
// tail, damage repaired, a failed fsync, and shutdown under nacks.

func payload(n int, tag string) []byte {
	p := make([]byte, n)
	copy(p, tag)
	return p
}

// TestDiskFull fills the data disk (a tmpfs) by enqueueing: enqueues get
// RESOURCE_EXHAUSTED; while full, Ping, consume and ack go on; once a
// filler file is deleted, enqueues succeed again without a restart; after
// a restart every acknowledged message is there and no acked one is.
func TestDiskFull(t *testing.T) {
	mnt := tmpfs.Mount(t, 16<<20)
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 4<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(mnt, "data")
	if err := os.MkdirAll(data, 0o750); err != nil {
		t.Fatal(err)
	}
	httpPort := filatest.FreePorts(t, 1)[0]
	_, port, _ := strings.Cut(httpPort, ":")
	readyz := "http://127.0.0.1:" + port + "/readyz"
	srv := filatest.Start(t, filatest.WithDataDir(data), filatest.WithEnv(
		"FILA_STORAGE_SEGMENT_SIZE=1MB", "FILA_STORAGE_RESERVE_SIZE=2MB", "FILA_STORAGE_CACHE_SIZE=1MB",
		"FILA_HTTP_LISTEN_ADDR=127.0.0.1:"+port))
	ctx := ctxT(t, 5*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("full")); err != nil {
		t.Fatal(err)
	}
	prod := c.Producer()

	produced := map[fila.ID]bool{}
	var fullErr error
	for i := 0; fullErr == nil; i++ {
		if i == 1000 {
			t.Fatalf("16 MiB never filled after %d messages", len(produced))
		}
		var batch []*fila.Message
		for j := range 20 {
			batch = append(batch, fila.NewMessage("full", payload(4096, fmt.Sprintf("m%d-%d", i, j))))
		}
		res, err := prod.SendBatch(ctx, batch)
		if err != nil {
			fullErr = err
			break
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("enqueue item = %v", r.Err)
			}
			produced[r.ID] = true
		}
	}
	if !errors.Is(fullErr, fila.ErrResourceExhausted) || !strings.Contains(fullErr.Error(), "no space left") {
		t.Fatalf("enqueue on a full disk = %v; want RESOURCE_EXHAUSTED saying the disk is full", fullErr)
	}
	t.Logf("disk full after %d messages", len(produced))

	// While full: /readyz says why it is not ready; Ping, consume and
	// ack work.
	if code, body := get(t, readyz, ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk is full") {
		t.Errorf("GET /readyz while the disk is full = %d %q; want 503 naming the full disk", code, body)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping while the disk is full = %v", err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "full", fila.Prefetch(40))
	if err != nil {
		t.Fatalf("Subscribe while the disk is full = %v", err)
	}
	acked := map[fila.ID]bool{}
	for len(acked) < 40 {
		d := recv(t, ctx, sub)
		if !produced[d.ID()] || acked[d.ID()] {
			t.Fatalf("delivered %s: not an acknowledged enqueue, or acked before", d.ID())
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack while the disk is full = %v", err)
		}
		acked[d.ID()] = true
	}
	if _, err := prod.Send(ctx, fila.NewMessage("full", payload(4096, "refused"))); !errors.Is(err, fila.ErrResourceExhausted) {
		t.Fatalf("enqueue while still full = %v; want RESOURCE_EXHAUSTED", err)
	}

	// Free space: enqueues succeed again, without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for {
		id, err := prod.Send(ctx, fila.NewMessage("full", payload(4096, "after")))
		if err == nil {
			produced[id] = true
			break
		}
		if !errors.Is(err, fila.ErrResourceExhausted) {
			t.Fatalf("enqueue after space was freed = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The log reaches the test through a pipe, so the line may trail the
	// first accepted enqueue.
	waitLog(t, ctxT(t, time.Minute), srv, "free space is back")
	if code, body := get(t, readyz, ""); code != http.StatusOK {
		t.Errorf("GET /readyz once space is back = %d %q; want 200", code, body)
	}
	log := srv.Log()
	if n := strings.Count(log, "level=ERROR"); n != 1 || !strings.Contains(log, "data disk is full") {
		t.Errorf("server logged %d ERROR lines; want one about the full disk", n)
	}

	// Restart: every acknowledged enqueue that was not acked is there, once.
	c.Close()
	srv.Stop(t)
	srv.Restart(t)
	drainExactly(t, ctx, srv.Addr, "full", produced, acked)
}

// drainExactly consumes queue until every ID of produced that is not in
// acked was delivered, failing on an acked or unknown ID, then checks the
// queue is empty.
func drainExactly(t *testing.T, ctx context.Context, addr, queue string, produced, acked map[fila.ID]bool) {
	t.Helper()
	c := connect(t, addr)
	sub, err := c.Consumer().Subscribe(ctx, queue, fila.Prefetch(256))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for id := range produced {
		if !acked[id] {
			want++
		}
	}
	got := map[fila.ID]bool{}
	for len(got) < want {
		d := recv(t, ctx, sub)
		switch {
		case acked[d.ID()]:
			t.Fatalf("message %s delivered after its ack was acknowledged", d.ID())
		case !produced[d.ID()]:
			t.Fatalf("message %s was never enqueued", d.ID())
		case got[d.ID()]:
			t.Fatalf("message %s delivered twice", d.ID())
		}
		got[d.ID()] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Admin().QueueStats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.Delayed+st.Leased != 0 {
		t.Fatalf("queue %s holds %+v after draining every acknowledged message", queue, st)
	}
}

// startProc starts bin on dataDir and stops it when the test ends. It
// returns once the server listens, or once it exits (Addr is then empty).
func startProc(t *testing.T, bin, dataDir string, env ...string) *filatest.Proc {
	t.Helper()
	p, err := filatest.StartProc(filatest.ProcConfig{Bin: bin, DataDir: dataDir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("fila-server log:\n%s", p.Log())
		}
	})
	return p
}

// exitCode waits for p to exit and returns its exit code.
func exitCode(t *testing.T, p *filatest.Proc) int {
	t.Helper()
	code, err := p.Wait(2 * time.Minute)
	if err != nil {
		t.Fatalf("fila-server did not exit:\n%s", p.Log())
	}
	return code
}

// segmentFiles returns the log segment files of dir, oldest first.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && len(e.Name()) == 20 {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// TestLostTail damages the log of a stopped server: the newest segment
// truncated or deleted (acknowledged messages are gone, so it must refuse
// to start, saying what is missing, until storage.repair is set), or one
// byte flipped in the oldest segment (repair must drop only the record
// holding it).
func TestLostTail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, segs []string)
		refuse  string // in the log of the refused start
		repair  string // in the log of the repaired start
		maxLost int
	}{
		{"newest segment truncated", func(t *testing.T, segs []string) {
			last := segs[len(segs)-1]
			fi, _ := os.Stat(last)
			if err := os.Truncate(last, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, "ended at byte", "repair starts without durable records that are missing", 0},
		{"newest segment deleted", func(t *testing.T, segs []string) {
			if err := os.Remove(segs[len(segs)-1]); err != nil {
				t.Fatal(err)
			}
		}, "is missing", "repair starts without durable records that are missing", 0},
		{"byte flipped in the oldest segment", func(t *testing.T, segs []string) {
			b, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x20
			if err := os.WriteFile(segs[0], b, 0o640); err != nil {
				t.Fatal(err)
			}
		}, "checksum mismatch", "repair dropped damaged records", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			srv := filatest.Start(t, filatest.WithDataDir(dir), filatest.WithEnv("FILA_STORAGE_SEGMENT_SIZE=1MB"))
			ctx := ctxT(t, 3*time.Minute)
			c := connect(t, srv.Addr)
			if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("tail")); err != nil {
				t.Fatal(err)
			}
			produced := map[fila.ID]bool{}
			for i := range 300 {
				var batch []*fila.Message
				for j := range 10 {
					batch = append(batch, fila.NewMessage("tail", payload(1000, fmt.Sprintf("m%d-%d", i, j))))
				}
				res, err := c.Producer().SendBatch(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					produced[r.ID] = true
				}
			}
			c.Close()
			srv.Stop(t)
			segs := segmentFiles(t, dir)
			if len(segs) < 3 {
				t.Fatalf("the log has %d segments; the test needs 3", len(segs))
			}
			tc.damage(t, segs)

			p := startProc(t, filatest.Binary(t), dir)
			if p.Addr != "" {
				t.Fatalf("fila-server started on a damaged log; want it to refuse")
			}
			if code := exitCode(t, p); code == 0 || !strings.Contains(p.Log(), tc.refuse) || !strings.Contains(p.Log(), "storage.repair") {
				t.Fatalf("refused start: exit %d; want non-zero and a log naming %q and storage.repair:\n%s", code, tc.refuse, p.Log())
			}

			srv.Env = append(srv.Env, "FILA_STORAGE_REPAIR=true")
			srv.Restart(t)
			if !strings.Contains(srv.Log(), tc.repair) {
				t.Errorf("repaired start did not log %q", tc.repair)
			}
			c = connect(t, srv.Addr)
			sub, err := c.Consumer().Subscribe(ctx, "tail", fila.Prefetch(256))
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for {
				st, err := c.Admin().QueueStats(ctx, "tail")
				if err != nil {
					t.Fatal(err)
				}
				if st.Ready+st.Leased == 0 {
					break
				}
				d := recv(t, ctx, sub)
				if !produced[d.ID()] {
					t.Fatalf("delivered %s, never enqueued", d.ID())
				}
				got++
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			lost := len(produced) - got
			t.Logf("%d of %d messages lost", lost, len(produced))
			if lost <= 0 || tc.maxLost > 0 && lost > tc.maxLost {
				t.Errorf("%d of %d messages lost; want some, at most %d", lost, len(produced), tc.maxLost)
			}
		})
	}
}

// TestFsyncFailureExits makes the log's fsync fail (injected EIO): the
// server must exit at once with status 1 and one ERROR line naming the
// cause, and a restart recovers every acknowledged message.
func TestFsyncFailureExits(t *testing.T) {
	bin := filatest.RaceFaultBinary(t)
	dir := t.TempDir()
	trigger := filepath.Join(t.TempDir(), "fail-fsync")
	p := startProc(t, bin, dir, "FILA_TEST_FAIL_FSYNC_FILE="+trigger)
	if p.Addr == "" {
		t.Fatalf("fila-server did not start:\n%s", p.Log())
	}
	ctx := ctxT(t, 3*time.Minute)
	c := connect(t, p.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("sync")); err != nil {
		t.Fatal(err)
	}
	id, err := c.Producer().Send(ctx, fila.NewMessage("sync", []byte("durable")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Send(ctx, fila.NewMessage("sync", []byte("lost"))); err == nil {
		t.Fatalf("enqueue with a failing fsync = nil; want an error")
	}
	if code := exitCode(t, p); code != 1 {
		t.Fatalf("fila-server exited with %d after a failed fsync; want 1", code)
	}
	log := p.Log()
	if n := strings.Count(log, "level=ERROR"); n != 1 || !strings.Contains(log, "storage failed") || !strings.Contains(log, "input/output error") {
		t.Errorf("log holds %d ERROR lines; want one naming the failed fsync:\n%s", n, log)
	}
	if strings.Contains(log, "panic") || strings.Contains(log, "DATA RACE") {
		t.Errorf("log shows a panic or a race:\n%s", log)
	}

	p = startProc(t, filatest.Binary(t), dir)
	if p.Addr == "" {
		t.Fatalf("restart after a failed fsync did not start:\n%s", p.Log())
	}
	c = connect(t, p.Addr)
	sub, err := c.Consumer().Subscribe(ctx, "sync")
	if err != nil {
		t.Fatal(err)
	}
	if d := recv(t, ctx, sub); d.ID() != id {
		t.Errorf("after restart delivered %s (%q); want the acknowledged %s", d.ID(), d.Payload(), id)
	}
}

// TestShutdownWhileNacking sends SIGTERM to a race-built server while a
// consumer nacks on a queue with an on_failure hook: the server must exit
// 0 with no panic and no data race. FILA_SHUTDOWN_LOOPS sets the number of
// runs (default 3).
func TestShutdownWhileNacking(t *testing.T) {
	bin := filatest.RaceFaultBinary(t)
	loops := 3
	if v := os.Getenv("FILA_SHUTDOWN_LOOPS"); v != "" {
		loops, _ = strconv.Atoi(v)
	}
	for i := range loops {
		p := startProc(t, bin, t.TempDir())
		if p.Addr == "" {
			t.Fatalf("fila-server did not start:\n%s", p.Log())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		c, err := fila.Connect(ctx, p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		spec := fila.NewQueueSpec("nacks").OnFailure(`function on_failure(msg) return {action = "retry"} end`)
		if err := c.Admin().CreateQueue(ctx, spec); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			var batch []*fila.Message
			for range 50 {
				batch = append(batch, fila.NewMessage("nacks", []byte("x")))
			}
			if _, err := c.Producer().SendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := c.Consumer().Subscribe(ctx, "nacks", fila.Prefetch(64))
		if err != nil {
			t.Fatal(err)
		}
		var nacked atomic.Int64
		go func() {
			for d := range sub.C() {
				if d.Nack(ctx, "boom") == nil {
					nacked.Add(1)
				}
			}
		}()
		for nacked.Load() < 300 {
			time.Sleep(time.Millisecond)
		}
		p.Stop(2 * time.Minute)
		code := exitCode(t, p)
		cancel()
		c.Close()
		log := p.Log()
		if code != 0 || strings.Contains(log, "panic") || strings.Contains(log, "DATA RACE") {
			t.Fatalf("run %d: SIGTERM while nacking: exit %d; want 0, no panic, no race:\n%s", i, code, log)
		}
	}
}
