package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCompactionTerminates: a few live records in groups as large as a
// segment, among much garbage, with small segments. Compact must finish
// and reclaim the garbage: each pass must reclaim SegmentSize bytes besides
// the record it leaves behind (the remnant), or it copies the live records
// forward again and again, each copy group becoming the next remnant,
// without end (as it did before plan counted the remnant out).
func TestCompactionTerminates(t *testing.T) {
	d := openT(t, t.TempDir(), Options{SegmentSize: 2048, CompactionThreshold: 0.6}, false)
	big := strings.Repeat("v", 700)
	for round := range 40 {
		var b Batch
		for i := range 3 {
			b.Put([]byte(fmt.Sprintf("k%d", i)), []byte(big))
		}
		for i := range 6 {
			b.Put([]byte(fmt.Sprintf("g%d.%d", round, i)), []byte(big))
		}
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
		var del Batch
		for i := range 6 {
			del.Delete([]byte(fmt.Sprintf("g%d.%d", round, i)))
		}
		if err := d.Apply(&del); err != nil {
			t.Fatal(err)
		}
	}
	before := d.Stats()
	done := make(chan error, 1)
	go func() { done <- d.Compact() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Compact still running after 20 s: %d passes so far", d.Stats().Compactions)
	}
	st := d.Stats()
	if st.Compactions == 0 || st.LogBytes > before.LogBytes/10 {
		t.Errorf("Compact took the log from %d to %d bytes in %d passes; want a tenth or less", before.LogBytes, st.LogBytes, st.Compactions)
	}
	t.Logf("%+v", st)
}
