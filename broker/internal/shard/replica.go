package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// Replication makes a shard one replica of a queue's Raft group. The
// shard then applies nothing it is given directly: on the leader, the
// loop turns each batch of operations into one entry (a Tick with the
// leader's clock, the commands with their IDs filled in, a Deliver) and
// proposes it; every replica, the leader included, applies the entries
// once they are committed (Commit), in log order, so every replica's
// scheduler goes through the same states. Results and deliveries are
// released on the leader only, after the entry has committed and its
// effects are durable in the local store.
type Replication struct {
	// Queue is the queue the group holds, with its DLQ: the shard
	// restores only its key ranges (sched.QueueRanges).
	Queue string
	// NodeID is this node's Raft ID; entries carry their proposer's, so
	// that only the proposer answers their results.
	NodeID uint64
	// Propose hands an entry to the group's Raft node. It must not
	// block. dropped, if the entry never reaches the leader's log, is
	// called once, from any goroutine.
	Propose func(data []byte, dropped func())
	// AppliedKey is the store key under which the shard records, in the
	// same storage group as their effects, the index of the last entry
	// it applied (8 bytes big-endian); Applied reads it back.
	AppliedKey []byte
	// ImageKey is the store key of the replica's last image (see
	// snapshot.go). A replica opened again starts from it, or empty when
	// there is none, and replays its group's log from the entry after it.
	ImageKey []byte
	// ImageEvery is how many bytes of entries the replica applies between
	// two images (at least twice the last image's size, too); 0 means
	// 64 MiB, < 0 never.
	ImageEvery int64
	// Imaged, if set, is called once an image at index is visible in the
	// store, from the goroutine that completes storage groups: the group's
	// log is not needed up to index any more. It must not block.
	Imaged func(index uint64)
	// NotLeader returns the error for an operation this replica cannot
	// serve because it does not lead: a *fault.NotLeader with the
	// leader's client address when known.
	NotLeader func() error
	// Leading, if set, is called on the loop goroutine when this replica
	// becomes the leader, after its first entry of the term is proposed;
	// the caller may Submit commands (throttle rates) from it, from
	// another goroutine.
	Leading func()
}

// An Entry is one committed entry of the group's log: its index and its
// data, as Propose was given it (empty for the entries Raft adds itself);
// or, with Snapshot set, a snapshot of the group at Index, whose data it
// reads (Install).
type Entry struct {
	Index    uint64
	Data     []byte
	Snapshot io.ReadCloser
}

// entryVersion is the first byte of a proposed entry:
//
//	version 1 | proposer uvarint | seq uvarint | count uvarint | count × (len uvarint, command)
//
// Each command is AppendCommand's encoding.
const entryVersion = 1

// appendEntry encodes a proposal.
func appendEntry(b []byte, proposer, seq uint64, cmds []Command) []byte {
	var e entryEncoder
	return e.append(b, proposer, seq, cmds)
}

// An entryEncoder encodes proposals with one allocation each: it encodes
// the commands into a scratch buffer it keeps, then copies them into an
// entry of the exact size (a batch's entry is as large as its payloads,
// which growing it by appending would copy several times over).
type entryEncoder struct {
	scratch []byte
	ends    []int
}

// maxKeptScratch bounds the scratch buffer an entryEncoder keeps between
// proposals.
const maxKeptScratch = 4 << 20

func (e *entryEncoder) append(b []byte, proposer, seq uint64, cmds []Command) []byte {
	e.scratch, e.ends = e.scratch[:0], e.ends[:0]
	for _, c := range cmds {
		e.scratch = AppendCommand(e.scratch, c)
		e.ends = append(e.ends, len(e.scratch))
	}
	n := 1 + uvarintLen(proposer) + uvarintLen(seq) + uvarintLen(uint64(len(cmds))) + len(e.scratch)
	start := 0
	for _, end := range e.ends {
		n += uvarintLen(uint64(end - start))
		start = end
	}
	b = slices.Grow(b, n)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, proposer)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(len(cmds)))
	start = 0
	for _, end := range e.ends {
		b = binary.AppendUvarint(b, uint64(end-start))
		b = append(b, e.scratch[start:end]...)
		start = end
	}
	if cap(e.scratch) > maxKeptScratch {
		e.scratch = nil
	}
	return b
}

// uvarintLen is the length of x's uvarint encoding.
func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

// DecodeEntry decodes an entry's data: its proposer, the proposer's
// sequence number, and its commands. It fails with an error wrapping
// ErrBadCommand.
func DecodeEntry(b []byte) (proposer, seq uint64, cmds []Command, err error) {
	if len(b) == 0 || b[0] != entryVersion {
		return 0, 0, nil, fmt.Errorf("%w: entry version", ErrBadCommand)
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok1, ok2, ok3 bool
	var count uint64
	proposer, ok1 = next()
	seq, ok2 = next()
	count, ok3 = next()
	if !ok1 || !ok2 || !ok3 || count > uint64(len(b)) {
		return 0, 0, nil, fmt.Errorf("%w: entry header", ErrBadCommand)
	}
	cmds = make([]Command, 0, count)
	for i := uint64(0); i < count; i++ {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return 0, 0, nil, fmt.Errorf("%w: entry command %d length", ErrBadCommand, i)
		}
		c, err := DecodeCommand(b[:n])
		if err != nil {
			return 0, 0, nil, err
		}
		cmds = append(cmds, c)
		b = b[n:]
	}
	if len(b) != 0 {
		return 0, 0, nil, fmt.Errorf("%w: %d trailing bytes after the entry", ErrBadCommand, len(b))
	}
	return proposer, seq, cmds, nil
}

// replicaState is the loop goroutine's state of a replicated shard.
type replicaState struct {
	cfg     *Replication
	leading bool
	seq     uint64         // last proposal's sequence number
	batch   []Command      // commands taken this iteration, to propose
	cbs     []func(Result) // their callbacks, aligned with batch
	pending map[uint64][]func(Result)
	enc     entryEncoder // encodes the proposals
	applied uint64       // index of the last entry applied
	// sinceImage counts the bytes of entries applied since the last
	// image, of imageSize bytes.
	sinceImage int64
	imageSize  int
	// leadBase is the scheduler time this replica's clock continues from
	// while it leads, at leadAt (see Shard.now).
	leadBase sched.Time
	leadAt   time.Time
}

// Commit applies committed entries, in order, on the shard goroutine. It
// never blocks: the driver of the group's Raft node calls it.
func (sh *Shard) Commit(entries []Entry) {
	sh.commitMu.Lock()
	sh.committed = append(sh.committed, entries...)
	sh.commitMu.Unlock()
	select {
	case sh.commitc <- struct{}{}:
	default:
	}
}

// SetLeader tells the shard whether this replica now leads its group. It
// never blocks.
func (sh *Shard) SetLeader(leading bool) {
	sh.commitMu.Lock()
	sh.leaderChanges = append(sh.leaderChanges, leading)
	sh.commitMu.Unlock()
	select {
	case sh.commitc <- struct{}{}:
	default:
	}
}

// Applied returns the index of the last entry whose effects are durable
// in the store, as recorded under Replication.AppliedKey; 0 for none.
func Applied(st Storage, key []byte) (uint64, error) {
	v, err := st.Get(key)
	if err != nil {
		if isNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("applied index of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Init applies c to a fresh replica's state, outside the log: the state
// every replica of a new group starts from (the queue's CreateQueue, from
// the meta group's entry that placed it). It is durable when done
// receives its Result.
func (sh *Shard) Init(c Command, done func(Result)) error {
	return sh.do(context.Background(), op{fn: func() {
		apply(sh.s, sh.ref(done), c)
		sh.flush(sh.timer)
	}})
}

// takeReplicated handles one op of a replicated shard's loop: commands are
// batched for proposal (leader) or refused (follower); reads and barriers
// run as on a single node.
func (sh *Shard) takeReplicated(o op) {
	r := sh.rep
	if o.cmd == nil {
		sh.run1(o)
		return
	}
	if !r.leading {
		if o.done != nil {
			o.done(Result{Err: r.cfg.NotLeader()})
		}
		return
	}
	done, ok := sh.prepare(o)
	if !ok {
		return
	}
	r.batch = append(r.batch, o.cmd)
	r.cbs = append(r.cbs, done)
}

// proposeBatch proposes the commands taken this iteration as one entry,
// between a Tick and a Deliver.
func (sh *Shard) proposeBatch(extra ...Command) {
	r := sh.rep
	if !r.leading {
		return
	}
	cmds := make([]Command, 0, len(r.batch)+len(extra)+2)
	cbs := make([]func(Result), 0, cap(cmds))
	cmds = append(cmds, &Tick{Now: sh.now()})
	cbs = append(cbs, nil)
	for _, c := range extra {
		cmds = append(cmds, c)
		cbs = append(cbs, nil)
	}
	cmds = append(cmds, r.batch...)
	cbs = append(cbs, r.cbs...)
	cmds = append(cmds, &Deliver{})
	cbs = append(cbs, nil)
	r.batch, r.cbs = r.batch[:0], r.cbs[:0]
	r.seq++
	seq := r.seq
	r.pending[seq] = cbs
	data := r.enc.append(nil, r.cfg.NodeID, seq, cmds)
	r.cfg.Propose(data, func() {
		// Not appended to the leader's log: fail its callbacks.
		sh.post(func() {
			sh.failPending(seq)
			// Nothing else may come to propose what was due: try again
			// shortly (see armTimer).
			sh.armTimer(dropRetry)
		})
	})
}

// post runs fn on the loop goroutine without blocking the caller.
func (sh *Shard) post(fn func()) {
	o := op{fn: fn}
	if !sh.cmds.tryPush(o) {
		go sh.cmds.push(context.Background(), sh.done, o)
	}
}

// failPending fails the callbacks of proposal seq, if it is still waiting.
func (sh *Shard) failPending(seq uint64) {
	cbs, ok := sh.rep.pending[seq]
	if !ok {
		return
	}
	delete(sh.rep.pending, seq)
	err := sh.rep.cfg.NotLeader()
	for _, cb := range cbs {
		if cb != nil {
			cb(Result{Err: err})
		}
	}
}

// drainCommitted applies the committed entries and leadership changes
// queued by the driver.
func (sh *Shard) drainCommitted() {
	sh.commitMu.Lock()
	ents, lead := sh.committed, sh.leaderChanges
	sh.committed, sh.leaderChanges = nil, nil
	sh.commitMu.Unlock()
	for _, e := range ents {
		sh.applyEntry(e)
	}
	for _, l := range lead {
		sh.setLeading(l)
	}
}

// dropCommitted closes the data of the snapshots still queued when the
// shard stops: they are installed from the log at the next start.
func (sh *Shard) dropCommitted() {
	sh.commitMu.Lock()
	ents := sh.committed
	sh.committed = nil
	sh.commitMu.Unlock()
	for _, e := range ents {
		if e.Snapshot != nil {
			e.Snapshot.Close()
		}
	}
}

// applyEntry applies one committed entry. Only the proposer answers its
// results; every replica applies its effects and records its index.
func (sh *Shard) applyEntry(e Entry) {
	r := sh.rep
	if e.Snapshot != nil {
		sh.install(e)
		return
	}
	if e.Index <= r.applied {
		return // applied before a restart
	}
	r.applied = e.Index
	if len(e.Data) == 0 {
		return // an empty entry of a new term, or a configuration change
	}
	defer sh.maybeImage(e.Index)
	r.sinceImage += int64(len(e.Data))
	proposer, seq, cmds, err := DecodeEntry(e.Data)
	if err != nil {
		// A committed entry every replica has: a bug, not bad input.
		err = fmt.Errorf("entry %d of queue %s: %w", e.Index, r.cfg.Queue, err)
		sh.storageFailed(err)
		sh.log.Error("cannot apply a committed entry; the replica stops", "err", err)
		return
	}
	var cbs []func(Result)
	if proposer == r.cfg.NodeID {
		cbs = r.pending[seq]
		delete(r.pending, seq)
	}
	for i, c := range cmds {
		var cb func(Result)
		if i < len(cbs) {
			cb = cbs[i]
		}
		apply(sh.s, sh.ref(cb), c)
		if _, ok := c.(*Deliver); ok {
			sh.flush(sh.timer)
		}
	}
}

// dropRetry is how soon a leader proposes again after Raft dropped a
// proposal (a leadership transfer is under way, or it is stepping down).
const dropRetry = 50 * time.Millisecond

// armTimer arms a leader's timer for the scheduler's next deadline, or in
// at least wait. A flush arms it when a Ready's deadline changes; this
// covers what no Ready shows: leading from state applied as a follower,
// and a proposal for a deadline that Raft dropped. Loop goroutine.
func (sh *Shard) armTimer(wait time.Duration) {
	if !sh.rep.leading {
		return
	}
	d := sh.s.Deadline()
	if d == 0 {
		return
	}
	sh.timer.Reset(max(time.Duration(int64(d)-int64(sh.now())), wait))
}

// setLeading handles a change of leadership.
func (sh *Shard) setLeading(leading bool) {
	r := sh.rep
	if leading == r.leading {
		return
	}
	r.leading = leading
	if !leading {
		// The subscriptions served here end; their consumers resubscribe
		// on the new leader, which keeps their leases. Proposals not yet
		// applied fail; they may still commit (the new leader may hold
		// them), which is why clients resend with their idempotency
		// tokens.
		err := r.cfg.NotLeader()
		for sub, sink := range sh.sinks {
			sink.Ended(sub, err)
			delete(sh.sinks, sub)
		}
		for seq := range r.pending {
			sh.failPending(seq)
		}
		for _, cb := range r.cbs {
			if cb != nil {
				cb(Result{Err: err})
			}
		}
		r.batch, r.cbs = r.batch[:0], r.cbs[:0]
		return
	}
	// This replica's time goes on from the group's, whatever its own
	// wall clock says (see now).
	r.leadBase, r.leadAt = sh.s.Now(), sh.cfg.Clock()
	// A new term: lease tokens start above every earlier one, and the
	// subscriptions of the old leader end (their leases stay held until
	// they are settled or expire).
	extra := []Command{&LeaseEpoch{Base: uint64(sh.now())}}
	for _, sub := range sh.s.Subs() {
		extra = append(extra, &Unsubscribe{Sub: sub})
	}
	sh.proposeBatch(extra...)
	// As a follower this replica's timer was not armed for the Readies
	// it handled, and a Ready brings a deadline only when it changes.
	sh.armTimer(0)
	// The old leader may have died before the on_failure hooks of some
	// failed messages answered: run them here.
	sh.s.Redecide()
	if r.cfg.Leading != nil {
		go r.cfg.Leading()
	}
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// QueueDigest returns a digest of queue's state (sched.QueueDigest) and
// the index of the last entry applied, read on the shard goroutine: two
// replicas that applied the same entries have the same digest.
func (sh *Shard) QueueDigest(queue string) (digest [32]byte, applied uint64, err error) {
	done := make(chan struct{})
	if err := sh.do(context.Background(), op{fn: func() {
		digest = sh.s.QueueDigest(queue)
		if sh.rep != nil {
			applied = sh.rep.applied
		}
		close(done)
	}}); err != nil {
		return digest, 0, err
	}
	<-done
	return digest, applied, nil
}
