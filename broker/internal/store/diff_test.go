package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestDifferential applies the same random groups to a Disk and a Mem and
// compares them after every step, with reads, scans, reopens and
// compactions mixed in. Groups hold puts, deletes and range deletes, of
// general keys and of id keys. Small segments make segment changes, compaction
// copies and truncations frequent.
func TestDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 1))
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048, CacheSize: 4096, CompactionThreshold: 0.6}
	disk := openT(t, dir, opts, true)
	mem := NewMem()
	defer mem.Close()
	key := func() []byte {
		if rng.IntN(3) == 0 { // an id key (index.go)
			return []byte(idKeyIn([]string{"m/q", "m/q.dlq"}[rng.IntN(2)], rng.IntN(30)))
		}
		return fmt.Appendf(nil, "k%02d", rng.IntN(60))
	}
	group := func() *Batch {
		b := new(Batch)
		for range 1 + rng.IntN(5) {
			switch r := rng.IntN(12); {
			case r == 0:
				b.DeleteRange(key(), key())
			case r == 1:
				p := []string{"m/q", "m/q.dlq"}[rng.IntN(2)]
				b.DeleteRange([]byte(p+"\x00"), []byte(p+"\x01"))
			case r < 5:
				b.Delete(key())
			default:
				b.Put(key(), bytes.Repeat([]byte{byte(rng.Uint32())}, rng.IntN(700)))
			}
		}
		return b
	}
	var compactions uint64
	for step := range 1500 {
		switch op := rng.IntN(100); {
		case op < 50:
			b := group()
			errD, errM := disk.Apply(b), mem.Apply(b)
			if errD != nil || errM != nil {
				t.Fatalf("step %d: Apply = %v (disk), %v (mem)", step, errD, errM)
			}
		case op < 60:
			// A burst of asynchronous groups, each submitted to both.
			var wg sync.WaitGroup
			for range 1 + rng.IntN(20) {
				b := group()
				c := *b
				c.data = bytes.Clone(b.data)
				wg.Add(2)
				disk.ApplyAsync(b, func(err error) {
					if err != nil {
						t.Error(err)
					}
					wg.Done()
				})
				mem.ApplyAsync(&c, func(err error) {
					if err != nil {
						t.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
		case op < 75:
			k := key()
			vd, errD := disk.Get(k)
			vm, errM := mem.Get(k)
			if !bytes.Equal(vd, vm) || !errors.Is(errD, errM) && !errors.Is(errM, errD) {
				t.Fatalf("step %d: Get(%q) = %d bytes, %v (disk); %d bytes, %v (mem)", step, k, len(vd), errD, len(vm), errM)
			}
		case op < 85:
			start, end := key(), key()
			if rng.IntN(4) == 0 {
				end = nil
			}
			var gd, gm []string
			disk.Scan(start, end, func(k, v []byte) error { gd = append(gd, fmt.Sprintf("%s:%x", k, v)); return nil })
			mem.Scan(start, end, func(k, v []byte) error { gm = append(gm, fmt.Sprintf("%s:%x", k, v)); return nil })
			if fmt.Sprint(gd) != fmt.Sprint(gm) {
				t.Fatalf("step %d: Scan(%q, %q): disk %d keys, mem %d keys", step, start, end, len(gd), len(gm))
			}
		case op < 92:
			if err := disk.Compact(); err != nil {
				t.Fatalf("step %d: Compact = %v", step, err)
			}
		default:
			compactions += disk.Stats().Compactions // Stats count from Open
			if err := disk.Close(); err != nil {
				t.Fatalf("step %d: Close = %v", step, err)
			}
			disk = openT(t, dir, opts, true)
		}
	}
	if diff := diffState(dump(t, disk), dump(t, mem)); diff != "" {
		t.Fatalf("disk and mem differ at the end: %s", diff)
	}
	st := disk.Stats()
	if compactions += st.Compactions; compactions == 0 {
		t.Errorf("no compaction ran (%+v); the test needs them", st)
	}
	t.Logf("disk: %+v", st)
}
