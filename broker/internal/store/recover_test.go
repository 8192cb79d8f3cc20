package store

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// logBuffer collects log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logTo returns a logger writing text lines at level and above to buf.
func logTo(buf *logBuffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
}

// recPos is where one log entry lies.
type recPos struct {
	seg  string // segment file name
	off  int64  // offset of the entry
	size int64  // bytes of the entry, length prefix included
}

// entries lists every log entry of the segments in dir, in log order.
func entries(t testing.TB, dir string) []recPos {
	t.Helper()
	indexes, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []recPos
	for _, index := range indexes {
		f, err := os.Open(filepath.Join(dir, segmentName(index)))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		r := &entryReader{f: f, size: fi.Size()}
		for {
			off, _, _, err := r.next()
			if err != nil {
				break
			}
			out = append(out, recPos{segmentName(index), off, r.off - off})
		}
		f.Close()
	}
	return out
}

// buildLog applies n single-group commits to a store in a new directory
// with the given segment size, closes it, and returns the directory and
// the workload.
func buildLog(t *testing.T, n int, segSize int64) (string, *workload) {
	t.Helper()
	w := newWorkload(rand.New(rand.NewPCG(5, 6)), n, 25, 120)
	dir := t.TempDir()
	d := openT(t, dir, Options{SegmentSize: segSize}, false)
	for _, b := range w.groups {
		if err := d.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, w
}

func without(groups []*Batch, drop ...int) []*Batch {
	var out []*Batch
	for i, b := range groups {
		if !slices.Contains(drop, i) {
			out = append(out, b)
		}
	}
	return out
}

func readDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(data)
	}
	return files
}

// TestZeroFilledTail appends 1 MiB of zeros to the newest segment, as a
// file system can leave after a crash: Open treats it as one torn region,
// logs one line, keeps every group, and probes no byte of the zeros one
// by one.
func TestZeroFilledTail(t *testing.T) {
	dir, w := buildLog(t, 30, 1<<20)
	path := lastSegment(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	valid := int64(len(data))
	data = append(data, make([]byte, 1<<20)...)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &entryReader{f: f, size: int64(len(data))}
	if _, later, err := laterCommit(r, valid+1, 31); later || err != nil {
		t.Fatalf("laterCommit over zeros = %v, %v; want none", later, err)
	}
	spans, err := listDropped(r, valid, r.size)
	if err != nil || len(spans) != 1 || !spans[0].zeros || spans[0].bytes != 1<<20 {
		t.Fatalf("listDropped over zeros = %+v, %v; want one zero-filled span of 1 MiB", spans, err)
	}
	if r.probes > 4 {
		t.Errorf("scanning 1 MiB of zeros probed %d offsets; want no per-byte work", r.probes)
	}
	f.Close()

	var logs logBuffer
	d, err := Open(dir, Options{Logger: logTo(&logs, slog.LevelInfo)})
	if err != nil {
		t.Fatalf("Open with a zero-filled tail = %v", err)
	}
	defer d.Close()
	if diff := diffState(dump(t, d), w.states[30]); diff != "" {
		t.Errorf("state after cutting the zeros: %s", diff)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "torn final commit") ||
		!strings.Contains(lines[0], "zero_filled=true") || !strings.Contains(lines[0], fmt.Sprintf("bytes=%d", 1<<20)) {
		t.Errorf("Open logged %d lines; want one WARN about a zero-filled torn region of 1 MiB:\n%s", len(lines), logs.String())
	}
	if fi, _ := os.Stat(path); fi.Size() != valid {
		t.Errorf("segment holds %d bytes after Open; want the zeros cut at %d", fi.Size(), valid)
	}
}

// TestTornFinalRecordOneWarn: a torn final record that was never
// acknowledged (the marker does not count it) is still cut silently but
// for one WARN line.
func TestTornFinalRecordOneWarn(t *testing.T) {
	dir, w := buildLog(t, 20, 1<<20)
	ents := entries(t, dir)
	last := ents[len(ents)-1]
	// The marker as it was before the last commit.
	mk := marker{last: uint64(len(ents) - 1), tailIndex: 1, tailSize: last.off}
	var buf [markerSize]byte
	mk.encode(&buf)
	os.WriteFile(filepath.Join(dir, markerName), buf[:], 0o640)
	os.Truncate(filepath.Join(dir, last.seg), last.off+last.size/2)

	var logs logBuffer
	d, err := Open(dir, Options{Logger: logTo(&logs, slog.LevelInfo)})
	if err != nil {
		t.Fatalf("Open with a torn final record = %v", err)
	}
	defer d.Close()
	if diff := diffState(dump(t, d), w.states[19]); diff != "" {
		t.Errorf("state: %s", diff)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "level=WARN msg=\"store: recovery cut the torn final commit\"") {
		t.Errorf("Open logged %d lines; want one WARN:\n%s", n, logs.String())
	}
}

// TestLostTail truncates the newest segment (inside a record and at a
// record boundary) or deletes it: those records were acknowledged, so
// Open refuses to start, naming what is missing, and changes no file;
// with Repair it starts, logs what is missing, and rewrites the marker so
// that the next Open succeeds without Repair.
func TestLostTail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string, ents []recPos) (keep int)
		message string
	}{
		{"truncated mid-record", func(t *testing.T, dir string, ents []recPos) int {
			i := newestMiddle(t, ents)
			os.Truncate(filepath.Join(dir, ents[i].seg), ents[i].off+3)
			return i
		}, "ended at byte"},
		{"truncated at a record boundary", func(t *testing.T, dir string, ents []recPos) int {
			i := newestMiddle(t, ents)
			os.Truncate(filepath.Join(dir, ents[i].seg), ents[i].off)
			return i
		}, "ended at byte"},
		{"newest segment deleted", func(t *testing.T, dir string, ents []recPos) int {
			seg := ents[len(ents)-1].seg
			keep := 0
			for keep < len(ents) && ents[keep].seg != seg {
				keep++
			}
			os.Remove(filepath.Join(dir, seg))
			return keep
		}, "is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, w := buildLog(t, 60, 2048)
			ents := entries(t, dir)
			if ents[len(ents)-1].seg == ents[0].seg {
				t.Fatal("the test needs several segments")
			}
			keep := tc.damage(t, dir, ents)
			before := readDir(t, dir)
			_, err := Open(dir, Options{SegmentSize: 2048, Logger: quiet})
			records := fmt.Sprintf("records %d-%d", keep+1, len(ents))
			if err == nil || !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), records) || !strings.Contains(err.Error(), "storage.repair") {
				t.Fatalf("Open = %v; want a refusal naming %q and %s", err, tc.message, records)
			}
			after := readDir(t, dir)
			delete(before, "LOCK")
			delete(after, "LOCK")
			if !slices.Equal(slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after))) {
				t.Errorf("a refused Open changed the files: %v -> %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
			}
			for name, data := range before {
				if after[name] != data {
					t.Errorf("a refused Open changed %s", name)
				}
			}

			var logs logBuffer
			d, err := Open(dir, Options{SegmentSize: 2048, Repair: true, Logger: logTo(&logs, slog.LevelInfo)})
			if err != nil {
				t.Fatalf("Open with Repair = %v", err)
			}
			if diff := diffState(dump(t, d), w.states[keep]); diff != "" {
				t.Errorf("state after Repair: %s", diff)
			}
			if !strings.Contains(logs.String(), "repair starts without durable records that are missing") || !strings.Contains(logs.String(), records) {
				t.Errorf("Repair did not log what is missing (%s):\n%s", records, logs.String())
			}
			apply(t, d, "after=1")
			d.Close()
			d, err = Open(dir, Options{SegmentSize: 2048, Logger: quiet})
			if err != nil {
				t.Fatalf("Open after Repair, without it = %v", err)
			}
			want := stateOf(append(slices.Clone(w.groups[:keep]), batchOf("after", "1")))
			if diff := diffState(dump(t, d), want); diff != "" {
				t.Errorf("state after reopening: %s", diff)
			}
			d.Close()
		})
	}
}

// TestMissingMarker: a data directory without a marker (from an older
// version) opens, with one INFO line, and gets one.
func TestMissingMarker(t *testing.T) {
	dir, w := buildLog(t, 10, 1<<20)
	os.Remove(filepath.Join(dir, markerName))
	var logs logBuffer
	d, err := Open(dir, Options{Logger: logTo(&logs, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if diff := diffState(dump(t, d), w.states[10]); diff != "" {
		t.Error(diff)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "no durable-position marker") {
		t.Errorf("logged %d lines; want one INFO about the missing marker:\n%s", n, logs.String())
	}
	if _, found, err := readMarker(dir); !found || err != nil {
		t.Errorf("after Open: marker found %v, %v; want one", found, err)
	}
}

// TestRepairKeepsLaterRecords damages the log in several ways and checks
// that Repair drops exactly the damaged records, reporting them, and keeps
// every other group, in every segment.
func TestRepairKeepsLaterRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage damages the entries of dir and returns the indexes (from
		// 0) of the groups it destroyed.
		damage func(t *testing.T, dir string, ents []recPos) []int
	}{
		{"flipped byte in a record", func(t *testing.T, dir string, ents []recPos) []int {
			e := ents[7]
			flip(t, filepath.Join(dir, e.seg), e.off+e.size/2, 0x10)
			return []int{7}
		}},
		{"flipped length prefix", func(t *testing.T, dir string, ents []recPos) []int {
			e := ents[12]
			flip(t, filepath.Join(dir, e.seg), e.off, 0x04)
			return []int{12}
		}},
		{"three records zeroed", func(t *testing.T, dir string, ents []recPos) []int {
			i := 15
			for ents[i].seg != ents[i+2].seg {
				i++
			}
			a, b := ents[i], ents[i+2]
			data, _ := os.ReadFile(filepath.Join(dir, a.seg))
			clear(data[a.off+2 : b.off+b.size-1])
			os.WriteFile(filepath.Join(dir, a.seg), data, 0o640)
			return []int{i, i + 1, i + 2}
		}},
		{"garbage over a record in the newest segment", func(t *testing.T, dir string, ents []recPos) []int {
			i := len(ents) - 5
			e := ents[i]
			data, _ := os.ReadFile(filepath.Join(dir, e.seg))
			rng := rand.New(rand.NewPCG(7, 8))
			for j := e.off; j < e.off+e.size; j++ {
				data[j] = byte(rng.Uint32())
			}
			os.WriteFile(filepath.Join(dir, e.seg), data, 0o640)
			return []int{i}
		}},
		{"middle segment deleted", func(t *testing.T, dir string, ents []recPos) []int {
			seg := ents[30].seg
			var lost []int
			for i, e := range ents {
				if e.seg == seg {
					lost = append(lost, i)
				}
			}
			if lost[0] == 0 || lost[len(lost)-1] == len(ents)-1 {
				t.Fatalf("segment %s holds records %d to %d: the test needs a segment in the middle of the log", seg, lost[0], lost[len(lost)-1])
			}
			os.Remove(filepath.Join(dir, seg))
			return lost
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, w := buildLog(t, 60, 2048)
			ents := entries(t, dir)
			lost := tc.damage(t, dir, ents)
			if _, err := Open(dir, Options{SegmentSize: 2048, Logger: quiet}); err == nil {
				t.Fatalf("Open of a damaged log = nil; want an error")
			}
			var logs logBuffer
			d, err := Open(dir, Options{SegmentSize: 2048, Repair: true, Logger: logTo(&logs, slog.LevelInfo)})
			if err != nil {
				t.Fatalf("Open with Repair = %v", err)
			}
			if testing.Verbose() {
				t.Logf("repair log:\n%s", logs.String())
			}
			want := stateOf(without(w.groups, lost...))
			if diff := diffState(dump(t, d), want); diff != "" {
				t.Errorf("state after Repair differs from every group but %v: %s\n%s", lost, diff, logs.String())
			}
			wantRecords := fmt.Sprintf("records=%d-%d", lost[0]+1, lost[len(lost)-1]+1)
			if !strings.Contains(logs.String(), wantRecords) || strings.Contains(logs.String(), "missing\"") {
				t.Errorf("Repair's log does not report %s:\n%s", wantRecords, logs.String())
			}
			apply(t, d, "after=1")
			d.Close()
			d, err = Open(dir, Options{SegmentSize: 2048, Logger: quiet})
			if err != nil {
				t.Fatalf("reopen after Repair = %v", err)
			}
			want["after"] = "1"
			if diff := diffState(dump(t, d), want); diff != "" {
				t.Errorf("state after reopening: %s", diff)
			}
			d.Close()
		})
	}
}

// TestTrailingBytesInOlderSegment: zeros after the last record of an older
// segment lose nothing (the next segment's first index proves every record
// is there): Open cuts them without Repair, with one line.
func TestTrailingBytesInOlderSegment(t *testing.T) {
	dir, w := buildLog(t, 40, 2048)
	ents := entries(t, dir)
	path := filepath.Join(dir, ents[0].seg)
	data, _ := os.ReadFile(path)
	os.WriteFile(path, append(data, make([]byte, 4096)...), 0o640)
	var logs logBuffer
	d, err := Open(dir, Options{SegmentSize: 2048, Logger: logTo(&logs, slog.LevelInfo)})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer d.Close()
	if diff := diffState(dump(t, d), w.states[40]); diff != "" {
		t.Error(diff)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "no record is lost") {
		t.Errorf("logged %d lines; want one:\n%s", n, logs.String())
	}
}

// TestPadding: padding entries of every size decode as padding, fill their
// bytes exactly, and hold the entry count asked for.
func TestPadding(t *testing.T) {
	for _, k := range []uint64{1, 2, 7} {
		for n := int64(k) * minPaddingEntry; n < int64(k)*minPaddingEntry+300; n++ {
			buf := appendPadding(nil, n, k)
			if int64(len(buf)) != n {
				t.Fatalf("appendPadding(%d, %d) = %d bytes", n, k, len(buf))
			}
			r := &entryReader{f: bytes.NewReader(buf), size: n}
			count := uint64(0)
			for {
				_, _, rec, err := r.next()
				if err != nil {
					if err != io.EOF {
						t.Fatalf("appendPadding(%d, %d): entry %d: %v", n, k, count, err)
					}
					break
				}
				if commit, body, err := verifyRecord(rec); err != nil || commit != 0 || body != len(rec) {
					t.Fatalf("appendPadding(%d, %d): entry %d = %d, %d, %v; want padding", n, k, count, commit, body, err)
				}
				count++
			}
			if count != k {
				t.Fatalf("appendPadding(%d, %d) holds %d entries", n, k, count)
			}
		}
	}
}

func flip(t *testing.T, path string, off int64, mask byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= mask
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

func batchOf(kv ...string) *Batch {
	b := new(Batch)
	for i := 0; i+1 < len(kv); i += 2 {
		b.Put([]byte(kv[i]), []byte(kv[i+1]))
	}
	return b
}

// newestMiddle returns the index of an entry in the middle of the newest
// segment.
func newestMiddle(t *testing.T, ents []recPos) int {
	seg := ents[len(ents)-1].seg
	first := len(ents) - 1
	for first > 0 && ents[first-1].seg == seg {
		first--
	}
	if len(ents)-first < 3 {
		t.Fatalf("the newest segment holds %d entries; the test needs 3", len(ents)-first)
	}
	return (first + len(ents)) / 2
}

var droppedRange = regexp.MustCompile(`records[= ](\d+)-(\d+)`)

// TestRepairRandomDamage flips random bytes of random records and opens
// with Repair: the state must be exactly that of every group but the ones
// the log says were dropped, those must include the damaged ones, and each
// damage may cost at most its own record unless repair says it dropped a
// segment's rest.
func TestRepairRandomDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 9))
	for iter := range 30 {
		dir, w := buildLog(t, 80, 2048)
		ents := entries(t, dir)
		damaged := map[int]bool{}
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(ents))
			e := ents[i]
			flip(t, filepath.Join(dir, e.seg), e.off+rng.Int64N(e.size), byte(1+rng.IntN(255)))
			damaged[i] = true
		}
		var logs logBuffer
		d, err := Open(dir, Options{SegmentSize: 2048, Repair: true, Logger: logTo(&logs, slog.LevelInfo)})
		if err != nil {
			t.Fatalf("iter %d: Open with Repair = %v\n%s", iter, err, logs.String())
		}
		var dropped []int
		for _, m := range droppedRange.FindAllStringSubmatch(logs.String(), -1) {
			lo, _ := strconv.Atoi(m[1])
			hi, _ := strconv.Atoi(m[2])
			for r := lo; r <= hi; r++ {
				if !slices.Contains(dropped, r-1) {
					dropped = append(dropped, r-1)
				}
			}
		}
		for i := range damaged {
			if !slices.Contains(dropped, i) {
				// A flip can leave a record valid only if it hit nothing
				// the checksum covers, which cannot be: every byte of an
				// entry is framing or checksummed.
				t.Errorf("iter %d: record %d was damaged but repair reports no drop of it:\n%s", iter, i+1, logs.String())
			}
		}
		if len(dropped) > len(damaged) && !strings.Contains(logs.String(), "cut") && !strings.Contains(logs.String(), "missing") {
			// Padding only: a flip costs one record, or the records its
			// broken length prefix hid.
			if len(dropped) > 3*len(damaged) {
				t.Errorf("iter %d: %d damaged records cost %d:\n%s", iter, len(damaged), len(dropped), logs.String())
			}
		}
		if diff := diffState(dump(t, d), stateOf(without(w.groups, dropped...))); diff != "" {
			t.Errorf("iter %d: state differs from every group but the dropped %v: %s\n%s", iter, dropped, diff, logs.String())
		}
		d.Close()
	}
}
