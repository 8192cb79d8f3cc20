package store

import (
	"errors"
	"sync"

	"github.com/tidwall/btree"
)

// Mem is an in-memory store with the semantics of Disk minus durability:
// groups are applied atomically, in submission order, by a goroutine of
// its own, become visible when Apply returns or done is called, and Scan
// sees one moment. It is for tests of the packages that use a store and
// for differential tests against Disk. Safe for concurrent use; Close
// stops its goroutine.
type Mem struct {
	mu     sync.RWMutex
	index  *btree.BTreeG[memEntry]
	closed bool
	groups uint64
	muts   uint64

	qmu     sync.Mutex
	qcond   sync.Cond
	queue   []request
	closing bool
	done    chan struct{}
	once    sync.Once
}

type memEntry struct {
	key   string
	value []byte
}

func memLess(a, b memEntry) bool { return a.key < b.key }

// NewMem returns an empty Mem.
func NewMem() *Mem {
	m := &Mem{
		index: btree.NewBTreeGOptions(memLess, btree.Options{NoLocks: true}),
		done:  make(chan struct{}),
	}
	m.qcond.L = &m.qmu
	go m.run()
	return m
}

// Apply applies b and returns once it is visible; see Disk.Apply.
func (m *Mem) Apply(b *Batch) error {
	w := waiterPool.Get().(chan error)
	if err := m.submit(request{b: b, wait: w}); err != nil {
		waiterPool.Put(w)
		return err
	}
	err := <-w
	waiterPool.Put(w)
	return err
}

// ApplyAsync submits b and returns at once; see Disk.ApplyAsync.
func (m *Mem) ApplyAsync(b *Batch, done func(error)) {
	if err := m.submit(request{b: b, done: done}); err != nil && done != nil {
		done(err)
	}
}

func (m *Mem) submit(r request) error {
	if r.b == nil {
		r.b = &emptyBatch
	}
	m.qmu.Lock()
	defer m.qmu.Unlock()
	if m.closing {
		return ErrClosed
	}
	m.queue = append(m.queue, r)
	if len(m.queue) == 1 {
		m.qcond.Signal()
	}
	return nil
}

func (m *Mem) run() {
	defer close(m.done)
	for {
		m.qmu.Lock()
		for len(m.queue) == 0 && !m.closing {
			m.qcond.Wait()
		}
		reqs := m.queue
		m.queue = nil
		m.qmu.Unlock()
		if len(reqs) == 0 {
			return
		}
		for i := range reqs {
			r := &reqs[i]
			err := r.b.check()
			if err == nil {
				m.apply(r.b)
			}
			if r.done != nil {
				r.done(err)
			} else {
				r.wait <- err
			}
		}
	}
}

func (m *Mem) apply(b *Batch) {
	if b.n == 0 {
		return
	}
	muts := b.mutations()
	m.mu.Lock()
	defer m.mu.Unlock()
	for pos := 0; pos < len(muts); {
		mu, next, _ := nextMutation(muts, pos)
		pos = next
		switch mu.kind {
		case kindDelete:
			m.index.Delete(memEntry{key: unsafeString(mu.key)})
		case kindDeleteRange:
			m.index.DeleteRange(memEntry{key: unsafeString(mu.key)}, memEntry{key: unsafeString(mu.end)}, &btree.DeleteRangeOptions{NoReturn: true})
		default:
			m.index.Set(memEntry{key: string(mu.key), value: append([]byte(nil), mu.value...)})
		}
	}
	m.groups++
	m.muts += uint64(b.n)
}

// Get returns a copy of the value of key; see Disk.Get.
func (m *Mem) Get(key []byte) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	e, ok := m.index.Get(memEntry{key: unsafeString(key)})
	if !ok {
		return nil, ErrNotFound
	}
	return append(make([]byte, 0, len(e.value)), e.value...), nil
}

// GetMany calls fn(i, value) for each key i of keys that is present, in
// the order of keys; see Disk.GetMany.
func (m *Mem) GetMany(keys [][]byte, fn func(i int, value []byte) error) error {
	for i, k := range keys {
		v, err := m.Get(k)
		if errors.Is(err, ErrNotFound) {
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

// Scan calls fn for each key in [start, end) with its value; see Disk.Scan.
func (m *Mem) Scan(start, end []byte, fn func(key, value []byte) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	snap := m.index.Copy()
	m.mu.Unlock()
	var err error
	endKey := unsafeString(end)
	snap.Ascend(memEntry{key: unsafeString(start)}, func(e memEntry) bool {
		if end != nil && e.key >= endKey {
			return false
		}
		err = fn(unsafeBytes(e.key), e.value)
		return err == nil
	})
	return err
}

// ScanKeys calls fn for each key in [start, end); see Disk.ScanKeys.
func (m *Mem) ScanKeys(start, end []byte, fn func(key []byte) error) error {
	return m.Scan(start, end, func(key, _ []byte) error { return fn(key) })
}

// Stats returns Keys, Groups and Mutations; the log fields are zero.
func (m *Mem) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{Keys: m.index.Len(), Groups: m.groups, Mutations: m.muts}
}

// Health returns the zero Health: Mem is never full and never fails.
func (m *Mem) Health() Health { return Health{} }

// Compact does nothing and returns nil: Mem has no log to reclaim. It
// exists so that Mem has every method of Disk.
func (m *Mem) Compact() error { return nil }

// Close waits for submitted groups and stops the goroutine. Later calls
// to any method return ErrClosed; Close itself returns nil.
func (m *Mem) Close() error {
	m.once.Do(func() {
		m.qmu.Lock()
		m.closing = true
		m.qcond.Broadcast()
		m.qmu.Unlock()
		<-m.done
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
	})
	return nil
}
