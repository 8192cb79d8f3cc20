// Package tmpfs mounts small tmpfs file systems for tests that need a
// disk that really fills up (ENOSPC from the kernel, not a fake).
package tmpfs

import (
	"runtime"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new temporary directory, returns
// the directory, and unmounts it when the test ends. It skips the test
// where it cannot mount: off Linux, or without root (the CI runners have
// it).
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("tmpfs needs Linux")
	}
	dir := t.TempDir()
	if err := mount(dir, size); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v (the test needs root)", dir, err)
	}
	t.Cleanup(func() {
		if err := unmount(dir); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
