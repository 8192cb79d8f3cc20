package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
//     file is cut at the failed record, with one log line however many
//     bytes the torn region holds (a filesystem may leave a run of zeros
//     there; runs of zeros are skipped at once, never probed byte by byte).
//   - one: a durable record was damaged. Open fails naming the segment and
//     offset, unless Options.Repair is set.
//
// A failure in an older segment is damage too: the log fsyncs a segment
// before it starts the next one. The one exception loses nothing: bytes
// after the last record of an older segment, when the next segment's first
// index shows that every record is there and no valid record follows, are
// cut with a log line.
//
// Then recovery compares where the log ends with the durable-position
// marker (marker.go). A log that ends before the marker's last durable
// record, or a marker tail segment shorter than its durable size, lost
// acknowledged data: Open fails naming the segment, the bytes and the
// records, unless Options.Repair is set. Only then is a torn final commit
// cut, so that a refused Open changes no file.
//
// # Repair
//
// With Options.Repair, recovery drops only what is damaged or missing and
// keeps everything else, logging each record it drops (segment, offset,
// bytes, and the commit index and mutation count when they decode):
//
//   - A damaged region of a segment is overwritten in place by padding
//     entries (record.go), as many as the log entries it held, so that
//     every later record keeps its log index and offset. The region ends
//     where the damaged entry ends, if its length prefix reads, or else at
//     the next offset holding a valid record. The number of entries it
//     held is proven by the records after it: the next segment's first
//     index, a commit boundary (the first record of a commit has the
//     commit's index as its own, so a record whose commit index differs
//     from its predecessor's has index = commit), or the marker. A region
//     whose successors prove nothing is taken as one entry.
//   - When no count can be proven, the rest of the segment is dropped: an
//     older segment's rest becomes as many padding entries as the next
//     segment's first index requires; the newest segment is cut.
//   - A missing older segment (a gap in the first indexes of the files) is
//     replaced by a segment of padding entries, one per missing record.
//   - A missing or truncated tail is logged, and the marker rewritten.

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

	// probes counts the offsets examined one by one by scans and listings,
	// so that tests can check that runs of zeros cost no per-byte work.
	probes int
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

// reset moves the reader to off and forgets what it read, after the file
// was written.
func (r *entryReader) reset(off int64) {
	r.buf = r.buf[:0]
	r.start = 0
	r.off = off
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

// extent returns where the entry at off ends, if its length prefix reads
// and the entry lies in the file.
func (r *entryReader) extent(off int64) (int64, bool) {
	head, err := r.window(off, min(binary.MaxVarintLen64, r.size-off))
	if err != nil {
		return 0, false
	}
	l, n := binary.Uvarint(head)
	if n <= 0 || l > uint64(r.size-off-int64(n)) {
		return 0, false
	}
	return off + int64(n) + int64(l), true
}

// skipZeros returns the first offset at or after p whose byte is not
// zero, or the file's size.
func (r *entryReader) skipZeros(p int64) (int64, error) {
	for p < r.size {
		b, err := r.window(p, min(readChunk, r.size-p))
		if err != nil {
			return 0, err
		}
		i := 0
		for i < len(b) && b[i] == 0 {
			i++
		}
		p += int64(i)
		if i < len(b) {
			return p, nil
		}
	}
	return r.size, nil
}

// scanValid returns the first offset at or after from where a valid entry
// starts whose commit index accept approves (0 for a padding record), and
// that commit index. It tries every offset, since a damaged entry's length
// cannot be trusted, except inside runs of zero bytes, which it skips at
// once: a zero byte is an entry of length zero, never a valid one.
func (r *entryReader) scanValid(from int64, accept func(commit uint64) bool) (int64, uint64, bool, error) {
	for p := from; p < r.size; p++ {
		head, err := r.window(p, min(2*binary.MaxVarintLen64+5, r.size-p))
		if err != nil {
			return 0, 0, false, err
		}
		if head[0] == 0 {
			q, err := r.skipZeros(p)
			if err != nil {
				return 0, 0, false, err
			}
			p = q - 1
			continue
		}
		r.probes++
		l, n := binary.Uvarint(head)
		if n <= 0 || l < 5 || l > uint64(r.size-p-int64(n)) || len(head) < n+5 {
			continue
		}
		switch head[n+4] {
		case recordVersion, recordVersionRange:
			if len(head) < n+6 {
				continue
			}
			if commit, m := binary.Uvarint(head[n+5:]); m <= 0 || !accept(commit) {
				continue
			}
		case recordPadding:
			if !accept(0) {
				continue
			}
		default:
			continue
		}
		rec, err := r.window(p+int64(n), int64(l))
		if err != nil {
			return 0, 0, false, err
		}
		if commit, _, err := verifyRecord(rec); err == nil && accept(commit) {
			return p, commit, true, nil
		}
	}
	return 0, 0, false, nil
}

// laterCommit reports whether the file holds at or after from a valid
// record whose commit index is greater than after, and where.
func laterCommit(r *entryReader, from int64, after uint64) (int64, bool, error) {
	at, _, found, err := r.scanValid(from, func(commit uint64) bool { return commit > after })
	return at, found, err
}

func anyRecord(uint64) bool { return true }

// recoveryState is what Open knows while it recovers.
type recoveryState struct {
	mk         marker // the durable-position marker, if mkFound
	mkFound    bool
	lastCommit uint64   // commit index of the last data record replayed
	torn       *damage  // the torn final commit of the tail, cut after the marker check
	tornSeg    *segment // the segment holding it
	tornReader *entryReader
}

// recover builds the index and the segment table from the files in d.dir,
// checks them against the durable-position marker, and cuts a torn tail
// (and, with Repair, damage). It runs in Open, before the log is opened.
func (d *Disk) recover() error {
	if err := cleanDir(d.dir, d.logger); err != nil {
		return err
	}
	indexes, err := listSegments(d.dir)
	if err != nil {
		return err
	}
	rs := &d.rec
	rs.mk, rs.mkFound, err = readMarker(d.dir)
	switch {
	case errors.Is(err, errBadMarker):
		d.logger.Warn("store: the durable-position marker does not decode; the lost-tail check is skipped this once", "file", markerName, "cause", err)
	case err != nil:
		return err
	case !rs.mkFound && len(indexes) > 0:
		d.logger.Info("store: no durable-position marker (a data directory from an older version); the lost-tail check starts now")
	}
	if len(indexes) == 0 {
		if rs.mkFound && rs.mk.last > 0 {
			if err := d.lostTail(fmt.Sprintf("every segment file is missing, but records up to %d were durable", rs.mk.last)); err != nil {
				return err
			}
		}
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
	for i := 0; i < len(indexes); i++ {
		index := indexes[i]
		s := &segment{id: uint32(len(d.segs) + 1), index: index, path: d.path(index)}
		if n := len(d.segs); n > 0 {
			prev := d.segs[n-1]
			s.base = prev.base + uint64(prev.size)
			if want := prev.index + prev.n; index != want {
				if d.opts.Repair && index > want {
					if err := d.padMissingSegment(want, index); err != nil {
						return err
					}
					indexes = slices.Insert(indexes, i, want)
					i--
					continue
				}
				dmg := &damage{cause: fmt.Errorf("segment starts at record %d, want %d", index, want)}
				if err := d.dropSegments(s, dmg, indexes[i:]); err != nil {
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
		var next uint64 // first index of the next segment; 0 for the tail
		if i+1 < len(indexes) {
			next = indexes[i+1]
		}
		r := &entryReader{f: f, size: fi.Size()}
		repaired := int64(-1) // offset of the last damage repaired in place
		for {
			dmg, err := d.replay(s, r)
			if err != nil {
				return fmt.Errorf("segment %s: %w", s.name(), err)
			}
			if dmg == nil {
				break
			}
			if dmg.off <= repaired {
				return fmt.Errorf("segment %s offset %d: %w (still damaged after repair)", s.name(), dmg.off, dmg.cause)
			}
			repaired = dmg.off
			resume, err := d.damaged(s, r, dmg, next)
			if err != nil {
				return err
			}
			if !resume {
				break
			}
		}
	}
	tail := d.segs[len(d.segs)-1]
	d.lastIndex = tail.index + tail.n - 1
	if rs.mkFound {
		if missing := d.missing(); missing != "" {
			if err := d.lostTail(missing); err != nil {
				return err
			}
		}
	}
	if rs.torn != nil {
		if err := d.cutTorn(); err != nil {
			return err
		}
	}
	return nil
}

// lostTail refuses to start on missing durable data, or with Repair logs
// what is missing and lets recovery go on.
func (d *Disk) lostTail(missing string) error {
	if !d.opts.Repair {
		return fmt.Errorf("%s: the log's tail is missing or truncated; start with storage.repair = true to go on without it", missing)
	}
	d.repaired = true
	d.logger.Error("store: repair starts without durable records that are missing", "missing", missing)
	return nil
}

// missing compares the recovered log with the marker and describes the
// durable data it lacks, or returns "".
func (d *Disk) missing() string {
	mk := d.rec.mk
	var tail *segment
	for _, s := range d.segs {
		if s.index == mk.tailIndex {
			tail = s
		}
	}
	records := ""
	if d.lastIndex < mk.last {
		records = fmt.Sprintf("records %d-%d", d.lastIndex+1, mk.last)
	}
	switch {
	case tail != nil && tail.size < mk.tailSize:
		if records == "" {
			records = "no record counted"
		}
		return fmt.Sprintf("segment %s ended at byte %d but bytes up to %d (%s) were durable", tail.name(), tail.size, mk.tailSize, records)
	case tail == nil && records != "" && mk.tailIndex > d.segs[len(d.segs)-1].index:
		return fmt.Sprintf("segment %s is missing but its bytes up to %d (%s) were durable", segmentName(mk.tailIndex), mk.tailSize, records)
	case records != "":
		return fmt.Sprintf("the log ends at record %d but %s were durable", d.lastIndex, records)
	}
	return ""
}

// replay applies the records of s, read by r from r.off on, to the index.
// It stops at the first record that fails to decode and returns where.
func (d *Disk) replay(s *segment, r *entryReader) (*damage, error) {
	for {
		off, hdr, rec, err := r.next()
		if err == io.EOF {
			return nil, nil
		}
		var commit uint64
		if err == nil {
			commit, _, err = verifyRecord(rec)
		}
		if err != nil {
			if !errors.Is(err, errRecord) && !errors.Is(err, errShort) {
				return nil, err
			}
			return &damage{off: off, index: s.index + s.n, cause: err}, nil
		}
		_, body, _ := checkRecord(rec)
		d.applyRecord(s, off+int64(hdr), rec, body)
		if commit != 0 {
			d.rec.lastCommit = commit
		}
		s.n++
		s.lastOff = off
		s.size = r.off
		s.synced = s.size
	}
}

// damaged handles a record of s that failed to decode at dmg.off. next is
// the first log index of the segment after s, 0 if s is the tail. It
// returns true if the replay of s is to go on at dmg.off (repair replaced
// the damage with padding).
func (d *Disk) damaged(s *segment, r *entryReader, dmg *damage, next uint64) (bool, error) {
	switch {
	case next == 0:
		at, later, err := laterCommit(r, dmg.off+1, dmg.index)
		if err != nil {
			return false, fmt.Errorf("segment %s: %w", s.name(), err)
		}
		if !later {
			d.rec.torn, d.rec.tornSeg, d.rec.tornReader = dmg, s, r
			return false, nil
		}
		dmg.cause = fmt.Errorf("%w (a record of a later commit follows at offset %d)", dmg.cause, at)
	case dmg.index == next:
		// Every record the next segment expects is here; trailing bytes
		// that hold no valid record lose nothing.
		_, _, found, err := r.scanValid(dmg.off+1, anyRecord)
		if err != nil {
			return false, fmt.Errorf("segment %s: %w", s.name(), err)
		}
		if !found {
			spans, err := listDropped(r, dmg.off, r.size)
			if err != nil {
				return false, err
			}
			d.logger.Warn("store: recovery cut bytes after the last record of a segment; no record is lost",
				"segment", s.name(), "offset", dmg.off, "bytes", r.size-dmg.off, "zero_filled", allZeros(spans), "cause", dmg.cause)
			return false, cutFile(s.path, dmg.off)
		}
	}
	if !d.opts.Repair {
		return false, fmt.Errorf("segment %s offset %d: %w; start with storage.repair = true to drop only the damaged records", s.name(), dmg.off, dmg.cause)
	}
	return d.repairAt(s, r, dmg, next)
}

// cutTorn cuts the torn final commit found by recovery, with one log line.
func (d *Disk) cutTorn() error {
	dmg, s, r := d.rec.torn, d.rec.tornSeg, d.rec.tornReader
	spans, err := listDropped(r, dmg.off, r.size)
	if err != nil {
		return err
	}
	groups := 0
	for _, sp := range spans {
		if sp.decoded {
			groups++
		}
	}
	d.logger.Warn("store: recovery cut the torn final commit",
		"segment", s.name(), "offset", dmg.off, "bytes", r.size-dmg.off,
		"complete_groups", groups, "zero_filled", allZeros(spans), "cause", dmg.cause)
	return cutFile(s.path, dmg.off)
}

// maxGapCandidates bounds the valid records repair tries as the end of a
// damaged region.
const maxGapCandidates = 8

// repairAt repairs damage at dmg.off of segment s. It replaces the damaged
// region with padding when it can prove how many entries the region held,
// keeping everything after it; otherwise it drops the rest of the segment.
// It returns true if the replay of s is to go on at dmg.off.
func (d *Disk) repairAt(s *segment, r *entryReader, dmg *damage, next uint64) (bool, error) {
	// Candidate ends of the damaged region, nearest first: the next valid
	// records, and the damaged entry's own end if its length prefix reads.
	var ends []int64
	for p := dmg.off + 1; len(ends) < maxGapCandidates; {
		at, _, found, err := r.scanValid(p, anyRecord)
		if err != nil {
			return false, fmt.Errorf("segment %s: %w", s.name(), err)
		}
		if !found {
			break
		}
		ends = append(ends, at)
		p = at + 1
	}
	if end, ok := r.extent(dmg.off); ok && !slices.Contains(ends, end) {
		ends = append(ends, end)
		slices.Sort(ends)
	}
	for i, end := range ends {
		// Only the nearest end may be taken as one entry unproven.
		k, ok, err := d.gapEntries(s, r, end, dmg.index, next, i == 0)
		if err != nil {
			return false, fmt.Errorf("segment %s: %w", s.name(), err)
		}
		if !ok || end-dmg.off < int64(k)*minPaddingEntry {
			continue
		}
		if err := d.pad(s, r, dmg, end, k); err != nil {
			return false, err
		}
		return true, nil
	}
	// Nothing after the damage proves how many entries it held.
	if next == 0 {
		spans, err := listDropped(r, dmg.off, r.size)
		if err != nil {
			return false, err
		}
		d.repaired = true
		d.logger.Error("store: repair cut the newest segment at damage",
			"segment", s.name(), "offset", dmg.off, "bytes", r.size-dmg.off, "cause", dmg.cause)
		d.logSpans(s, spans)
		return false, cutFile(s.path, dmg.off)
	}
	if next < dmg.index {
		return false, fmt.Errorf("segment %s offset %d: %w; the segment holds more records than the next segment's first index %d allows", s.name(), dmg.off, dmg.cause, next)
	}
	if next == dmg.index {
		// Every record the next segment expects is before the damage.
		spans, err := listDropped(r, dmg.off, r.size)
		if err != nil {
			return false, err
		}
		d.repaired = true
		d.logger.Error("store: repair cut a segment after its last counted record",
			"segment", s.name(), "offset", dmg.off, "bytes", r.size-dmg.off, "cause", dmg.cause)
		d.logSpans(s, spans)
		return false, cutFile(s.path, dmg.off)
	}
	if err := d.pad(s, r, dmg, r.size, next-dmg.index); err != nil {
		return false, err
	}
	return true, nil
}

// gapEntries returns how many log entries the damaged region from the
// record at index i0 to offset e held, as proven by the records from e on,
// and whether it is proven (or, with one, not contradicted when taken as
// one entry).
func (d *Disk) gapEntries(s *segment, r *entryReader, e int64, i0, next uint64, one bool) (uint64, bool, error) {
	w := &entryReader{f: r.f, size: r.size, off: e}
	var commits []uint64 // 0: padding
	var ends []int64
	eof := false
	for {
		_, _, rec, err := w.next()
		if err == io.EOF {
			eof = true
			break
		}
		if err != nil && !errors.Is(err, errRecord) && !errors.Is(err, errShort) {
			return 0, false, err
		}
		var commit uint64
		if err == nil {
			commit, _, err = verifyRecord(rec)
		}
		if err != nil {
			break
		}
		commits = append(commits, commit)
		ends = append(ends, w.off)
	}
	if len(commits) == 0 && !eof {
		return 0, false, nil // no record starts at e
	}
	n := uint64(len(commits))
	var idx uint64 // log index of the record at e
	anchored := false
	agree := func(v uint64) bool {
		if anchored {
			return v == idx
		}
		idx, anchored = v, true
		return true
	}
	if eof && next != 0 && (next < n || !agree(next-n)) {
		return 0, false, nil
	}
	for j := 1; j < len(commits); j++ {
		if c, p := commits[j], commits[j-1]; c != 0 && p != 0 && c != p {
			if c < uint64(j) || !agree(c-uint64(j)) {
				return 0, false, nil
			}
		}
	}
	if mk := d.rec.mk; d.rec.mkFound && mk.tailIndex == s.index {
		for j, end := range ends {
			if end == mk.tailSize && (mk.last < uint64(j) || !agree(mk.last-uint64(j))) {
				return 0, false, nil
			}
		}
	}
	if !anchored {
		if !one {
			return 0, false, nil
		}
		idx = i0 + 1
	}
	if idx <= i0 {
		return 0, false, nil
	}
	prev := d.rec.lastCommit
	for j, c := range commits {
		if c == 0 {
			continue
		}
		if c > idx+uint64(j) || c < prev {
			return 0, false, nil
		}
		prev = c
	}
	return idx - i0, true, nil
}

// pad replaces the damaged region [dmg.off, end) of s with k padding
// entries, logging what it drops, and moves r back to dmg.off. A region too
// small for k entries (only the rest of a segment can be) is replaced by
// k minimal entries, and the file cut after them.
func (d *Disk) pad(s *segment, r *entryReader, dmg *damage, end int64, k uint64) error {
	spans, err := listDropped(r, dmg.off, end)
	if err != nil {
		return err
	}
	d.repaired = true
	d.logger.Error("store: repair dropped damaged records",
		"segment", s.name(), "offset", dmg.off, "bytes", end-dmg.off,
		"records", fmt.Sprintf("%d-%d", dmg.index, dmg.index+k-1), "cause", dmg.cause)
	d.logSpans(s, spans)
	size := end - dmg.off
	if size < int64(k)*minPaddingEntry {
		size = int64(k) * minPaddingEntry
	}
	buf := appendPadding(nil, size, k)
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(buf, dmg.off); err != nil {
		return err
	}
	if dmg.off+size > end {
		if err := f.Truncate(dmg.off + size); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil {
		r.size = fi.Size()
	}
	r.reset(dmg.off)
	return nil
}

// padMissingSegment creates the segment file for the records [from, to),
// missing from the log, holding one padding entry each.
func (d *Disk) padMissingSegment(from, to uint64) error {
	d.repaired = true
	d.logger.Error("store: repair replaced a missing segment with padding",
		"segment", segmentName(from), "records", fmt.Sprintf("%d-%d", from, to-1))
	buf := appendPadding(nil, int64(to-from)*minPaddingEntry, to-from)
	f, err := os.OpenFile(d.path(from), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(d.dir)
}

// dropSegments handles a segment that does not follow its predecessor:
// without Repair it returns the error naming it; with Repair it deletes it
// and every later segment file, logging every group it drops.
func (d *Disk) dropSegments(s *segment, dmg *damage, drop []uint64) error {
	if !d.opts.Repair {
		return fmt.Errorf("segment %s offset %d: %w", s.name(), dmg.off, dmg.cause)
	}
	d.repaired = true
	d.logger.Error("store: repair drops the segments from here on", "segment", s.name(), "cause", dmg.cause)
	for _, index := range drop {
		p := d.path(index)
		if f, err := os.Open(p); err == nil {
			if fi, err := f.Stat(); err == nil {
				if spans, err := listDropped(&entryReader{f: f, size: fi.Size()}, 0, fi.Size()); err == nil {
					d.logSpans(&segment{path: p}, spans)
				}
			}
			f.Close()
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return syncDir(d.dir)
}

// A droppedSpan is one thing recovery removed from a segment: a record
// that decodes, or a run of bytes that does not.
type droppedSpan struct {
	off, bytes int64
	decoded    bool   // a valid data record
	zeros      bool   // a run of zero bytes only
	commit     uint64 // commit index, for a record (unverified if !decoded)
	mutations  int    // mutations that decode
	header     bool   // !decoded: the first entry's header reads, commit and mutations are set
}

// listDropped lists what the segment read by r holds in [from, to): every
// valid data record, and the runs of bytes that hold none.
func listDropped(r *entryReader, from, to int64) ([]droppedSpan, error) {
	var out []droppedSpan
	run := -1
	startRun := func(off int64, zeros bool) {
		if run < 0 {
			out = append(out, droppedSpan{off: off, zeros: zeros})
			run = len(out) - 1
		} else if !zeros {
			out[run].zeros = false
		}
	}
	endRun := func(end int64) {
		if run >= 0 {
			out[run].bytes = end - out[run].off
			run = -1
		}
	}
	r.reset(from)
	for r.off < to {
		head, err := r.window(r.off, 1)
		if err != nil {
			return nil, err
		}
		if head[0] == 0 {
			startRun(r.off, true)
			q, err := r.skipZeros(r.off)
			if err != nil {
				return nil, err
			}
			r.off = min(q, to)
			continue
		}
		r.probes++
		off, _, rec, err := r.next()
		if err != nil {
			if !errors.Is(err, errRecord) && !errors.Is(err, errShort) {
				return nil, err
			}
			// The framing is broken: the run goes on to the next valid record.
			startRun(off, false)
			at, _, found, err := r.scanValid(off+1, anyRecord)
			if err != nil {
				return nil, err
			}
			if !found || at > to {
				at = to
			}
			r.off = at
			continue
		}
		commit, body, verr := verifyRecord(rec)
		if verr != nil {
			first := run < 0
			startRun(off, false)
			if first {
				out[run].commit, out[run].mutations, out[run].header = describeRecord(rec)
			}
			continue
		}
		endRun(off)
		if commit == 0 {
			continue // padding holds no data
		}
		muts := 0
		for pos := body; pos < len(rec); muts++ {
			_, pos, _ = nextMutation(rec, pos)
		}
		out = append(out, droppedSpan{off: off, bytes: r.off - off, decoded: true, commit: commit, mutations: muts})
	}
	endRun(min(r.off, to))
	return out, nil
}

// allZeros reports whether every undecodable span is a run of zeros.
func allZeros(spans []droppedSpan) bool {
	for _, sp := range spans {
		if !sp.decoded && !sp.zeros {
			return false
		}
	}
	return true
}

// logSpans logs every span that repair dropped from s, one line each.
func (d *Disk) logSpans(s *segment, spans []droppedSpan) {
	for _, sp := range spans {
		switch {
		case sp.decoded:
			d.logger.Error("store: repair dropped a group", "segment", s.name(), "offset", sp.off, "bytes", sp.bytes,
				"commit", sp.commit, "mutations", sp.mutations)
		case sp.header:
			d.logger.Error("store: repair dropped a damaged group", "segment", s.name(), "offset", sp.off, "bytes", sp.bytes,
				"commit", sp.commit, "mutations_decoded", sp.mutations)
		default:
			d.logger.Error("store: repair dropped undecodable bytes", "segment", s.name(), "offset", sp.off, "bytes", sp.bytes,
				"zero_filled", sp.zeros)
		}
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
