//go:build !linux && !darwin && !freebsd

package store

import (
	"errors"
	"os"
)

// preallocate allocates the first size bytes of f by writing zeros.
func preallocate(f *os.File, size int64) error { return writeZeros(f, size) }

// freeSpace is not available here: a full store then retries its writes
// and its reserve once per interval.
func freeSpace(string) (int64, error) { return 0, errors.ErrUnsupported }
