package hook

import (
	"context"
	"sync/atomic"
)

// A pool holds a runner's interpreter states: at most size of them exist
// at once, made on first need and reused, so a queue's hooks cost one
// state per concurrent caller at most and compile nothing per message.
// When all are busy, get waits for one (or for its context).
type pool struct {
	cfg   ConfigReader
	idle  chan *state   // states ready for a call
	slots chan struct{} // one token per existing state

	closed atomic.Bool
}

func newPool(size int, cfg ConfigReader) *pool {
	return &pool{
		cfg:   cfg,
		idle:  make(chan *state, size),
		slots: make(chan struct{}, size),
	}
}

// get returns a state for one call, made if there are fewer than size.
func (p *pool) get(ctx context.Context) (*state, error) {
	select {
	case st := <-p.idle:
		return st, nil
	default:
	}
	select {
	case st := <-p.idle:
		return st, nil
	case p.slots <- struct{}{}:
		st, err := newState(p.cfg)
		if err != nil {
			<-p.slots
			return nil, err
		}
		return st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put returns a state after a call; a broken state, or any state once the
// pool is closed, is closed instead, and its slot freed.
func (p *pool) put(st *state) {
	if st.broken || p.closed.Load() {
		st.close()
		<-p.slots
		return
	}
	p.idle <- st // never blocks: there are at most size states
	// A close that ran since the check above may have drained the idle
	// states before this one arrived.
	if p.closed.Load() {
		p.drain()
	}
}

// close closes the idle states now, and the busy ones as they come back.
func (p *pool) close() {
	p.closed.Store(true)
	p.drain()
}

func (p *pool) drain() {
	for {
		select {
		case st := <-p.idle:
			st.close()
			<-p.slots
		default:
			return
		}
	}
}
