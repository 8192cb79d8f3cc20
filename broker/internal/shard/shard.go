// Package shard is the goroutine shell around the scheduler state machine,
// in the way etcd raft's node.go drives its RawNode. One goroutine owns a
// *sched.Sched and makes every scheduling decision without locks;
// connection goroutines reach it with commands over a bounded channel.
//
// Each loop iteration ticks the scheduler, applies the commands that
// arrived, and turns the Ready into one storage group. The group is handed
// to the store asynchronously, and the Ready's replies and deliveries are
// released only once it is durable (persist before send), in Ready order:
// an enqueue is acknowledged after its message is fsynced, an ack after
// its deletion is. Meanwhile the loop goes on scheduling, so one fsync
// carries every command that arrived while the previous one ran (group
// commit).
package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// Storage is what the shard needs of the storage engine. The contract
// (stated in full in package store): a group applied with ApplyAsync is
// atomic and durable before done runs, groups complete in submission
// order, and Get and Scan see every completed group. Health is read once
// per enqueue command and must be cheap: while it reports Full, the shard
// refuses enqueues (store.ErrNoSpace) before they reach the scheduler,
// and the store writes the groups the shard still submits (acks, lease
// state) from its reserve.
type Storage interface {
	ApplyAsync(b *store.Batch, done func(error))
	Get(key []byte) ([]byte, error)
	Scan(start, end []byte, fn func(key, value []byte) error) error
	Health() store.Health
}

// A Sink receives a subscription's deliveries, its expired leases and its
// end. Its methods are called from the goroutine that completes storage
// groups and must not block.
type Sink interface {
	// Expired reports leases of the subscription that ended without a
	// settle; the scheduler has given back one credit for each. It is
	// called before Deliver for the deliveries that may spend that credit.
	// leases is the sink's to keep.
	Expired(sub sched.SubID, leases []sched.ExpiredLease)
	// Deliver hands over messages leased to the subscription. msgs and its
	// fields are the sink's to keep.
	Deliver(sub sched.SubID, msgs []sched.Delivered)
	// Ended reports that the broker closed the subscription (its queue was
	// deleted).
	Ended(sub sched.SubID, err error)
}

// Config configures a shard.
type Config struct {
	Sched  sched.Config
	Logger *slog.Logger
	// Failure runs a queue's on_failure hook for a failed message and
	// returns its decision; nil, or an error, means the default policy.
	// It runs on a worker goroutine, never on the shard's.
	Failure func(ctx context.Context, f sched.Failure, record []byte) (sched.Decision, error)
	// Clock returns the current time; nil means time.Now. Tests inject a
	// fake.
	Clock func() time.Time
	// Replication, if set, makes the shard one replica of a queue's Raft
	// group (see Replication); nil: a single node's shard, which applies
	// what it is given.
	Replication *Replication
}

// Shard runs one scheduler.
type Shard struct {
	cfg  Config
	st   Storage
	log  *slog.Logger
	s    *sched.Sched
	cmds opQueue

	// Owned by the loop goroutine.
	refs    map[sched.Ref]func(Result)
	nextRef sched.Ref
	sinks   map[sched.SubID]Sink
	closing []sched.SubID // unsubscribed this iteration: drop sinks after the flush
	timer   *time.Timer   // armed for the scheduler's next deadline

	// Time: a wall-clock origin plus monotonic elapsed, so scheduler time
	// is Unix nanoseconds that never go backwards.
	origin time.Time

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	failed   atomic.Pointer[error]

	// failures carries failures to the on_failure workers. Storage
	// completions, which hand failures to it, may still run after Close;
	// none is taken once the loop has stopped (done).
	failures failures

	// inflight bounds the storage groups submitted and not yet durable,
	// in number and in bytes: when the disk falls behind, the loop waits
	// here instead of queueing without limit, and commands back up into
	// the bounded channel, which slows producers.
	inflight inflight

	restored []sched.QueueSpec
	openedAt uint64 // the index of the image a replica opened from

	// A replicated shard: its loop state, and what the group's driver
	// hands it (committed entries, leadership) without blocking.
	rep           *replicaState
	commitMu      sync.Mutex
	committed     []Entry
	leaderChanges []bool
	commitc       chan struct{}
}

// Limits on the storage groups waiting for durability. The store puts
// every waiting group behind its next fsync, so a few are enough to keep
// the disk busy; the byte limit keeps large messages from piling up in
// memory while the disk catches up.
const (
	maxGroupsInFlight = 64
	maxBytesInFlight  = 64 << 20
)

// inflight counts storage groups waiting for durability. acquire blocks
// the shard loop while either limit is reached (a group larger than the
// byte limit still goes alone); release runs on the store's completion
// goroutine.
type inflight struct {
	mu      sync.Mutex
	cond    sync.Cond
	groups  int
	bytes   int64
	unbound bool // Close: stop waiting, the store may be waiting for space
}

func (f *inflight) acquire(size int64) {
	f.mu.Lock()
	if f.cond.L == nil {
		f.cond.L = &f.mu
	}
	for !f.unbound && f.groups > 0 && (f.groups >= maxGroupsInFlight || f.bytes+size > maxBytesInFlight) {
		f.cond.Wait()
	}
	f.groups++
	f.bytes += size
	f.mu.Unlock()
}

// unbind lets every acquire through from now on, so that a shard loop
// waiting for the store (which may wait for free space until it is closed)
// can finish its last flush and stop.
func (f *inflight) unbind() {
	f.mu.Lock()
	f.unbound = true
	if f.cond.L != nil {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

func (f *inflight) release(size int64) {
	f.mu.Lock()
	f.groups--
	f.bytes -= size
	if f.cond.L != nil {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

// Open recovers the scheduler's state from st and starts the shard's
// goroutine. Close stops it.
func Open(cfg Config, st Storage) (*Shard, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
		if testClock != nil {
			cfg.Clock = testClock
		}
	}
	origin := cfg.Clock()
	sh := &Shard{
		cfg:     cfg,
		st:      st,
		log:     cfg.Logger,
		s:       sched.New(cfg.Sched),
		refs:    map[sched.Ref]func(Result){},
		sinks:   map[sched.SubID]Sink{},
		origin:  origin,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		commitc: make(chan struct{}, 1),
	}
	sh.cmds.ready = make(chan struct{}, 1)
	sh.failures.idle.L = &sh.failures.mu
	start := time.Now()
	n := 0
	restore := func(k, v []byte) error {
		n++
		return sh.s.Restore(k, v)
	}
	if r := cfg.Replication; r != nil {
		// A replica starts from its last image, or empty, and replays
		// its group's log after it: the store does not hold every part
		// of a scheduler's state (its credit, deficits, buckets or lease
		// counter), and replicas must agree on all of it, since each
		// decides the deliveries of a Deliver entry itself.
		sh.rep = &replicaState{cfg: r, pending: map[uint64][]func(Result){}}
		if r.ImageKey != nil {
			index, image, found, err := LoadImage(st, r.ImageKey)
			if err != nil {
				return nil, fmt.Errorf("recover queue %s: %w", r.Queue, err)
			}
			if found {
				s, err := sched.LoadImage(cfg.Sched, image)
				if err != nil {
					return nil, fmt.Errorf("recover queue %s from its image at %d: %w", r.Queue, index, err)
				}
				sh.s = s
				sh.rep.applied = index
				sh.openedAt = index
				sh.rep.imageSize = len(image)
				sh.log.Info("loaded the replica's image", "index", index, "bytes", len(image))
			}
		}
	} else {
		end := prefixEnd([]byte(sched.Prefix))
		if err := st.Scan([]byte(sched.Prefix), end, restore); err != nil {
			return nil, fmt.Errorf("recover the queues: %w", err)
		}
		// Lease tokens must never repeat across restarts: start above any
		// token of an earlier boot by counting from the boot time.
		apply(sh.s, 0, &LeaseEpoch{Base: uint64(origin.UnixNano())})
		apply(sh.s, 0, &Tick{Now: sh.now()})
	}
	sh.restored = sh.s.Specs()
	sh.log.Info("recovered scheduler state", "records", n, "elapsed", time.Since(start).Round(time.Millisecond))

	go sh.run()
	return sh, nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// now returns the scheduler time: this process's wall clock when the
// shard opened plus the monotonic time elapsed since, so that a step of
// the wall clock while it runs changes nothing.
//
// A replica leading its group goes on from the group's time instead (the
// last Tick applied when it took the lead, or a later one it applies),
// at the rate of its monotonic clock, slewed toward its own time by at
// most 1/maxSlew of the time elapsed (500 ppm, as NTP slews). So a
// leader whose wall clock is an hour ahead of its predecessor's expires
// no lease early: a lease of 30 s lasts at least 29.985 s; one an hour
// behind expires none late by more than as much.
func (sh *Shard) now() sched.Time {
	own := sched.Time(sh.origin.UnixNano() + int64(sh.cfg.Clock().Sub(sh.origin)))
	r := sh.rep
	if r == nil || !r.leading || r.leadAt.IsZero() {
		return own
	}
	el := sched.Time(sh.cfg.Clock().Sub(r.leadAt))
	t := r.leadBase + el
	if cur := sh.s.Now(); cur > t {
		// Entries of the previous leader applied since: go on from them.
		r.leadBase += cur - t
		t = cur
	}
	slew := el / maxSlew
	return t + min(max(own-t, -slew), slew)
}

// maxSlew bounds how fast a leader's time moves toward its own wall
// clock: by 1/maxSlew of the time elapsed (see now).
const maxSlew = 2000

// OpenedAt returns the index of the image a replica was opened from (see
// Replication.ImageKey); 0 when it opened empty.
func (sh *Shard) OpenedAt() uint64 { return sh.openedAt }

// RestoredSpecs returns the queue definitions found at recovery, so the
// shell can compile their hooks.
func (sh *Shard) RestoredSpecs() []sched.QueueSpec { return sh.restored }

// Close stops the shard after the commands already queued, and its
// on_failure workers. Replies still waiting for storage are released when
// their groups complete, which may be after Close returns; failures they
// carry are then left to recovery (a restart finds the messages failed
// and undecided, as after a crash).
func (sh *Shard) Close() {
	sh.stopOnce.Do(func() { close(sh.stop) })
	sh.inflight.unbind()
	<-sh.done
	sh.closeFailures()
}

// Err returns the storage failure that stopped the shard, or nil.
func (sh *Shard) Err() error {
	if p := sh.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// do queues o for the shard goroutine. It blocks while the command
// queue is full (back-pressure on producers) and fails with
// ErrUnavailable once the shard has stopped.
func (sh *Shard) do(ctx context.Context, o op) error {
	if err := sh.Err(); err != nil {
		return err
	}
	return sh.cmds.push(ctx, sh.done, o)
}

// ref registers a result callback, if any; runs on the shard goroutine.
func (sh *Shard) ref(cb func(Result)) sched.Ref {
	if cb == nil {
		return 0
	}
	sh.nextRef++
	sh.refs[sh.nextRef] = cb
	return sh.nextRef
}

func (sh *Shard) run() {
	defer close(sh.done)
	sh.timer = time.NewTimer(time.Hour)
	defer sh.timer.Stop()
	timer := sh.timer
	var batch []op // the commands taken, reused from step to step
	for {
		// live: the batch holds an operation proposed here (not a
		// replay or a barrier), so it ends with a Deliver.
		live := false
		take := func(o op) {
			if sh.rep != nil {
				if o.cmd != nil {
					live = true
				}
				sh.takeReplicated(o)
				return
			}
			if !live && (o.cmd != nil || o.read != nil) {
				live = true
				apply(sh.s, 0, &Tick{Now: sh.now()})
			}
			sh.run1(o)
		}
		select {
		case <-sh.cmds.ready:
			// Take every command already queued, and those that come
			// meanwhile, so they share one storage group.
			for n := 0; n < maxOpsPerStep; {
				batch = sh.cmds.take(batch, maxOpsPerStep-n)
				if len(batch) == 0 {
					break
				}
				for _, o := range batch {
					take(o)
				}
				n += len(batch)
				clear(batch) // keep no command's closures alive
				batch = batch[:0]
			}
			if cap(batch) > maxOpsPerStep {
				batch = nil // a burst's buffer: let it go
			}
		case <-sh.commitc:
			sh.drainCommitted()
			continue
		case <-timer.C:
			live = true
			if sh.rep == nil {
				apply(sh.s, 0, &Tick{Now: sh.now()})
			}
		case <-sh.stop:
			// Run what is already queued, then stop.
			for {
				batch = sh.cmds.take(batch, maxQueuedOps)
				if len(batch) == 0 {
					break
				}
				for _, o := range batch {
					sh.run1(o)
				}
				clear(batch)
				batch = batch[:0]
			}
			sh.flush(timer)
			sh.dropCommitted()
			return
		}
		if sh.rep != nil {
			// Replicated: the batch becomes one entry, applied once
			// committed. Reads were answered from the applied state.
			if live {
				sh.proposeBatch()
			}
			if sh.s.HasReady() {
				sh.flush(timer)
			}
			continue
		}
		if live {
			// The batch ends with a Deliver: decide the deliveries and
			// cut the batch's effects into one storage group. (Replayed
			// commands carry their own Delivers.)
			apply(sh.s, 0, &Deliver{})
			sh.flush(timer)
		}
	}
}

// flush turns the scheduler's Ready into a storage group and releases its
// effects once the group is durable.
func (sh *Shard) flush(timer *time.Timer) {
	for sh.s.HasReady() {
		rd := sh.s.Ready()
		b := batchPool.Get().(*store.Batch)
		b.Reset()
		size := 0
		for _, m := range rd.Persist {
			size += len(m.Key) + len(m.Value) + len(m.End) + 21
		}
		b.Grow(size)
		for _, m := range rd.Persist {
			switch {
			case m.Delete && m.End != nil:
				// A range: one mutation in the record, whatever it
				// removes (a queue's messages when it is deleted).
				b.DeleteRange(m.Key, m.End)
			case m.Delete:
				b.Delete(m.Key)
			default:
				b.Put(m.Key, m.Value)
			}
		}
		follower := false
		if r := sh.rep; r != nil {
			// The applied index goes with the effects it covers.
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], r.applied)
			b.Put(r.cfg.AppliedKey, v[:])
			follower = !r.leading
			// The log is what is durable: a replica rebuilds this state
			// from it (Open), so its writes wait for no fsync of their
			// own. Replies and deliveries still wait until the group is
			// written and visible, for the reads of delivered records.
			b.NoSync()
		}
		rel := &release{batch: b}
		for _, r := range rd.Replies {
			cb := sh.refs[r.Ref]
			delete(sh.refs, r.Ref)
			if cb != nil {
				rel.replies = append(rel.replies, reply{cb, resultOf(r.Value)})
			}
		}
		for _, e := range rd.Expired {
			if sink := sh.sinks[e.Sub]; sink != nil {
				rel.expired = append(rel.expired, expiry{sink, e.Sub, slices.Clone(e.Leases)})
			}
		}
		for _, d := range rd.Deliveries {
			sink := sh.sinks[d.Sub]
			if sink == nil {
				continue
			}
			msgs := make([]sched.Delivered, len(d.Msgs))
			copy(msgs, d.Msgs)
			for i := range msgs {
				msgs[i].Key = append([]byte(nil), msgs[i].Key...)
			}
			rel.deliveries = append(rel.deliveries, delivery{sink, d.Sub, msgs})
		}
		for _, e := range rd.Ended {
			if sink := sh.sinks[e.Sub]; sink != nil {
				rel.ended = append(rel.ended, ended{sink, e.Sub, e.Err})
				delete(sh.sinks, e.Sub)
			}
		}
		for _, sub := range sh.closing {
			delete(sh.sinks, sub)
		}
		sh.closing = sh.closing[:0]
		for _, f := range rd.Failures {
			if follower {
				break // the leader runs on_failure and proposes its Decide
			}
			f.Key = append([]byte(nil), f.Key...)
			rel.failures = append(rel.failures, f)
		}
		if d := rd.Deadline; d != 0 && !follower {
			wait := time.Duration(int64(d) - int64(sh.now()))
			timer.Reset(max(wait, 0))
		}
		sh.s.Advance(rd)
		groupBytes := int64(b.Size())
		sh.inflight.acquire(groupBytes)
		sh.st.ApplyAsync(b, rel.run(sh, groupBytes))
	}
}

type reply struct {
	cb func(Result)
	r  Result
}

type delivery struct {
	sink Sink
	sub  sched.SubID
	msgs []sched.Delivered
}

type expiry struct {
	sink   Sink
	sub    sched.SubID
	leases []sched.ExpiredLease
}

type ended struct {
	sink Sink
	sub  sched.SubID
	err  error
}

// release is what a Ready lets out once its group is durable, in this
// order: replies, expired leases, deliveries, ended subscriptions.
type release struct {
	batch      *store.Batch // the group, returned to batchPool once durable
	replies    []reply
	expired    []expiry
	deliveries []delivery
	ended      []ended
	failures   []sched.Failure
}

func (r *release) run(sh *Shard, size int64) func(error) {
	return func(err error) {
		defer sh.inflight.release(size)
		// The store is done with the batch once it calls back.
		if r.batch.Cap() <= maxPooledBatch {
			batchPool.Put(r.batch)
		}
		r.batch = nil
		if err != nil {
			sh.storageFailed(err)
			err = fmt.Errorf("storage failed: %w", fault.ErrUnavailable)
			for _, rp := range r.replies {
				rp.cb(Result{Err: err})
			}
			return
		}
		for _, rp := range r.replies {
			rp.cb(rp.r)
		}
		// Expiries first: a delivery of this Ready may spend the credit
		// they gave back.
		for _, e := range r.expired {
			e.sink.Expired(e.sub, e.leases)
		}
		for _, d := range r.deliveries {
			d.sink.Deliver(d.sub, d.msgs)
		}
		for _, e := range r.ended {
			e.sink.Ended(e.sub, e.err)
		}
		for _, f := range r.failures {
			if !sh.fail(f) {
				return // stopped: nothing can decide any more
			}
		}
	}
}

// storageFailed records a storage failure. The shard submits no group the
// store may refuse, so a failed group means the store failed for good (or
// closed): its scheduler is ahead of what is durable, so the shard refuses
// every later command. The owner of the store acts on the failure
// (fila-server exits, and a restart recovers from the durable log) and
// logs it; the shard only notes it at debug level.
func (sh *Shard) storageFailed(err error) {
	if sh.failed.CompareAndSwap(nil, &err) {
		sh.log.Debug("storage failed; refusing further commands", "err", err)
	}
}

// runFailure runs f's on_failure hook, if any, and proposes the
// decision: the hook's, or the default policy's when there is no hook or
// it fails.
func (sh *Shard) runFailure(f sched.Failure) {
	d := sched.DefaultDecision(f.Policy, f.Attempts)
	if sh.cfg.Failure != nil {
		rec, err := sh.st.Get(f.Key)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if hd, herr := sh.cfg.Failure(ctx, f, rec); herr == nil {
				d = hd
			}
			cancel()
		}
	}
	sh.decide(f, d)
}

func (sh *Shard) decide(f sched.Failure, d sched.Decision) {
	// Never block a storage completion: Decide is posted from a goroutine
	// when the command queue is full.
	o := op{cmd: &Decide{Queue: f.Queue, ID: f.ID, Decision: d}}
	if !sh.cmds.tryPush(o) {
		go sh.cmds.push(context.Background(), sh.done, o)
	}
}

// ReadRecord returns the stored record of a delivered message (decode it
// with sched.DecodeMessageRecord). It is safe to call from any goroutine.
func (sh *Shard) ReadRecord(key []byte) ([]byte, error) {
	v, err := sh.st.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("stored record: %w", fault.ErrMessageNotFound)
	}
	return v, err
}

// ReadRecords reads the stored records of keys, as ReadRecord does each,
// with fewer reads when the storage can batch them (store.Disk.GetMany).
// It calls fn(i, rec) for each key i that has a record, in the order the
// storage reads them, which need not be the order of keys; a key without
// a record is skipped. rec is valid only during the call. It returns the
// storage's error, or the first error fn returns, which stops it.
func (sh *Shard) ReadRecords(keys [][]byte, fn func(i int, rec []byte) error) error {
	if mg, ok := sh.st.(manyGetter); ok {
		return mg.GetMany(keys, fn)
	}
	for i, k := range keys {
		v, err := sh.st.Get(k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(i, v); err != nil {
			return err
		}
	}
	return nil
}

// manyGetter is a Storage that reads many values in one call.
type manyGetter interface {
	GetMany(keys [][]byte, fn func(i int, value []byte) error) error
}

// NewID returns a new message ID: a UUIDv7, increasing across calls.
func NewID() ([16]byte, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return [16]byte{}, fmt.Errorf("new message ID: %w", err)
	}
	return u, nil
}

// batchPool recycles storage groups: under load the shard writes one of a
// few hundred KiB to several MiB per scheduler step, and reallocating it
// each time was a tenth of the broker's allocation volume.
var batchPool = sync.Pool{New: func() any { return new(store.Batch) }}

// maxPooledBatch bounds the buffers batchPool keeps, in bytes.
const maxPooledBatch = 8 << 20
