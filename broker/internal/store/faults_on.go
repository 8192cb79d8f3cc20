//go:build filafaults

package store

import (
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Fault injection for end-to-end tests of a real fila-server process,
// compiled only with -tags filafaults:
//   - while the file named by FILA_TEST_FAIL_FSYNC_FILE exists, every
//     commit's fsync fails with EIO;
//   - while the file named by FILA_TEST_SLOW_FSYNC_FILE exists, every
//     fsync takes longer by the duration the file holds ("100ms"), as on
//     a disk that slows down (commits that need no fsync are not slowed).
func init() {
	fail := os.Getenv("FILA_TEST_FAIL_FSYNC_FILE")
	slow := os.Getenv("FILA_TEST_SLOW_FSYNC_FILE")
	if fail == "" && slow == "" {
		return
	}
	testFaults = func(h *hooks) {
		if fail != "" {
			h.afterWrite = func() error {
				if _, err := os.Stat(fail); err == nil {
					return &fs.PathError{Op: "sync", Path: "log (injected fault)", Err: syscall.EIO}
				}
				return nil
			}
		}
		if slow != "" {
			h.beforeSync = func() {
				if b, err := os.ReadFile(slow); err == nil {
					if d, err := time.ParseDuration(string(b)); err == nil {
						time.Sleep(d)
					}
				}
			}
		}
	}
}
