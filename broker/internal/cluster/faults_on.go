//go:build filafaults

package cluster

import (
	"os"
	"time"
)

// Fault injection for end-to-end tests of real fila-server processes,
// compiled only with -tags filafaults: FILA_TEST_SNAPSHOT_PAUSE (a
// duration) holds the node for that long between making a received
// snapshot durable in its log and installing it, so that a test can kill
// it in between.
func init() {
	d, err := time.ParseDuration(os.Getenv("FILA_TEST_SNAPSHOT_PAUSE"))
	if err != nil || d <= 0 {
		return
	}
	snapshotStored = func() { time.Sleep(d) }
}
