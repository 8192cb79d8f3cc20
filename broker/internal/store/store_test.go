package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/tidwall/wal"
)

// both runs f against a fresh Disk and a fresh Mem.
func both(t *testing.T, f func(t *testing.T, s store)) {
	t.Run("disk", func(t *testing.T) { f(t, openT(t, t.TempDir(), Options{SegmentSize: 1024}, false)) })
	t.Run("mem", func(t *testing.T) {
		m := NewMem()
		t.Cleanup(func() { m.Close() })
		f(t, m)
	})
}

func apply(t *testing.T, s store, ops ...string) {
	t.Helper()
	var b Batch
	for _, op := range ops {
		if k, ok := strings.CutPrefix(op, "-"); ok {
			b.Delete([]byte(k))
			continue
		}
		k, v, _ := strings.Cut(op, "=")
		b.Put([]byte(k), []byte(v))
	}
	if err := s.Apply(&b); err != nil {
		t.Fatalf("Apply(%q) = %v", ops, err)
	}
}

func TestGroups(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		apply(t, s, "a=1", "b=2", "c=3")
		apply(t, s, "b=20", "-c", "d=4")
		apply(t, s, "e=5", "-e", "f=6", "f=60") // within a group the later mutation wins
		apply(t, s, "-nothing")
		apply(t, s)
		want := map[string]string{"a": "1", "b": "20", "d": "4", "f": "60"}
		if d := diffState(dump(t, s), want); d != "" {
			t.Fatal(d)
		}
		if _, err := s.Get([]byte("c")); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v; want ErrNotFound", "c", err)
		}
	})
}

func TestScanRanges(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		apply(t, s, "a=1", "ab=2", "b=3", "b\x00=4", "c=5", "\xff=6", "=7")
		tests := []struct {
			start, end string
			nilEnd     bool
			want       string
		}{
			{"", "", true, "|a|ab|b|b\x00|c|\xff"},
			{"a", "b", false, "a|ab"},
			{"ab", "c", false, "ab|b|b\x00"},
			{"b", "b\x00", false, "b"},
			{"c", "", true, "c|\xff"},
			{"d", "e", false, ""},
			{"b", "a", false, ""},
		}
		for _, tc := range tests {
			var end []byte
			if !tc.nilEnd {
				end = []byte(tc.end)
			}
			var got []string
			err := s.Scan([]byte(tc.start), end, func(k, v []byte) error {
				got = append(got, string(k))
				return nil
			})
			if g := strings.Join(got, "|"); err != nil || g != tc.want {
				t.Errorf("Scan(%q, %q) = %q, %v; want %q", tc.start, end, g, err, tc.want)
			}
			got = got[:0]
			err = s.ScanKeys([]byte(tc.start), end, func(k []byte) error {
				got = append(got, string(k))
				return nil
			})
			if g := strings.Join(got, "|"); err != nil || g != tc.want {
				t.Errorf("ScanKeys(%q, %q) = %q, %v; want %q", tc.start, end, g, err, tc.want)
			}
		}
		stop := errors.New("stop")
		n := 0
		err := s.Scan(nil, nil, func(k, v []byte) error {
			n++
			if n == 2 {
				return stop
			}
			return nil
		})
		if err != stop || n != 2 {
			t.Errorf("Scan with fn failing at key 2 = %v after %d keys; want %v after 2", err, n, stop)
		}
	})
}

// TestScanSnapshot checks that a scan sees one moment: groups applied
// while it runs are not visible to it, in part or whole.
func TestScanSnapshot(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		apply(t, s, "a=old", "m=old", "z=old")
		var got []string
		err := s.Scan(nil, nil, func(k, v []byte) error {
			if string(k) == "a" {
				apply(t, s, "a=new", "m=new", "z=new", "n=new")
			}
			got = append(got, string(k)+"="+string(v))
			return nil
		})
		if g := strings.Join(got, " "); err != nil || g != "a=old m=old z=old" {
			t.Errorf("Scan during Apply = %q, %v; want %q", g, err, "a=old m=old z=old")
		}
		if v, _ := s.Get([]byte("n")); string(v) != "new" {
			t.Errorf("Get(n) after Scan = %q; want new", v)
		}
	})
}

func TestApplyAsyncOrder(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		const n = 500
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		wg.Add(n)
		for i := range n {
			b := new(Batch)
			b.Put([]byte("counter"), fmt.Appendf(nil, "%d", i))
			s.ApplyAsync(b, func(err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("done(%d) = %v", i, err)
				}
				// Visible when done runs: the value is this group's or a later one's.
				v, _ := s.Get([]byte("counter"))
				var got int
				fmt.Sscan(string(v), &got)
				if got < i {
					t.Errorf("in done(%d), Get(counter) = %d; want >= %d", i, got, i)
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
		}
		wg.Wait()
		for i, g := range order {
			if g != i {
				t.Fatalf("done call %d was for group %d; want submission order", i, g)
			}
		}
	})
}

func TestLimits(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		var b Batch
		b.Put([]byte("ok"), []byte("1"))
		b.Put(make([]byte, MaxKeySize+1), nil)
		if err := s.Apply(&b); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Apply(oversized key) = %v; want ErrTooLarge", err)
		}
		b.Reset()
		b.Delete(make([]byte, MaxKeySize+1))
		if err := s.Apply(&b); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Apply(oversized delete) = %v; want ErrTooLarge", err)
		}
		if _, err := s.Get([]byte("ok")); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(ok) after failed group = %v; want ErrNotFound (nothing of it applied)", err)
		}
		b.Reset()
		b.Put(make([]byte, MaxKeySize), make([]byte, 100))
		if err := s.Apply(&b); err != nil {
			t.Errorf("Apply(key of MaxKeySize) = %v", err)
		}
		if err := s.Apply(nil); err != nil {
			t.Errorf("Apply(nil) = %v", err)
		}
	})
}

func TestClosed(t *testing.T) {
	both(t, func(t *testing.T, s store) {
		apply(t, s, "a=1")
		if err := s.Close(); err != nil {
			t.Fatalf("Close() = %v", err)
		}
		var b Batch
		b.Put([]byte("b"), nil)
		if err := s.Apply(&b); !errors.Is(err, ErrClosed) || !errors.Is(err, fault.ErrUnavailable) {
			t.Errorf("Apply after Close = %v; want ErrClosed wrapping fault.ErrUnavailable", err)
		}
		called := false
		s.ApplyAsync(&b, func(err error) { called = errors.Is(err, ErrClosed) })
		if !called {
			t.Errorf("ApplyAsync after Close did not call done(ErrClosed)")
		}
		if _, err := s.Get([]byte("a")); !errors.Is(err, ErrClosed) {
			t.Errorf("Get after Close = %v; want ErrClosed", err)
		}
		if err := s.Scan(nil, nil, func(k, v []byte) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Errorf("Scan after Close = %v; want ErrClosed", err)
		}
	})
}

// TestReopen checks durability across Close and Open over many segments,
// and that values are read from the right log positions.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048}
	d := openT(t, dir, opts, false)
	want := map[string]string{}
	for i := range 300 {
		var b Batch
		for j := range i%5 + 1 {
			k := fmt.Sprintf("k%04d", (i*7+j*13)%400)
			v := strings.Repeat(string(rune('a'+j)), (i*31+j)%300)
			if (i+j)%4 == 0 {
				b.Delete([]byte(k))
				delete(want, k)
			} else {
				b.Put([]byte(k), []byte(v))
				want[k] = v
			}
		}
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	if diff := diffState(dump(t, d), want); diff != "" {
		t.Fatalf("before reopen: %s", diff)
	}
	st := d.Stats()
	if st.Segments < 10 {
		t.Fatalf("Stats().Segments = %d; want many, the test needs segment changes", st.Segments)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openT(t, dir, opts, false)
	if diff := diffState(dump(t, d), want); diff != "" {
		t.Fatalf("after reopen: %s", diff)
	}
	st2 := d.Stats()
	if st2.Keys != st.Keys || st2.LiveBytes != st.LiveBytes || st2.LogBytes != st.LogBytes || st2.Segments != st.Segments {
		t.Errorf("Stats after reopen = %+v; want keys, bytes and segments of %+v", st2, st)
	}
	// Reads from the files, the cache being empty after Open.
	if st2.CacheMisses == 0 || st2.CacheHits != 0 {
		t.Errorf("Stats after reopen and reads: cache hits %d, misses %d; want reads from files", st2.CacheHits, st2.CacheMisses)
	}
}

// TestLayoutMatchesLog checks the store's record placement against what
// tidwall/wal itself reads back: every record the log holds is, byte for
// byte, the record at the position the store computed.
func TestLayoutMatchesLog(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{SegmentSize: 700}, false)
	type rec struct {
		seg  string
		off  int64
		data []byte
	}
	var recs []rec
	var wg sync.WaitGroup
	for i := range 400 {
		// Groups of varied sizes, some larger than a segment, submitted
		// asynchronously so that commits hold several.
		b := new(Batch)
		b.Put(fmt.Appendf(nil, "key%d", i), bytes.Repeat([]byte{byte(i)}, (i*37)%1500))
		wg.Add(1)
		d.ApplyAsync(b, func(err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	d.mu.RLock()
	for _, s := range d.segs {
		r := &entryReader{f: s.f, size: s.size}
		for {
			off, _, data, err := r.next()
			if err != nil {
				break
			}
			recs = append(recs, rec{s.name(), off, bytes.Clone(data)})
		}
		if r.off != s.size {
			t.Errorf("segment %s: records end at %d; store says size %d", s.name(), r.off, s.size)
		}
	}
	d.mu.RUnlock()
	last := d.lastIndex
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(dir, &wal.Options{NoSync: true, AllowEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first, _ := l.FirstIndex()
	lastLog, _ := l.LastIndex()
	if first != 1 || lastLog != last || int(last) != len(recs) {
		t.Fatalf("log holds %d..%d; store wrote %d records, last index %d", first, lastLog, len(recs), last)
	}
	for i, r := range recs {
		data, err := l.Read(uint64(i + 1))
		if err != nil || !bytes.Equal(data, r.data) {
			t.Fatalf("log record %d = %d bytes, %v; store placed %d bytes at segment %s offset %d", i+1, len(data), err, len(r.data), r.seg, r.off)
		}
		if want := segmentName(uint64(i + 1)); r.off == 0 && r.seg != want {
			t.Errorf("record %d begins segment %s; want %s", i+1, r.seg, want)
		}
	}
}

// TestStickyError injects a failed fsync: the group fails, every later
// group fails, and reads serve the last durable state.
func TestStickyError(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{}, false)
	apply(t, d, "a=1")
	d.hooks.afterWrite = func() error { return errors.New("fsync: input/output error") }
	var b Batch
	b.Put([]byte("b"), []byte("2"))
	if err := d.Apply(&b); err == nil || !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("Apply with failing fsync = %v; want an error wrapping fault.ErrUnavailable", err)
	}
	d.hooks.afterWrite = nil
	b.Reset()
	b.Put([]byte("c"), []byte("3"))
	if err := d.Apply(&b); err == nil {
		t.Fatalf("Apply after a failed fsync = nil; want the sticky error")
	}
	if diff := diffState(dump(t, d), map[string]string{"a": "1"}); diff != "" {
		t.Errorf("state after failed fsync: %s", diff)
	}
	if err := d.Close(); err == nil {
		t.Errorf("Close after failure = nil; want the sticky error")
	}
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir, Options{}, false)
	if d, err := Open(dir, Options{Logger: quiet}); err == nil {
		d.Close()
		t.Fatalf("second Open(%q) = nil error; want the directory locked", dir)
	}
}

// TestConcurrent runs writers and readers together (run with -race).
func TestConcurrent(t *testing.T) {
	d := openT(t, t.TempDir(), Options{SegmentSize: 4096, CacheSize: 2048}, true)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				var b Batch
				k := fmt.Appendf(nil, "w%d/%03d", w, i%50)
				b.Put(k, bytes.Repeat([]byte{byte(i)}, 100+i))
				if i%3 == 0 {
					b.Delete(fmt.Appendf(nil, "w%d/%03d", w, (i+25)%50))
				}
				if err := d.Apply(&b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				k := fmt.Appendf(nil, "w%d/%03d", i%4, i%50)
				if v, err := d.Get(k); err == nil && len(v) > 0 && len(v) != 100+int(v[0]) && len(v) != 100+int(v[0])+256 {
					t.Errorf("Get(%q) = %d bytes of %d; torn value", k, len(v), v[0])
				}
				if i%50 == 0 {
					d.ScanKeys(nil, nil, func([]byte) error { return nil })
				}
			}
		}()
	}
	wg.Wait()
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
}

func TestCleanDirFinishesTruncation(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write(segmentName(1), "one")
	write(segmentName(5), "five")
	write(segmentName(7)+".START", "start")
	write(segmentName(9), "nine")
	write(segmentName(9)+".START.TEMP", "partial")
	if err := cleanDir(dir, quiet); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{segmentName(7), segmentName(9)}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("cleanDir left %q; want %q", names, want)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, segmentName(7))); string(data) != "start" {
		t.Errorf("segment 7 holds %q; want the START file's bytes", data)
	}
}
