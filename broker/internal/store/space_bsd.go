//go:build darwin || freebsd

package store

import (
	"os"
	"syscall"
)

// preallocate allocates the first size bytes of f by writing zeros.
func preallocate(f *os.File, size int64) error { return writeZeros(f, size) }

// freeSpace returns the bytes available to the process on the file system
// holding dir.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
