//go:build !unix

package store

import (
	"os"
	"path/filepath"
)

// lockDir opens dir's LOCK file. Without flock, exclusion is the operator's
// duty on this platform.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o640)
}
