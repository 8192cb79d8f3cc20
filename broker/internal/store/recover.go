package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Recovery.
//
// Open replays every segment in order and applies each record to the
// index. Records are checked whole (checksum, version, every mutation)
// before any of their mutations is applied, so a group is recovered whole
// or not at all.
//
// The log is written one commit at a time, each commit one write followed
// by one fsync, and a commit's write starts only after the previous
// commit's fsync returned. So only the final commit can be torn, and any
// byte of a later commit on disk proves every earlier commit was durable.
// When a record of the newest segment fails to decode, recovery looks
// after it for a valid record whose commit index is greater than the
// failed record's log index, that is, a record of a later commit:
//
//   - none: the failure is the torn final commit, never acknowledged. The
//     file is cut at the failed record and the cut is logged.
//   - one: a durable record was damaged. Open fails naming the segment and
//     offset, unless Options.Repair is set, in which case the log is cut
//     there and every dropped group is logged.
//
// A failure in an older segment is always damage: the log fsyncs a segment
// before it starts the next one.

// damage describes the first record of a segment that failed to decode.
type damage struct {
	off   int64
	index uint64 // log index the record would have
	cause error
}

// errShort is the cause of an entry that extends past the end of its file.
var errShort = errors.New("entry extends past the end of the file")

const readChunk = 1 << 20

// entryReader reads the log entries of one segment file sequentially:
// each a uvarint length and that many bytes of record.
type entryReader struct {
	f     io.ReaderAt
	size  int64
	buf   []byte
	start int64 // file offset of buf[0]
	off   int64 // offset of the next entry
}

// window returns the file's bytes [off, off+n), which must lie in the
// file. The slice is valid until the next call.
func (r *entryReader) window(off, n int64) ([]byte, error) {
	if off >= r.start && off+n <= r.start+int64(len(r.buf)) {
		return r.buf[off-r.start : off-r.start+n], nil
	}
	want := min(max(n, readChunk), r.size-off)
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	r.start = off
	if _, err := r.f.ReadAt(r.buf, off); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	return r.buf[:n], nil
}

// next returns the offset, prefix length and record of the next entry, or
// io.EOF at the end of the file. A malformed length is reported with an
// error wrapping errShort or errRecord; an I/O error is returned as is.
func (r *entryReader) next() (off int64, hdr int, rec []byte, err error) {
	off = r.off
	if off >= r.size {
		return off, 0, nil, io.EOF
	}
	head, err := r.window(off, min(binary.MaxVarintLen64, r.size-off))
	if err != nil {
		return off, 0, nil, err
	}
	l, n := binary.Uvarint(head)
	switch {
	case n == 0:
		return off, 0, nil, errShort
	case n < 0:
		return off, 0, nil, fmt.Errorf("%w: bad entry length", errRecord)
	case l > uint64(r.size-off-int64(n)):
		return off, 0, nil, fmt.Errorf("%w: %d-byte record", errShort, l)
	}
	rec, err = r.window(off+int64(n), int64(l))
	if err != nil {
		return off, 0, nil, err
	}
	r.off = off + int64(n) + int64(l)
	return off, n, rec, nil
}

// laterCommit reports whether the file holds at or after from a valid
// record whose commit index is greater than after. It tries every byte
// offset, since the damaged entry's length cannot be trusted.
func laterCommit(r *entryReader, from int64, after uint64) (int64, bool, error) {
	for p := from; p < r.size; p++ {
		head, err := r.window(p, min(2*binary.MaxVarintLen64+5, r.size-p))
		if err != nil {
			return 0, false, err
		}
		l, n := binary.Uvarint(head)
		if n <= 0 || l < 6 || l > uint64(r.size-p-int64(n)) || len(head) < n+6 || head[n+4] != recordVersion {
			continue
		}
		if commit, m := binary.Uvarint(head[n+5:]); m <= 0 || commit <= after {
			continue
		}
		rec, err := r.window(p+int64(n), int64(l))
		if err != nil {
			return 0, false, err
		}
		if commit, _, err := verifyRecord(rec); err == nil && commit > after {
			return p, true, nil
		}
	}
	return 0, false, nil
}

// recover builds the index and the segment table from the files in d.dir,
// cutting a torn tail (and, with Repair, damage). It runs in Open, before
// the log is opened.
func (d *Disk) recover() error {
	if err := cleanDir(d.dir, d.logger); err != nil {
		return err
	}
	indexes, err := listSegments(d.dir)
	if err != nil {
		return err
	}
	if len(indexes) == 0 {
		f, err := os.OpenFile(d.path(1), os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o640)
		if err != nil {
			return err
		}
		f.Close()
		if err := syncDir(d.dir); err != nil {
			return err
		}
		indexes = []uint64{1}
	}
	for i, index := range indexes {
		s := &segment{id: uint32(i + 1), index: index, path: d.path(index)}
		if i > 0 {
			prev := d.segs[i-1]
			s.base = prev.base + uint64(prev.size)
			if next := prev.index + prev.n; index != next {
				dmg := &damage{cause: fmt.Errorf("segment starts at record %d, want %d", index, next)}
				if err := d.repair(s, dmg, false, indexes[i:]); err != nil {
					return err
				}
				break
			}
		}
		f, err := os.Open(s.path)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		s.f = f
		s.refs.Store(1)
		d.segs = append(d.segs, s)
		dmg, err := d.replay(s, fi.Size())
		if err != nil {
			return fmt.Errorf("segment %s: %w", s.name(), err)
		}
		if dmg == nil {
			continue
		}
		if i == len(indexes)-1 {
			r := &entryReader{f: f, size: fi.Size()}
			at, later, err := laterCommit(r, dmg.off+1, dmg.index)
			if err != nil {
				return fmt.Errorf("segment %s: %w", s.name(), err)
			}
			if !later {
				d.logger.Warn("store: recovery cut the torn final commit",
					"segment", s.name(), "offset", dmg.off, "bytes", fi.Size()-dmg.off, "cause", dmg.cause)
				d.logDropped(s.path, dmg.off, "torn")
				if err := cutFile(s.path, dmg.off); err != nil {
					return err
				}
				break
			}
			dmg.cause = fmt.Errorf("%w (a record of a later commit follows at offset %d)", dmg.cause, at)
		}
		if err := d.repair(s, dmg, true, indexes[i+1:]); err != nil {
			return err
		}
		break
	}
	tail := d.segs[len(d.segs)-1]
	d.lastIndex = tail.index + tail.n - 1
	return nil
}

// replay applies the records of s, a file of size bytes, to the index. It
// stops at the first record that fails to decode and returns where.
func (d *Disk) replay(s *segment, size int64) (*damage, error) {
	r := &entryReader{f: s.f, size: size}
	for {
		off, hdr, rec, err := r.next()
		if err == io.EOF {
			return nil, nil
		}
		if err == nil {
			_, _, err = verifyRecord(rec)
		}
		if err != nil {
			if !errors.Is(err, errRecord) && !errors.Is(err, errShort) {
				return nil, err
			}
			return &damage{off: off, index: s.index + s.n, cause: err}, nil
		}
		_, body, _ := checkRecord(rec)
		d.applyRecord(s, off+int64(hdr), rec, body)
		s.n++
		s.lastOff = off
		s.size = r.off
		s.synced = s.size
	}
}

// repair handles damage at dmg.off of segment s. Without Options.Repair it
// returns the error naming the segment and offset. With it, it cuts the
// file of s there (if cut), deletes the segment files starting at the
// indexes in drop, and logs every group it drops.
func (d *Disk) repair(s *segment, dmg *damage, cut bool, drop []uint64) error {
	if !d.opts.Repair {
		return fmt.Errorf("segment %s offset %d: %w", s.name(), dmg.off, dmg.cause)
	}
	d.logger.Error("store: repair cuts the log at damage",
		"segment", s.name(), "offset", dmg.off, "cause", dmg.cause)
	if cut {
		d.logDropped(s.path, dmg.off, "repair")
		if err := cutFile(s.path, dmg.off); err != nil {
			return err
		}
	}
	for _, index := range drop {
		p := d.path(index)
		d.logDropped(p, 0, "repair")
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return syncDir(d.dir)
}

// logDropped logs every group in the file at path from offset from on: the
// records it can decode one by one, the rest as a count of bytes.
func (d *Disk) logDropped(path string, from int64, why string) {
	f, err := os.Open(path)
	if err != nil {
		d.logger.Error("store: dropped segment unreadable", "segment", filepath.Base(path), "err", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return
	}
	r := &entryReader{f: f, size: fi.Size(), off: from}
	for {
		off, _, rec, err := r.next()
		if err == io.EOF {
			return
		}
		if err != nil {
			d.logger.Warn("store: dropped undecodable bytes", "why", why, "segment", filepath.Base(path), "offset", off, "bytes", fi.Size()-off, "cause", err)
			return
		}
		commit, body, err := verifyRecord(rec)
		if err != nil {
			d.logger.Warn("store: dropped undecodable record", "why", why, "segment", filepath.Base(path), "offset", off, "bytes", len(rec), "cause", err)
			continue
		}
		n := 0
		for pos := body; pos < len(rec); n++ {
			_, pos, _ = nextMutation(rec, pos)
		}
		d.logger.Warn("store: dropped group", "why", why, "segment", filepath.Base(path), "offset", off, "commit", commit, "mutations", n)
	}
}

// cutFile truncates the file at path to size bytes and makes that durable.
func cutFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

func (d *Disk) path(index uint64) string { return filepath.Join(d.dir, segmentName(index)) }

// listSegments returns the first log indexes of the segment files in dir,
// ascending.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var indexes []uint64
	for _, e := range ents {
		if index, ok := parseSegmentName(e.Name()); ok && len(e.Name()) == 20 && !e.IsDir() {
			indexes = append(indexes, index)
		}
	}
	sort.Slice(indexes, func(i, j int) bool { return indexes[i] < indexes[j] })
	return indexes, nil
}

func parseSegmentName(name string) (uint64, bool) {
	if len(name) < 20 {
		return 0, false
	}
	index, err := strconv.ParseUint(name[:20], 10, 64)
	return index, err == nil && index != 0
}

// cleanDir finishes or undoes a log truncation that a crash interrupted,
// exactly as tidwall/wal's Open does, so that recovery reads the files the
// log will use: a NAME.START file replaces every segment before it, a
// NAME.END file every segment after it, and NAME.TEMP files are half-written
// copies, removed.
func cleanDir(dir string, logger interface {
	Warn(string, ...any)
}) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type file struct {
		name  string
		index uint64
	}
	var files []file
	start, end := -1, -1
	changed := false
	for _, e := range ents {
		name := e.Name()
		index, ok := parseSegmentName(name)
		if e.IsDir() || !ok {
			continue
		}
		switch {
		case strings.HasSuffix(name, ".TEMP"):
			logger.Warn("store: recovery removed an unfinished truncation copy", "file", name)
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
			changed = true
			continue
		case len(name) == 26 && strings.HasSuffix(name, ".START"):
			start = len(files)
		case len(name) == 24 && strings.HasSuffix(name, ".END"):
			if end == -1 {
				end = len(files)
			}
		case len(name) != 20:
			continue
		}
		files = append(files, file{name, index})
	}
	if start != -1 && end != -1 {
		return errors.New("log holds both a START and an END file")
	}
	finish := func(f file) error {
		logger.Warn("store: recovery finished an interrupted truncation", "file", f.name)
		final := filepath.Join(dir, f.name[:20])
		changed = true
		return os.Rename(filepath.Join(dir, f.name), final)
	}
	if start != -1 {
		for _, f := range files[:start] {
			if err := os.Remove(filepath.Join(dir, f.name)); err != nil {
				return err
			}
		}
		if err := finish(files[start]); err != nil {
			return err
		}
	}
	if end != -1 {
		for _, f := range files[end+1:] {
			if err := os.Remove(filepath.Join(dir, f.name)); err != nil {
				return err
			}
		}
		if err := finish(files[end]); err != nil {
			return err
		}
	}
	if changed {
		return syncDir(dir)
	}
	return nil
}

// syncDir fsyncs the directory dir, making file creations, renames and
// removals in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
