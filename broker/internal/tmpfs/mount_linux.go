package tmpfs

import (
	"fmt"
	"syscall"
)

func mount(dir string, size int64) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
}

func unmount(dir string) error { return syscall.Unmount(dir, 0) }
