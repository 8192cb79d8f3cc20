package store

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var killsFlag = flag.Int("store.kills", 25, "child processes TestKill9 kills")

const (
	killDirEnv  = "FILA_STORE_KILL9_DIR"
	killSeedEnv = "FILA_STORE_KILL9_SEED"
	killWriters = 4 // writer 0 pipelines ApplyAsync; the others Apply
)

var killOpts = Options{SegmentSize: 64 << 10}

// killGroup is group n (from 1) of writer w: it sets w<w>/last to n, puts
// one to four keys of its own, and deletes the keys of group n-3 unless
// that group's number is a multiple of 5 (those live on, so that old
// segments keep live records and compaction copies them).
func killGroup(seed uint64, w, n int) (puts map[string][]byte, deletes []string) {
	puts = killPuts(seed, w, n)
	if m := n - 3; m > 0 && m%5 != 0 {
		for k := range killPuts(seed, w, m) {
			if !strings.HasSuffix(k, "/last") {
				deletes = append(deletes, k)
			}
		}
	}
	return puts, deletes
}

func killPuts(seed uint64, w, n int) map[string][]byte {
	rng := rand.New(rand.NewPCG(seed^uint64(w), uint64(n)))
	puts := map[string][]byte{fmt.Sprintf("w%d/last", w): []byte(strconv.Itoa(n))}
	for i := range 1 + rng.IntN(4) {
		puts[fmt.Sprintf("w%d/k/%08d/%d", w, n, i)] = bytes.Repeat([]byte{byte(n + i)}, rng.IntN(3000))
	}
	return puts
}

// killModel is writer w's keys after its groups 1..k.
func killModel(seed uint64, w, k int) map[string]string {
	st := map[string]string{}
	for n := 1; n <= k; n++ {
		puts, deletes := killGroup(seed, w, n)
		for key, v := range puts {
			st[key] = string(v)
		}
		for _, key := range deletes {
			delete(st, key)
		}
	}
	return st
}

// TestKill9 runs a child process that applies groups and reports each
// durable one on stdout, kills it with SIGKILL at a random moment, reopens
// the store and checks that every reported group is present, whole, and
// that no group is present in part. It repeats -store.kills times on the
// same directory.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes; skipped in -short mode")
	}
	dir := t.TempDir()
	s := seed(t)
	rng := rand.New(rand.NewPCG(s, 9))
	reopens := 0
	for kill := range *killsFlag {
		reported := make([]int, killWriters)
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$")
		cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killSeedEnv+"="+strconv.FormatUint(s, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		started := make(chan struct{})
		var once sync.Once
		read := make(chan struct{})
		go func() {
			defer close(read)
			for lines.Scan() {
				var w, n int
				if _, err := fmt.Sscanf(lines.Text(), "durable %d %d", &w, &n); err == nil {
					reported[w] = max(reported[w], n)
					once.Do(func() { close(started) })
				}
			}
		}()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("kill %d: child reported nothing in 30s", kill)
		}
		time.Sleep(time.Duration(5+rng.IntN(80)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-read
		cmd.Wait()

		d, err := Open(dir, Options{SegmentSize: killOpts.SegmentSize, Logger: quiet})
		if err != nil {
			t.Fatalf("kill %d: Open = %v", kill, err)
		}
		reopens++
		for w := range killWriters {
			prefix := fmt.Sprintf("w%d/", w)
			got := map[string]string{}
			err := d.Scan([]byte(prefix), []byte(fmt.Sprintf("w%d0", w)), func(k, v []byte) error {
				got[string(k)] = string(v)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			last, _ := strconv.Atoi(got[prefix+"last"])
			if last < reported[w] {
				t.Fatalf("kill %d: writer %d: recovered through group %d; child reported group %d durable", kill, w, last, reported[w])
			}
			if diff := diffState(got, killModel(s, w, last)); diff != "" {
				t.Fatalf("kill %d: writer %d: state is not that after groups 1..%d: %s", kill, w, last, diff)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if kill == *killsFlag-1 {
			t.Logf("%d kills; last run reported groups %v", reopens, reported)
		}
	}
}

// TestKill9Child is the child of TestKill9; it does nothing unless run by
// it. It applies groups until killed, printing "durable <writer> <group>"
// for each acknowledged one, and exits by itself after 30 seconds.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("run by TestKill9")
	}
	s, _ := strconv.ParseUint(os.Getenv(killSeedEnv), 10, 64)
	opts := killOpts
	opts.Logger = quiet
	d, err := Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	report := func(w, n int) {
		mu.Lock()
		defer mu.Unlock()
		os.Stdout.WriteString(fmt.Sprintf("durable %d %d\n", w, n)) // one write(2): visible to the parent at once
	}
	batch := func(w, n int) *Batch {
		b := new(Batch)
		puts, deletes := killGroup(s, w, n)
		for _, k := range deletes {
			b.Delete([]byte(k))
		}
		for k, v := range puts {
			b.Put([]byte(k), v)
		}
		return b
	}
	next := func(w int) int {
		v, err := d.Get(fmt.Appendf(nil, "w%d/last", w))
		if err != nil {
			return 1
		}
		n, _ := strconv.Atoi(string(v))
		return n + 1
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	for w := 1; w < killWriters; w++ {
		go func() {
			for n := next(w); ; n++ {
				if err := d.Apply(batch(w, n)); err != nil {
					fail(err)
				}
				report(w, n)
			}
		}()
	}
	go func() {
		slots := make(chan struct{}, 64)
		for n := next(0); ; n++ {
			slots <- struct{}{}
			d.ApplyAsync(batch(0, n), func(err error) {
				if err != nil {
					fail(err)
				}
				report(0, n)
				<-slots
			})
		}
	}()
	time.Sleep(30 * time.Second)
	os.Exit(0)
}
