//go:build filafaults

package main

import (
	"os"
	"time"
)

// Fault injection for end-to-end tests, compiled only with -tags
// filafaults: FILA_TEST_RECOVERY_PAUSE (a duration) holds the start for
// that long after the store opens and before the queues load, so that a
// test can watch /readyz while recovery runs.
func init() {
	d, err := time.ParseDuration(os.Getenv("FILA_TEST_RECOVERY_PAUSE"))
	if err != nil || d <= 0 {
		return
	}
	recoveryPause = func() { time.Sleep(d) }
}
