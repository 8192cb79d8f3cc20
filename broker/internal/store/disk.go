package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/tidwall/wal"
)

// ErrNotFound is returned by Get for a key that holds no value.
var ErrNotFound = errors.New("record not found")

// ErrClosed is returned by every method called after Close. It wraps
// fault.ErrUnavailable.
var ErrClosed = fmt.Errorf("storage closed: %w", fault.ErrUnavailable)

// Defaults of Options.
const (
	// DefaultSegmentSize is the default target size of a log segment file.
	DefaultSegmentSize = 8 << 20
	// DefaultCacheSize is the default size of the cache of recently written
	// log bytes.
	DefaultCacheSize = 16 << 20
	// DefaultCompactionThreshold is the default live ratio at or below which
	// the oldest segments are compacted.
	DefaultCompactionThreshold = 0.5

	minSegmentSize = 512
	maxSegmentSize = 1 << 30
	// maxCommitBytes bounds the bytes one group commit writes, so that a
	// long queue of groups is written as several commits of this size.
	maxCommitBytes = 8 << 20
)

// Options configure Open. The zero value is a durable store with defaults.
type Options struct {
	// SegmentSize is the target size of a log segment file in bytes; a
	// segment is closed once it reaches it. Zero means DefaultSegmentSize
	// (8 MiB); values are clamped to [512 B, 1 GiB]. The newest segment is
	// also held in memory by the log, so this bounds that memory too.
	SegmentSize int64

	// CacheSize is the number of bytes of the most recently written log
	// kept in memory, so that a Get of a value written recently is served
	// without a read from the file. Zero means DefaultCacheSize (16 MiB);
	// a negative value disables the cache.
	CacheSize int64

	// Repair makes Open go on past damage and missing data instead of
	// failing: it drops only the damaged records (or, when it cannot tell
	// how many entries a damaged region held, the rest of that segment),
	// keeps every later record, and starts without a missing or truncated
	// tail. Every dropped record is logged (recover.go). Without Repair,
	// damage anywhere but in the final, unacknowledged commit, or a log
	// that ends before its last durable record, makes Open fail with an
	// error naming the segment, offset and records.
	Repair bool

	// UnsafeNoSync skips every fsync: a crash of the machine (not only of
	// the process) may lose acknowledged groups or leave a log that Open
	// rejects. For tests and benchmarks only.
	UnsafeNoSync bool

	// ReserveSize is the size in bytes of the reserve file kept in the
	// data directory: preallocated space that the store frees when the
	// disk fills, so that the groups that must get through (acks, lease
	// state) and compaction still have room while growth is refused (see
	// space.go). Zero keeps no reserve: on a full disk every write then
	// waits for free space. fila-server's default is 64 MiB.
	ReserveSize int64

	// CompactionThreshold is the live ratio (bytes of live records over
	// bytes of log) at or below which a prefix of the oldest segments is
	// compacted: its live records are copied forward and the segments
	// deleted. Zero means DefaultCompactionThreshold (0.5), which bounds
	// the log at about twice the live data plus a few segments and copies
	// at most one byte per byte reclaimed. A negative value copies nothing:
	// only segments with no live record are deleted.
	CompactionThreshold float64

	// Logger receives recovery and compaction events. Nil means
	// slog.Default().
	Logger *slog.Logger

	// OnCommit, if set, is called on the committer goroutine after each
	// durable commit (metrics). It must be quick and must not call the
	// store.
	OnCommit func(Commit)
}

// Commit describes one durable write of the committer: one write to the
// log (a WriteBatch per segment it reaches) and at most one fsync
// (Options.OnCommit).
type Commit struct {
	Groups  int // groups in the commit
	Records int // mutations (puts, deletes, range deletes) in those groups
	Bytes   int // bytes appended to the log
	// Sync is how long the commit's fsync took; 0 when it had none.
	Sync time.Duration
	// Wait is the group-commit latency: from the submission of the
	// commit's oldest group until the commit was durable.
	Wait time.Duration
}

func (o Options) withDefaults() Options {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	o.SegmentSize = min(max(o.SegmentSize, minSegmentSize), maxSegmentSize)
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.CacheSize < 0 {
		o.CacheSize = 0
	}
	if o.CompactionThreshold == 0 {
		o.CompactionThreshold = DefaultCompactionThreshold
	}
	if o.CompactionThreshold < 0 {
		o.CompactionThreshold = 0
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Stats describe a store at one moment. Counters count from Open.
type Stats struct {
	Segments  int   // log segment files
	LogBytes  int64 // bytes in the segment files
	LiveBytes int64 // bytes of the records that hold current values
	Keys      int   // keys holding a value

	Groups       uint64 // non-empty groups made durable
	Mutations    uint64 // puts, deletes and range deletes in those groups
	Commits      uint64 // log writes, each holding one or more groups
	Syncs        uint64 // fsyncs of log files and of the directory
	BytesWritten uint64 // bytes appended to the log by commits (not compaction copies)

	Compactions    uint64 // reclamations that deleted segments
	CopiedBytes    uint64 // bytes of live records copied forward by compaction
	ReclaimedBytes uint64 // bytes of segment files deleted

	CacheHits   uint64 // Get and Scan values served from the cache
	CacheMisses uint64 // values read from the segment files

	PendingGroups int // groups submitted and not yet durable

	Full bool // the data disk is full (Health().Full)
}

// location is where a compaction copy expects a key's value to be.
type location struct {
	seg uint32
	off uint32
}

// A request is one submitted group.
type request struct {
	b      *Batch
	done   func(error) // ApplyAsync
	wait   chan error  // Apply
	copies []location  // compaction copy: expected location of each put
	err    error
	at     time.Time // when submitted; set only with Options.OnCommit
}

// placed is where the committer put one group's record.
type placed struct {
	seg *segment
	off int64  // offset of the log entry (its length prefix)
	hdr int    // length of the prefix
	rec []byte // nil: the group wrote nothing
}

// segWrite is the committer's view of a segment it appends to, published
// to the segment under Disk.mu once the commit is durable.
type segWrite struct {
	s       *segment
	size    int64
	n       uint64
	lastOff int64
}

// hooks inject faults in tests. An error from a hook is treated like the
// I/O error it simulates.
type hooks struct {
	afterWrite     func() error          // after a commit's write, before its fsync
	beforeSync     func()                // before a commit's fsync, when it has one
	beforeTruncate func() error          // compaction: copies durable, log not yet truncated
	freeSpace      func() (int64, error) // replaces statfs of the data directory
}

// testFaults installs fault hooks in every store the process opens; set
// only by builds with the filafaults tag (faults_on.go).
var testFaults func(*hooks)

// Disk is the durable implementation: a log of mutation groups in segment files
// (github.com/tidwall/wal) and an in-memory ordered index of keys
// (index.go) holding each value's position in the log.
// Values are read back from the files with pread, through a small cache of
// the newest log bytes.
//
// Disk is safe for concurrent use. It runs two goroutines, both stopped by
// Close: the committer, which writes and fsyncs groups and applies them to
// the index, and the compactor, which reclaims space.
type Disk struct {
	repaired bool // Open's repair dropped or cut durable data (Repaired)
	dir      string
	opts     Options
	logger   *slog.Logger
	lock     *os.File
	hooks    hooks
	// log is swapped by the committer after a failed write (restore),
	// holding logMu; the compactor reads it holding logMu for reading.
	logMu sync.RWMutex
	log   *wal.Log
	// tailSized: roomyTail ran on the log's tail segment; tailBuf: the
	// buffer it gave it. Committer only.
	tailSized bool
	tailBuf   []byte
	marker    *markerFile
	rec       recoveryState // during Open only

	// mu guards index and segs and the segments' accounting. The committer
	// is the only goroutine that changes index or appends to segs.
	mu     sync.RWMutex
	index  *keyIndex  // index.go
	segs   []*segment // front to tail; ids are consecutive
	closed bool

	cache ring

	// The queue of submitted groups.
	qmu     sync.Mutex
	qcond   sync.Cond
	queue   []request
	closing bool

	failed   atomic.Pointer[error] // sticky write or fsync error
	failedc  chan struct{}         // closed when failed is set
	failOnce sync.Once

	// Disk space (space.go).
	full       atomic.Bool
	spaceMu    sync.Mutex // the reserve file and the end of a full episode
	reserved   bool       // the reserve file holds ReserveSize bytes
	fullc      chan struct{}
	spaceDone  chan struct{}
	checkEvery time.Duration
	stalled    bool // committer: waiting for space was logged

	// Committer state.
	lastIndex uint64
	wb        wal.Batch
	places    []placed
	// commitBytes and syncTime describe the commit being written
	// (Options.OnCommit); committer goroutine only.
	commitBytes int
	syncTime    time.Duration
	writes      []segWrite
	free        []request
	scratch     Batch

	runDone     chan struct{}
	compactc    chan struct{}
	stopc       chan struct{}
	compactDone chan struct{}
	compactMu   sync.Mutex // one compaction at a time
	nextCompact atomic.Int64
	autoCompact bool

	stats struct {
		groups, mutations, commits, syncs    atomic.Uint64
		written                              atomic.Uint64
		compactions, copied, reclaimed       atomic.Uint64
		cacheHits, cacheMisses, pendingCount atomic.Uint64
	}
	closeOnce sync.Once
	closeErr  error
}

// Open opens the store in dir, creating dir if needed, and recovers the
// state of the last durable group: it replays the log, cuts a torn final
// commit (logging it), and fails on corruption before it unless
// opts.Repair is set. Errors name the segment file and byte offset, as in
// "open data directory /var/lib/fila: segment 00000000000000000012 offset 4096: bad record:
// checksum mismatch". Only one Disk may have dir open at a time.
func Open(dir string, opts Options) (*Disk, error) {
	d, err := open(dir, opts, true)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(dir string, opts Options, autoCompact bool) (*Disk, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open data directory %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open data directory %s: %w", dir, err)
	}
	d := &Disk{
		dir:         dir,
		opts:        opts,
		logger:      opts.Logger,
		lock:        lock,
		index:       newKeyIndex(),
		runDone:     make(chan struct{}),
		compactc:    make(chan struct{}, 1),
		stopc:       make(chan struct{}),
		compactDone: make(chan struct{}),
		autoCompact: autoCompact,
		failedc:     make(chan struct{}),
		fullc:       make(chan struct{}, 1),
		spaceDone:   make(chan struct{}),
		checkEvery:  defaultCheckEvery,
	}
	if testFaults != nil {
		testFaults(&d.hooks)
	}
	d.qcond.L = &d.qmu
	if opts.CacheSize > 0 {
		d.cache.buf = make([]byte, opts.CacheSize)
	}
	fail := func(err error) (*Disk, error) {
		if d.log != nil {
			d.log.Close()
		}
		if d.marker != nil {
			d.marker.f.Close()
		}
		for _, s := range d.segs {
			s.release()
		}
		lock.Close()
		return nil, fmt.Errorf("open data directory %s: %w", dir, err)
	}
	if err := d.recover(); err != nil {
		return fail(err)
	}
	d.rec = recoveryState{}
	d.log, err = wal.Open(dir, d.walOptions())
	if err != nil {
		return fail(fmt.Errorf("open log: %w", err))
	}
	first, err1 := d.log.FirstIndex()
	last, err2 := d.log.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		return fail(err)
	}
	if first != d.segs[0].index || last != d.lastIndex {
		return fail(fmt.Errorf("log holds records %d..%d; recovered %d..%d", first, last, d.segs[0].index, d.lastIndex))
	}
	// What recovery read may still be only in the page cache (the last
	// process died before its fsync): make it durable before the marker
	// says it is.
	if !opts.UnsafeNoSync {
		if err := d.log.Sync(); err != nil {
			return fail(fmt.Errorf("sync log: %w", err))
		}
		if err := syncDir(dir); err != nil {
			return fail(fmt.Errorf("sync directory: %w", err))
		}
	}
	tail := d.segs[len(d.segs)-1]
	d.marker, err = openMarker(dir, marker{last: d.lastIndex, tailIndex: tail.index, tailSize: tail.size}, opts.UnsafeNoSync)
	if err != nil {
		return fail(fmt.Errorf("durable-position marker: %w", err))
	}
	d.spaceMu.Lock()
	err = d.makeReserve()
	d.spaceMu.Unlock()
	if err != nil && !isNoSpace(err) {
		return fail(err)
	}
	d.nextCompact.Store(opts.SegmentSize)
	go d.run()
	go d.compactLoop()
	go d.spaceLoop()
	if err != nil {
		d.enterFull(err)
	}
	return d, nil
}

func (d *Disk) walOptions() *wal.Options {
	return &wal.Options{
		NoSync:           true,
		SegmentSize:      int(d.opts.SegmentSize),
		SegmentCacheSize: 1,
		AllowEmpty:       true,
		DirPerms:         0o750,
		FilePerms:        0o640,
	}
}

// seg returns the segment with id. Hold mu, or run on the committer.
func (d *Disk) seg(id uint32) *segment { return d.segs[id-d.segs[0].id] }

// Apply makes b durable and visible and returns once it is: it waits for
// the fsync of the commit that carries b, which concurrent Applies share
// (group commit). It returns after every group submitted before it is
// durable, so Apply of an empty batch is a cheap barrier that writes
// nothing. b is read until Apply returns and may then be reused.
//
// Errors: ErrTooLarge (nothing written); ErrNoSpace (nothing written) for
// a group marked RefuseWhenFull while the disk is full, or for a group
// still waiting for space at Close; ErrClosed; or the sticky error of a
// failed fsync or of a write that failed for another reason than space,
// after which every Apply fails. ErrClosed and the sticky error wrap
// fault.ErrUnavailable. After ErrClosed or the sticky error, b may or may
// not be durable; it is never partly applied.
func (d *Disk) Apply(b *Batch) error {
	w := waiterPool.Get().(chan error)
	if err := d.submit(request{b: b, wait: w}); err != nil {
		waiterPool.Put(w)
		return err
	}
	err := <-w
	waiterPool.Put(w)
	return err
}

var waiterPool = sync.Pool{New: func() any { return make(chan error, 1) }}

// ApplyAsync submits b and returns at once. Groups become durable and
// visible, and their done functions are called, in submission order; done
// receives nil once b is durable, or the error Apply would return. done
// runs on the store's committer goroutine: it must not block for long and
// must not call Apply (it may call ApplyAsync, Get and Scan). done may be
// nil. After Close, done is called with ErrClosed before ApplyAsync
// returns.
//
// The store owns b until done is called: the caller must not modify or
// reuse it before then.
//
// ApplyAsync does not bound the groups in flight; the caller does
// (Stats.PendingGroups shows them).
func (d *Disk) ApplyAsync(b *Batch, done func(error)) {
	if err := d.submit(request{b: b, done: done}); err != nil && done != nil {
		done(err)
	}
}

var emptyBatch Batch

func (d *Disk) submit(r request) error {
	if r.b == nil {
		r.b = &emptyBatch
	}
	d.qmu.Lock()
	if d.closing {
		d.qmu.Unlock()
		return ErrClosed
	}
	d.stats.pendingCount.Add(1)
	if d.opts.OnCommit != nil {
		r.at = time.Now()
	}
	d.queue = append(d.queue, r)
	if len(d.queue) == 1 {
		d.qcond.Signal()
	}
	d.qmu.Unlock()
	return nil
}

// take waits for submitted groups and returns them all; false once the
// store is closing and the queue is empty.
func (d *Disk) take() ([]request, bool) {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	for len(d.queue) == 0 {
		if d.closing {
			return nil, false
		}
		d.qcond.Wait()
	}
	reqs := d.queue
	d.queue = d.free[:0]
	d.free = nil
	return reqs, true
}

// run is the committer goroutine: it takes every queued group, writes them
// with one write (write) and one fsync, applies them to the index and
// completes them, then starts over with whatever arrived meanwhile.
func (d *Disk) run() {
	defer close(d.runDone)
	for {
		reqs, ok := d.take()
		if !ok {
			return
		}
		for rest := reqs; len(rest) > 0; {
			n := chunk(rest)
			d.commit(rest[:n])
			rest = rest[n:]
		}
		waiters := 0
		for i := range reqs {
			if reqs[i].wait != nil {
				waiters++
			}
		}
		clear(reqs)
		d.free = reqs[:0]
		d.maybeCompact()
		d.gather(waiters)
	}
}

// gather lets the goroutines whose Apply just returned run and submit
// their next groups before the next commit is cut, so that it carries them:
// it yields until as many groups as there were waiters are queued, at most
// a few times. Runs on the committer goroutine.
func (d *Disk) gather(waiters int) {
	for range 8 {
		runtime.Gosched()
		d.qmu.Lock()
		n := len(d.queue)
		d.qmu.Unlock()
		if n >= waiters {
			return
		}
	}
}

// chunk returns how many of reqs go into one commit: at most
// maxCommitBytes (but at least one group), and a compaction copy only as
// the first group, so that its check against the index sees every group
// before it.
func chunk(reqs []request) int {
	size := reqs[0].b.Size()
	n := 1
	for ; n < len(reqs); n++ {
		if reqs[n].copies != nil {
			break
		}
		size += reqs[n].b.Size()
		if size > maxCommitBytes {
			break
		}
	}
	return n
}

// sticky returns the error that stopped the store's writes, if any.
func (d *Disk) sticky() error {
	if p := d.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail makes err the sticky error that stops every write and closes the
// Failed channel. The owner of the store logs it (Failed).
func (d *Disk) fail(err error) error {
	err = fmt.Errorf("%w: %w", err, fault.ErrUnavailable)
	if d.failed.CompareAndSwap(nil, &err) {
		d.failOnce.Do(func() { close(d.failedc) })
	}
	return d.sticky()
}

// commit writes reqs with one write (write) and one fsync, then applies them
// to the index and completes them. A write that fails for lack of space
// is undone and retried as space.go describes. Runs on the committer
// goroutine.
func (d *Disk) commit(reqs []request) {
	if err := d.sticky(); err != nil {
		d.finish(reqs, err)
		return
	}
	if reqs[0].copies != nil {
		d.filterCopies(&reqs[0])
		d.stats.copied.Add(uint64(reqs[0].b.Size()))
	}
	for {
		idx, synced, err := d.writeCommit(reqs)
		if err == nil {
			if idx != d.lastIndex {
				if synced {
					d.writeMarker(idx)
				}
				d.lastIndex = idx
				d.publish(reqs)
				d.observe(reqs)
			}
			d.stalled = false
			d.finish(reqs, nil)
			return
		}
		if !isNoSpace(err) {
			d.finish(reqs, d.fail(err))
			return
		}
		if rerr := d.restore(); rerr != nil {
			d.finish(reqs, d.fail(fmt.Errorf("%w; restoring the log after it: %w", err, rerr)))
			return
		}
		if d.enterFull(err) {
			continue // the reserve's space is free: try again
		}
		// No reserve left: refuse what may be refused, wait for space for
		// the rest.
		var need int64
		for i := range reqs {
			r := &reqs[i]
			if r.err != nil || r.b.n == 0 {
				continue
			}
			if r.b.growth || r.copies != nil {
				r.err = ErrNoSpace
				continue
			}
			need += int64(r.b.Size()) + headerRoom
		}
		if need == 0 {
			d.finish(reqs, nil)
			return
		}
		if !d.waitSpace(need, err) {
			d.finish(reqs, fmt.Errorf("storage closed while waiting for free space: %w", ErrNoSpace))
			return
		}
	}
}

// writeMarker records idx, just made durable, in the durable-position
// marker (marker.go). A failed marker write weakens the lost-tail check
// only: it is logged once and otherwise ignored. Runs on the committer
// goroutine.
func (d *Disk) writeMarker(idx uint64) {
	w := d.writes[len(d.writes)-1]
	err := d.marker.write(marker{last: idx, tailIndex: w.s.index, tailSize: w.size})
	if err == nil && len(d.writes) > 1 && !d.opts.UnsafeNoSync {
		err = d.marker.f.Sync()
	}
	if err != nil && !d.marker.failed {
		d.marker.failed = true
		d.logger.Warn("store: writing the durable-position marker failed; the lost-tail check may miss the newest records", "err", err)
	}
}

// writeCommit places reqs in the log and writes them (write) with one
// fsync, or none when every group written is marked NoSync (synced
// reports which). It returns the log index of the last record
// written (d.lastIndex if there was nothing to write). A group with an
// error of its own, or marked RefuseWhenFull while the disk is full, is
// skipped and keeps its error in reqs[i].err. Runs on the committer
// goroutine.
func (d *Disk) writeCommit(reqs []request) (uint64, bool, error) {
	full := d.full.Load()
	d.places = d.places[:0]
	d.commitBytes, d.syncTime = 0, 0
	d.mu.RLock()
	tail := d.segs[len(d.segs)-1]
	d.mu.RUnlock()
	d.writes = append(d.writes[:0], segWrite{s: tail, size: tail.size, n: tail.n, lastOff: tail.lastOff})
	w := &d.writes[0]
	commit := d.lastIndex + 1
	idx := d.lastIndex
	sync := false
	for i := range reqs {
		b := reqs[i].b
		if reqs[i].err == nil {
			reqs[i].err = b.check()
		}
		if reqs[i].err == nil && b.n > 0 && b.growth && full {
			reqs[i].err = ErrNoSpace
		}
		if reqs[i].err != nil || b.n == 0 {
			d.places = append(d.places, placed{})
			continue
		}
		rec := b.seal(commit)
		idx++
		sync = sync || !b.nosync
		// Mirror wal.Log.writeBatch: a new segment starts before the
		// commit's first record if the tail is over the target size, and
		// after any record that brings it to the target size.
		if idx == commit && w.size > d.opts.SegmentSize {
			w = d.cycle(idx)
		}
		p := placed{seg: w.s, off: w.size, hdr: uvarintLen(uint64(len(rec))), rec: rec}
		d.places = append(d.places, p)
		w.size += int64(p.hdr + len(rec))
		d.commitBytes += p.hdr + len(rec)
		w.n++
		w.lastOff = p.off
		if w.size >= d.opts.SegmentSize {
			w = d.cycle(idx + 1)
		}
	}
	if idx == d.lastIndex {
		return idx, true, nil
	}
	return idx, sync, d.write(sync)
}

// cycle starts a new segment whose first record has index. Runs on the
// committer goroutine.
func (d *Disk) cycle(index uint64) *segWrite {
	prev := d.writes[len(d.writes)-1]
	s := &segment{
		id:    prev.s.id + 1,
		index: index,
		path:  d.path(index),
		base:  prev.s.base + uint64(prev.size),
	}
	s.refs.Store(1)
	d.writes = append(d.writes, segWrite{s: s})
	return &d.writes[len(d.writes)-1]
}

// write writes the commit placed in d.places and makes it durable: one
// WriteBatch per segment it writes to, then one fsync of the tail file
// and, if segments were started, of the directory. Segments the log closed
// were fsynced by the log when it closed them.
//
// A commit that fills the tail segment is written in two WriteBatch calls
// (or more), split where the log starts a new segment: the log closes the
// segment after the first part's last record and starts the next one
// empty, and write gives the new segment's buffer its room (roomyTail)
// before the log appends the rest of the commit to it. Written in one
// call, the rest of the commit would grow a new buffer from nothing by
// append, copying it over and over: 7% of the CPU of
// BenchmarkApplyConcurrent/writers=64/batch=16, whose commits are about
// 700 KiB.
func (d *Disk) write(sync bool) error {
	d.wb.Clear()
	idx := d.lastIndex
	var part *segment // the segment the records in d.wb go to
	for _, p := range d.places {
		if p.rec == nil {
			continue
		}
		idx++
		if part != nil && p.seg != part {
			if err := d.log.WriteBatch(&d.wb); err != nil {
				return fmt.Errorf("write log: %w", err)
			}
			if err := d.log.ClearCache(); err != nil {
				return fmt.Errorf("clear log cache: %w", err)
			}
			d.logMu.Lock()
			d.tailBuf = roomyTail(d.log, int(d.opts.SegmentSize+d.opts.SegmentSize/8), d.tailBuf)
			d.logMu.Unlock()
		}
		part = p.seg
		d.wb.Write(idx, p.rec)
	}
	if err := d.log.WriteBatch(&d.wb); err != nil {
		return fmt.Errorf("write log: %w", err)
	}
	d.stats.commits.Add(1)
	d.stats.written.Add(uint64(d.commitBytes))
	started := d.writes[1:]
	if len(started) > 0 {
		for i, w := range d.writes[:len(d.writes)-1] {
			if fi, err := os.Stat(w.s.path); err != nil || fi.Size() != w.size {
				return fmt.Errorf("segment %s: log layout differs from the store's (size %d, want %d): %v", w.s.name(), sizeOf(fi), w.size, err)
			}
			f, err := os.Open(started[i].s.path)
			if err != nil {
				return fmt.Errorf("open new segment: %w", err)
			}
			started[i].s.f = f
		}
		// The closed segment's bytes are in its file; drop the log's copy.
		if err := d.log.ClearCache(); err != nil {
			return fmt.Errorf("clear log cache: %w", err)
		}
	}
	if len(started) > 0 || !d.tailSized {
		// Once per segment, after the log dropped the closed segment's
		// buffer, which the new tail then reuses. If the log's layout is
		// not the known one, the segment is written as the log grows it.
		d.logMu.Lock()
		d.tailBuf = roomyTail(d.log, int(d.opts.SegmentSize+d.opts.SegmentSize/8), d.tailBuf)
		d.logMu.Unlock()
		d.tailSized = true
	}
	if d.hooks.afterWrite != nil {
		if err := d.hooks.afterWrite(); err != nil {
			return err
		}
	}
	if d.opts.UnsafeNoSync {
		return nil
	}
	if sync {
		if d.hooks.beforeSync != nil {
			d.hooks.beforeSync()
		}
		start := time.Now()
		if err := d.log.Sync(); err != nil {
			return fmt.Errorf("sync log: %w", err)
		}
		d.syncTime = time.Since(start)
		d.stats.syncs.Add(1)
	}
	if len(started) > 0 {
		if err := syncDir(d.dir); err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
		d.stats.syncs.Add(1)
	}
	return nil
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

// publish makes a durable commit visible: it copies the records into the
// cache, then, under mu, records the segments' growth and applies every
// group to the index in order. Runs on the committer goroutine.
func (d *Disk) publish(reqs []request) {
	for _, p := range d.places {
		if p.rec == nil {
			continue
		}
		var hdr [10]byte
		n := putUvarint(hdr[:], uint64(len(p.rec)))
		pos := p.seg.base + uint64(p.off)
		d.cache.append(pos, hdr[:n])
		d.cache.append(pos+uint64(n), p.rec)
	}
	var groups, muts uint64
	d.mu.Lock()
	for i, w := range d.writes {
		w.s.size, w.s.n, w.s.lastOff = w.size, w.n, w.lastOff
		w.s.synced = w.size
		if i > 0 {
			d.segs = append(d.segs, w.s)
		}
	}
	for i, p := range d.places {
		if p.rec == nil {
			continue
		}
		b := reqs[i].b
		d.applyRecord(p.seg, p.off+int64(p.hdr), p.rec, len(p.rec)-b.Size())
		groups++
		muts += uint64(b.n)
	}
	d.mu.Unlock()
	d.stats.groups.Add(groups)
	d.stats.mutations.Add(muts)
}

// observe reports a durable commit of reqs to Options.OnCommit. Runs on
// the committer goroutine.
func (d *Disk) observe(reqs []request) {
	if d.opts.OnCommit == nil {
		return
	}
	c := Commit{Bytes: d.commitBytes, Sync: d.syncTime}
	oldest := time.Now()
	for i := range reqs {
		r := &reqs[i]
		if r.err != nil || r.b.n == 0 {
			continue
		}
		c.Groups++
		c.Records += r.b.n
		if !r.at.IsZero() && r.at.Before(oldest) {
			oldest = r.at
		}
	}
	c.Wait = time.Since(oldest)
	d.opts.OnCommit(c)
}

func putUvarint(buf []byte, x uint64) int {
	i := 0
	for x >= 0x80 {
		buf[i] = byte(x) | 0x80
		x >>= 7
		i++
	}
	buf[i] = byte(x)
	return i + 1
}

// finish completes reqs in order. A request's own error wins over err.
func (d *Disk) finish(reqs []request, err error) {
	d.stats.pendingCount.Add(-uint64(len(reqs)))
	for i := range reqs {
		r := &reqs[i]
		e := err
		if r.err != nil {
			e = r.err
		}
		if r.done != nil {
			r.done(e)
		} else if r.wait != nil {
			r.wait <- e
		}
	}
}

// applyRecord applies the mutations of rec, a valid record at offset recOff
// of s whose mutations start at rec[body:], in order, to the index and to
// the segments' live bytes: a put's record bytes are live until a later
// put, delete or range delete removes its key. Runs with mu held for
// writing (or during Open).
func (d *Disk) applyRecord(s *segment, recOff int64, rec []byte, body int) {
	for pos := body; pos < len(rec); {
		m, next, _ := nextMutation(rec, pos)
		pos = next
		switch m.kind {
		case kindDelete:
			if old, ok := d.index.delete(m.key); ok {
				d.kill(len(m.key), old)
			}
		case kindDeleteRange:
			d.index.deleteRange(m.key, m.end, d.kill)
		default:
			l := loc{seg: s.id, off: uint32(recOff + int64(m.valueOff)), vlen: uint32(len(m.value))}
			if old, ok := d.index.set(m.key, l); ok {
				d.kill(len(m.key), old)
			}
			s.live += recordSize(len(m.key), len(m.value))
		}
	}
}

// kill takes the put of a klen-byte key whose value lies at l, removed from
// the index, off its segment's live bytes. Runs with mu held for writing.
func (d *Disk) kill(klen int, l loc) {
	d.seg(l.seg).live -= recordSize(klen, int(l.vlen))
}

// filterCopies drops from a compaction copy every put whose key no longer
// lies where the compactor found it: the key was overwritten or deleted
// after the compactor read it, and copying it would bring back a stale
// value. Runs on the committer goroutine, with every earlier group applied.
func (d *Disk) filterCopies(r *request) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	b := r.b
	muts := b.mutations()
	keep := true
	i := 0
	for pos := 0; pos < len(muts); i++ {
		m, next, _ := nextMutation(muts, pos)
		pos = next
		e, ok := d.index.get(m.key)
		if !ok || e.seg != r.copies[i].seg || e.off != r.copies[i].off {
			keep = false
			break
		}
	}
	if keep {
		return
	}
	d.scratch.Reset()
	i = 0
	for pos := 0; pos < len(muts); i++ {
		m, next, _ := nextMutation(muts, pos)
		pos = next
		e, ok := d.index.get(m.key)
		if ok && e.seg == r.copies[i].seg && e.off == r.copies[i].off {
			d.scratch.Put(m.key, m.value)
		}
	}
	r.b = &d.scratch
}

// Repaired reports whether Open, with Options.Repair, dropped or cut
// anything that was durable (damaged or missing records; not a torn final
// commit, which was never acknowledged). A cluster node whose log was
// repaired may have lost entries it acknowledged to its peers, so it
// rebuilds its replicas from them.
func (d *Disk) Repaired() bool { return d.repaired }

// Get returns a copy of the value of key, or ErrNotFound. The value is read
// from the cache or with one pread at its indexed position. Errors:
// ErrNotFound, ErrClosed, or a read error naming the segment.
func (d *Disk) Get(key []byte) ([]byte, error) {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return nil, ErrClosed
	}
	e, ok := d.index.get(key)
	if !ok {
		d.mu.RUnlock()
		return nil, ErrNotFound
	}
	s := d.seg(e.seg)
	s.acquire()
	d.mu.RUnlock()
	v := make([]byte, e.vlen)
	err := d.readValue(v, s, e.off)
	s.release()
	if err != nil {
		return nil, err
	}
	return v, nil
}

// readValue fills v with the value at offset off of s. The caller holds a
// reference on s.
func (d *Disk) readValue(v []byte, s *segment, off uint32) error {
	if len(v) == 0 {
		return nil
	}
	if d.cache.read(v, s.base+uint64(off)) {
		d.stats.cacheHits.Add(1)
		return nil
	}
	d.stats.cacheMisses.Add(1)
	if _, err := s.f.ReadAt(v, int64(off)); err != nil {
		return fmt.Errorf("read segment %s offset %d: %w", s.name(), off, err)
	}
	return nil
}

// snapshot returns a copy-on-write snapshot of the index and a reference
// on every segment it may point into. Call release when done.
func (d *Disk) snapshot() (*keyIndex, []*segment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, nil, ErrClosed
	}
	snap := d.index.snapshot()
	segs := make([]*segment, len(d.segs))
	copy(segs, d.segs)
	for _, s := range segs {
		s.acquire()
	}
	return snap, segs, nil
}

// Scan calls fn for each key in [start, end) in ascending byte order with
// its value; a nil end means no upper bound. It sees the store as of one
// moment: every group made durable before Scan started and none after, so
// never part of a group. key and value are valid only during fn and must
// not be modified. An error from fn stops the scan and is returned; so is
// ErrClosed or a read error. fn may call any method but Close.
func (d *Disk) Scan(start, end []byte, fn func(key, value []byte) error) error {
	return d.scan(start, end, true, fn)
}

// ScanKeys is Scan without the values: it reads nothing from the files.
func (d *Disk) ScanKeys(start, end []byte, fn func(key []byte) error) error {
	return d.scan(start, end, false, func(key, _ []byte) error { return fn(key) })
}

func (d *Disk) scan(start, end []byte, values bool, fn func(key, value []byte) error) error {
	snap, segs, err := d.snapshot()
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	var buf []byte
	ra := readAhead{d: d}
	defer ra.release()
	snap.ascend(start, end, func(key []byte, e loc) bool {
		var v []byte
		if values {
			if cap(buf) < int(e.vlen) {
				buf = make([]byte, e.vlen)
			}
			if v, err = ra.value(buf[:e.vlen], segs[e.seg-segs[0].id], e.off, e.vlen); err != nil {
				return false
			}
		}
		err = fn(key, v)
		return err == nil
	})
	return err
}

// Stats returns the store's current statistics.
func (d *Disk) Stats() Stats {
	st := Stats{
		Groups:         d.stats.groups.Load(),
		Mutations:      d.stats.mutations.Load(),
		Commits:        d.stats.commits.Load(),
		Syncs:          d.stats.syncs.Load(),
		BytesWritten:   d.stats.written.Load(),
		Compactions:    d.stats.compactions.Load(),
		CopiedBytes:    d.stats.copied.Load(),
		ReclaimedBytes: d.stats.reclaimed.Load(),
		CacheHits:      d.stats.cacheHits.Load(),
		CacheMisses:    d.stats.cacheMisses.Load(),
		PendingGroups:  int(d.stats.pendingCount.Load()),
		Full:           d.full.Load(),
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	st.Segments = len(d.segs)
	st.Keys = d.index.len()
	for _, s := range d.segs {
		st.LogBytes += s.size
		st.LiveBytes += s.live
	}
	return st
}

// Close waits for every submitted group to be durable (or to fail: groups
// waiting for free space fail with ErrNoSpace), stops the store's
// goroutines and closes its files. It returns the sticky write error if
// the store had failed, or an error closing the log. Later calls return
// the first call's result.
func (d *Disk) Close() error {
	d.closeOnce.Do(func() {
		close(d.stopc)
		d.qmu.Lock()
		d.closing = true
		d.qcond.Broadcast()
		d.qmu.Unlock()
		<-d.runDone
		<-d.compactDone
		<-d.spaceDone
		d.compactMu.Lock() // an explicit Compact may still be running
		err := d.log.Close()
		d.compactMu.Unlock()
		if !d.opts.UnsafeNoSync && d.sticky() == nil {
			err = errors.Join(err, d.marker.f.Sync())
		}
		err = errors.Join(err, d.marker.f.Close())
		d.mu.Lock()
		d.closed = true
		for _, s := range d.segs {
			s.release()
		}
		d.mu.Unlock()
		d.lock.Close()
		d.closeErr = errors.Join(d.sticky(), err)
	})
	return d.closeErr
}
