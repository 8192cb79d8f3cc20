package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/tmpfs"
)

// spaceFaults makes d's commits fail with ENOSPC while fail is set, and
// report free bytes as free.
type spaceFaults struct {
	fail atomic.Bool
	free atomic.Int64
}

func installSpaceFaults(d *Disk) *spaceFaults {
	f := &spaceFaults{}
	d.hooks.afterWrite = func() error {
		if f.fail.Load() {
			return &fs.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
		}
		return nil
	}
	d.hooks.freeSpace = func() (int64, error) { return f.free.Load(), nil }
	d.checkEvery = time.Millisecond
	return f
}

func growth(kv ...string) *Batch {
	b := batchOf(kv...)
	b.RefuseWhenFull()
	return b
}

// waitFor polls cond until it holds; the test's own deadline bounds it.
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

func reserveSize(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, reserveName))
	if errors.Is(err, fs.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestNoSpace walks the disk-full state machine with an injected ENOSPC:
// the first failure frees the reserve and the commit goes through (its
// growth group refused, nothing of it written); while full, growth is
// refused and settlements are written; once space returns the reserve is
// back and growth is accepted, with one ERROR and one INFO line in all.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	d := openT(t, dir, Options{ReserveSize: 1 << 20, Logger: logTo(&logs, slog.LevelInfo)}, false)
	if got := reserveSize(t, dir); got != 1<<20 {
		t.Fatalf("reserve file holds %d bytes; want %d", got, 1<<20)
	}
	f := installSpaceFaults(d)
	// Room for a small commit, not for the reserve and a segment: a commit
	// that fails after the reserve is gone waits and retries; the store
	// stays full.
	f.free.Store(1 << 20)
	apply(t, d, "a=1", "b=2")

	// The write fails for lack of space: the store undoes it, frees the
	// reserve and writes the group again.
	f.fail.Store(true)
	var done atomic.Bool
	go func() {
		waitFor(func() bool { return d.Health().Full })
		f.fail.Store(false)
		done.Store(true)
	}()
	settled := make(chan error, 1)
	d.ApplyAsync(growth("g0", "x"), func(err error) { settled <- err })
	if err := d.Apply(batchOf("g1", "x")); err != nil {
		t.Fatalf("Apply of the group that hit ENOSPC = %v; want it written from the reserve", err)
	}
	if err := <-settled; !errors.Is(err, ErrNoSpace) {
		t.Fatalf("growth group in the commit that hit ENOSPC = %v; want ErrNoSpace", err)
	}
	waitFor(done.Load)
	if h := d.Health(); !h.Full || h.Err != nil {
		t.Fatalf("Health() = %+v; want full, no error", h)
	}
	if !d.Stats().Full {
		t.Errorf("Stats().Full = false while full")
	}
	if got := reserveSize(t, dir); got != -1 {
		t.Errorf("reserve file holds %d bytes while full; want it deleted", got)
	}

	// While full: growth is refused and nothing of it written; settlements
	// go on.
	err := d.Apply(growth("g2", "x"))
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, fault.ErrResourceExhausted) {
		t.Fatalf("Apply of growth while full = %v; want ErrNoSpace", err)
	}
	apply(t, d, "-a", "c=3")
	if diff := diffState(dump(t, d), map[string]string{"b": "2", "c": "3", "g1": "x"}); diff != "" {
		t.Errorf("state while full: %s", diff)
	}

	// Space returns: the reserve is made again and growth accepted.
	f.free.Store(64 << 20)
	waitFor(func() bool { return !d.Health().Full })
	if got := reserveSize(t, dir); got != 1<<20 {
		t.Errorf("reserve file holds %d bytes after space returned; want %d", got, 1<<20)
	}
	if err := d.Apply(growth("g3", "y")); err != nil {
		t.Fatalf("Apply of growth after space returned = %v", err)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "data disk is full") {
		t.Errorf("logged %d ERROR lines; want one about the full disk:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "level=INFO"); n != 1 || !strings.Contains(logs.String(), "free space is back") {
		t.Errorf("logged %d INFO lines; want one about writes resuming:\n%s", n, logs.String())
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	d = openT(t, dir, Options{ReserveSize: 1 << 20}, false)
	if diff := diffState(dump(t, d), map[string]string{"b": "2", "c": "3", "g1": "x", "g3": "y"}); diff != "" {
		t.Errorf("state after reopening: %s", diff)
	}
}

// TestNoSpaceStartsSegment: a commit that started a new segment file
// fails for lack of space; the store removes the new file, cuts the old
// tail back, and the retried commit lays the log out as if nothing had
// happened.
func TestNoSpaceStartsSegment(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{SegmentSize: 4096, ReserveSize: 4096}, false)
	f := installSpaceFaults(d)
	v := strings.Repeat("v", 1000)
	for i := range 3 {
		apply(t, d, fmt.Sprintf("k%d=%s", i, v))
	}
	segs := d.Stats().Segments
	f.fail.Store(true)
	fails := 0
	d.hooks.afterWrite = func() error {
		if f.fail.Load() && len(d.writes) > 1 {
			fails++
			f.fail.Store(false)
			return &fs.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
		}
		return nil
	}
	var b Batch
	for i := 3; i < 6; i++ {
		b.Put(fmt.Appendf(nil, "k%d", i), []byte(v))
	}
	if err := d.Apply(&b); err != nil {
		t.Fatal(err)
	}
	if fails != 1 || d.Stats().Segments <= segs {
		t.Fatalf("the failing commit did not start a segment (fails %d, segments %d -> %d)", fails, segs, d.Stats().Segments)
	}
	apply(t, d, "after=1")
	want := dump(t, d)
	if len(entries(t, dir)) != 5 {
		t.Errorf("log holds %d entries; want 5 (the failed write undone)", len(entries(t, dir)))
	}
	d.Close()
	d = openT(t, dir, Options{SegmentSize: 4096}, false)
	if diff := diffState(dump(t, d), want); diff != "" {
		t.Errorf("state after reopening: %s", diff)
	}
}

// TestNoSpaceWaits: with no reserve, a settlement that finds no space
// waits for it (growth is refused at once) and is written once space
// returns; Close ends the wait with ErrNoSpace.
func TestNoSpaceWaits(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	d := openT(t, dir, Options{Logger: logTo(&logs, slog.LevelInfo)}, false)
	f := installSpaceFaults(d)
	apply(t, d, "a=1")
	f.fail.Store(true)
	if err := d.Apply(growth("g", "x")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Apply of growth with no space and no reserve = %v; want ErrNoSpace", err)
	}
	var del Batch
	del.Delete([]byte("a"))
	settled := make(chan error, 1)
	d.ApplyAsync(&del, func(err error) { settled <- err })
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-settled:
		t.Fatalf("a settlement completed with %v while there was no space; want it to wait", err)
	default:
	}
	f.fail.Store(false)
	f.free.Store(1 << 20)
	if err := <-settled; err != nil {
		t.Fatalf("settlement after space returned = %v", err)
	}
	if _, err := d.Get([]byte("a")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(a) after its delete = %v; want ErrNotFound", err)
	}
	if !strings.Contains(logs.String(), "writes wait for free space") {
		t.Errorf("the wait was not logged:\n%s", logs.String())
	}

	// Close ends a wait.
	f.fail.Store(true)
	f.free.Store(0)
	var put Batch
	put.Put([]byte("b"), []byte("2"))
	d.ApplyAsync(&put, func(err error) { settled <- err })
	if err := d.Close(); err != nil {
		t.Fatalf("Close while waiting for space = %v", err)
	}
	if err := <-settled; !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a group waiting for space at Close = %v; want ErrNoSpace", err)
	}
}

// TestFsyncFailureIsFatal: an fsync error, whatever its errno, stops the
// store for good and closes Failed; it is never retried as a lack of space.
func TestFsyncFailureIsFatal(t *testing.T) {
	d := openT(t, t.TempDir(), Options{ReserveSize: 4096}, false)
	d.hooks.afterWrite = func() error { return &fs.PathError{Op: "sync", Path: "segment", Err: syscall.ENOSPC} }
	if err := d.Apply(batchOf("a", "1")); err == nil || !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("Apply with a failing fsync = %v; want the sticky error", err)
	}
	select {
	case <-d.Failed():
	default:
		t.Fatal("Failed() not closed after a failed fsync")
	}
	if h := d.Health(); h.Err == nil || h.Full {
		t.Errorf("Health() = %+v; want Err set, not full", h)
	}
}

// TestNoSpaceTmpfs fills a real file system: writes fail part-way with a
// real ENOSPC. Every acknowledged group survives, settlements go on while
// full, a reopen on the full disk works, and growth resumes by itself once
// a filler file is deleted.
func TestNoSpaceTmpfs(t *testing.T) {
	mnt := tmpfs.Mount(t, 4<<20)
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 512<<10), 0o640); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "data")
	opts := Options{SegmentSize: 64 << 10, ReserveSize: 256 << 10}
	d := openT(t, dir, opts, true)
	d.checkEvery = 5 * time.Millisecond
	want := map[string]string{}
	v := strings.Repeat("p", 2000)
	full := false
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("m/%06d", i)
		err := d.Apply(growth(k, v))
		if errors.Is(err, ErrNoSpace) {
			full = true
			break
		}
		if err != nil {
			t.Fatalf("Apply %d = %v", i, err)
		}
		want[k] = v
	}
	if !full || !d.Health().Full {
		t.Fatalf("4 MiB never filled (full %v, Health %+v)", full, d.Health())
	}
	if d.Health().Err != nil {
		t.Fatalf("Health().Err = %v after a full disk; want none", d.Health().Err)
	}
	d.Close()

	// Reopen on the full disk, then settle: delete every other message.
	d = openT(t, dir, opts, true)
	d.checkEvery = 5 * time.Millisecond
	if diff := diffState(dump(t, d), want); diff != "" {
		t.Fatalf("state after reopening on a full disk: %s", diff)
	}
	i := 0
	for k := range want {
		if i++; i%2 == 0 {
			continue
		}
		var b Batch
		b.Delete([]byte(k))
		if err := d.Apply(&b); err != nil {
			t.Fatalf("delete while full = %v", err)
		}
		delete(want, k)
	}
	// Free space: growth resumes without a reopen.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(func() bool { return !d.Health().Full })
	if err := d.Apply(growth("after", "1")); err != nil {
		t.Fatalf("Apply after space returned = %v", err)
	}
	want["after"] = "1"
	d.Close()
	d = openT(t, dir, opts, false)
	if diff := diffState(dump(t, d), want); diff != "" {
		t.Errorf("state after reopening: %s", diff)
	}
	d.Close()
}
