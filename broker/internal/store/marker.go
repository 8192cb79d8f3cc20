package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The durable-position marker.
//
// A crash can tear only the final commit, and recovery cuts a torn final
// commit silently. From the log alone, a newest segment that lost its last
// megabyte, or was deleted, looks the same as a crash: records that were
// durable and acknowledged would vanish with one WARN, or none. The marker
// file (markerName, beside the segments) lets recovery tell the two apart.
// It holds the last durable position of the log, 32 bytes, little endian:
//
//	+----------+----------------+----------------+----------------+------------+
//	| magic 4B | last index 8B  | tail index 8B  | tail size 8B   | CRC-32C 4B |
//	+----------+----------------+----------------+----------------+------------+
//
// Last index is the log index of the last durable record; tail index is
// the first log index of the segment that held it (which names its file);
// tail size is that file's durable size in bytes. The checksum is CRC-32C
// over the 28 bytes before it; the magic is "FDM1".
//
// After each commit's fsync returns, the committer overwrites the marker in
// place with one pwrite, without an fsync of its own. That is safe because
// the marker only ever describes log bytes whose fsync already returned:
// whichever version of the file a crash leaves, the newest or an older
// one, it understates what is durable or states it exactly, never more. An
// understated marker guards fewer records; it never raises a false alarm.
// The marker is fsynced at Open, when a commit starts a new segment (so
// that it names the new tail before the compactor may delete the old one)
// and at Close. A torn write of the marker (its 32 bytes lie in one sector,
// so a torn write is unlikely) fails the checksum, and recovery then logs
// that the check is skipped, as for a missing marker.
//
// Recovery compares the log it replayed (after cutting a torn final
// commit) with the marker: if the log ends before the marker's last index,
// or the marker's tail segment is shorter than its durable size, durable
// data is missing and Open fails, naming the segment, the bytes and the
// records, unless Options.Repair is set. A data directory without a
// marker (written by an older broker) opens as before; the check starts
// with the marker Open writes.
const (
	markerName  = "DURABLE"
	markerSize  = 32
	markerMagic = "FDM1"
)

// A marker is a durable position of the log.
type marker struct {
	last      uint64 // log index of the last durable record
	tailIndex uint64 // first log index of the segment holding it
	tailSize  int64  // durable size of that segment file in bytes
}

func (m marker) encode(buf *[markerSize]byte) {
	copy(buf[0:4], markerMagic)
	binary.LittleEndian.PutUint64(buf[4:], m.last)
	binary.LittleEndian.PutUint64(buf[12:], m.tailIndex)
	binary.LittleEndian.PutUint64(buf[20:], uint64(m.tailSize))
	binary.LittleEndian.PutUint32(buf[28:], crc32.Checksum(buf[:28], castagnoli))
}

// errBadMarker is the cause of a marker file that fails to decode.
var errBadMarker = errors.New("bad durable-position marker")

func decodeMarker(b []byte) (marker, error) {
	if len(b) != markerSize {
		return marker{}, fmt.Errorf("%w: %d bytes, want %d", errBadMarker, len(b), markerSize)
	}
	if string(b[0:4]) != markerMagic {
		return marker{}, fmt.Errorf("%w: unknown magic %q", errBadMarker, b[0:4])
	}
	if crc32.Checksum(b[:28], castagnoli) != binary.LittleEndian.Uint32(b[28:]) {
		return marker{}, fmt.Errorf("%w: checksum mismatch", errBadMarker)
	}
	m := marker{
		last:      binary.LittleEndian.Uint64(b[4:]),
		tailIndex: binary.LittleEndian.Uint64(b[12:]),
		tailSize:  int64(binary.LittleEndian.Uint64(b[20:])),
	}
	if m.tailSize < 0 || m.tailIndex == 0 {
		return marker{}, fmt.Errorf("%w: tail segment %d size %d", errBadMarker, m.tailIndex, m.tailSize)
	}
	return m, nil
}

// readMarker reads the marker in dir. found is false if there is none; a
// marker that does not decode is returned as an error wrapping
// errBadMarker.
func readMarker(dir string) (m marker, found bool, err error) {
	f, err := os.Open(filepath.Join(dir, markerName))
	if errors.Is(err, fs.ErrNotExist) {
		return marker{}, false, nil
	}
	if err != nil {
		return marker{}, false, err
	}
	defer f.Close()
	var buf [markerSize + 1]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return marker{}, false, err
	}
	m, err = decodeMarker(buf[:n])
	return m, true, err
}

// markerFile is the open marker: one buffer, rewritten in place.
type markerFile struct {
	f      *os.File
	buf    [markerSize]byte
	failed bool // a write failed; logged once
}

// openMarker opens (creating) the marker file in dir, writes m to it and
// makes it durable, with the directory entry if it is new.
func openMarker(dir string, m marker, noSync bool) (*markerFile, error) {
	path := filepath.Join(dir, markerName)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, err
	}
	mf := &markerFile{f: f}
	if err := mf.write(m); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(markerSize); err != nil {
		f.Close()
		return nil, err
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, err
		}
		if statErr != nil {
			if err := syncDir(dir); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return mf, nil
}

// write overwrites the marker with m: one pwrite, no allocation.
func (mf *markerFile) write(m marker) error {
	m.encode(&mf.buf)
	_, err := mf.f.WriteAt(mf.buf[:], 0)
	return err
}
