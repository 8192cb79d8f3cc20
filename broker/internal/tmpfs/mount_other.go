//go:build !linux

package tmpfs

import "errors"

func mount(string, int64) error { return errors.New("tmpfs needs Linux") }

func unmount(string) error { return nil }
