//go:build filafaults

package shard

import (
	"os"
	"time"
)

// Fault injection for end-to-end tests of real fila-server processes,
// compiled only with -tags filafaults: FILA_TEST_CLOCK_OFFSET (a
// duration, negative for behind) sets the process's wall clock that far
// from the machine's, as on a node whose clock is wrong. Monotonic time
// is unchanged.
func init() {
	d, err := time.ParseDuration(os.Getenv("FILA_TEST_CLOCK_OFFSET"))
	if err != nil || d == 0 {
		return
	}
	testClock = func() time.Time { return time.Now().Add(d) }
}
