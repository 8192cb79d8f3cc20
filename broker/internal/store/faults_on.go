//go:build filafaults

package store

import (
	"io/fs"
	"os"
	"syscall"
)

// Fault injection for end-to-end tests of a real fila-server process,
// compiled only with -tags filafaults: while the file named by
// FILA_TEST_FAIL_FSYNC_FILE exists, every commit's fsync fails with EIO.
func init() {
	path := os.Getenv("FILA_TEST_FAIL_FSYNC_FILE")
	if path == "" {
		return
	}
	testFaults = func(h *hooks) {
		h.afterWrite = func() error {
			if _, err := os.Stat(path); err == nil {
				return &fs.PathError{Op: "sync", Path: "log (injected fault)", Err: syscall.EIO}
			}
			return nil
		}
	}
}
