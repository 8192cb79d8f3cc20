package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// A segment is one file of the log, named by the log index of its first
// record (20 decimal digits, as tidwall/wal names them).
//
// Fields other than f and refs change only on the committer goroutine (the
// tail's size, count and live bytes) or under Disk.mu held for writing;
// readers hold Disk.mu for reading.
type segment struct {
	id    uint32 // position in the log: ids are consecutive from front to tail
	index uint64 // log index of the first record
	path  string
	f     *os.File // read handle for pread; nil for a dead remnant
	refs  atomic.Int32

	size    int64  // bytes in the file
	synced  int64  // bytes known durable
	n       uint64 // records in the file
	lastOff int64  // offset of the last record's entry
	live    int64  // bytes of put mutations that the index still refers to
	base    uint64 // position of the file's first byte in the whole log, for the cache
}

func segmentName(index uint64) string { return fmt.Sprintf("%020d", index) }

func (s *segment) name() string { return filepath.Base(s.path) }

// acquire takes a reference that keeps s.f open. Call it only while s is
// in Disk.segs, holding Disk.mu.
func (s *segment) acquire() { s.refs.Add(1) }

// release drops a reference; the last one closes the file.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 && s.f != nil {
		s.f.Close()
	}
}

// lastIndex returns the log index of the segment's last record.
func (s *segment) lastIndex() uint64 { return s.index + s.n - 1 }

// A ring keeps the newest bytes of the log in memory, addressed by their
// position in the whole log, so that Get of a value written recently is a
// copy instead of a pread. It holds no per-value structure: memory is
// exactly its capacity, allocated once.
type ring struct {
	mu     sync.RWMutex
	buf    []byte
	lo, hi uint64 // log positions [lo, hi) are in buf
}

// append adds p, which starts at log position pos. If pos is not hi the
// ring restarts at pos.
func (r *ring) append(pos uint64, p []byte) {
	if len(r.buf) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pos != r.hi {
		r.lo, r.hi = pos, pos
	}
	size := uint64(len(r.buf))
	if uint64(len(p)) > size {
		skip := uint64(len(p)) - size
		pos += skip
		p = p[skip:]
		r.lo, r.hi = pos, pos
	}
	end := pos + uint64(len(p))
	if end-r.lo > size {
		r.lo = end - size
	}
	i := pos % size
	n := copy(r.buf[i:], p)
	copy(r.buf, p[n:])
	r.hi = end
}

// read copies len(dst) bytes from log position pos into dst and reports
// whether the ring held them all.
func (r *ring) read(dst []byte, pos uint64) bool {
	if len(r.buf) == 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if pos < r.lo || pos+uint64(len(dst)) > r.hi {
		return false
	}
	size := uint64(len(r.buf))
	i := pos % size
	n := copy(dst, r.buf[i:])
	copy(dst[n:], r.buf)
	return true
}
