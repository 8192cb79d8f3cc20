//go:build filafaults

package peer

import (
	"os"
	"time"
)

// Fault injection for end-to-end tests of real fila-server processes,
// compiled only with -tags filafaults: while the file named by
// FILA_TEST_ISOLATE_FILE exists, the node is cut off from every peer
// (Isolate), and healed when it goes. The file is checked every 20 ms.
func init() {
	path := os.Getenv("FILA_TEST_ISOLATE_FILE")
	if path == "" {
		return
	}
	testFaults = func(t *Transport) {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			isolated := false
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-t.stop:
					return
				case <-tick.C:
				}
				_, err := os.Stat(path)
				switch {
				case err == nil && !isolated:
					t.mu.RLock()
					ids := make([]uint64, 0, len(t.peers))
					for id := range t.peers {
						ids = append(ids, id)
					}
					t.mu.RUnlock()
					t.Isolate(ids...)
					isolated = true
				case err != nil && isolated:
					t.Heal()
					isolated = false
				}
			}
		}()
	}
}
