package node

import (
	"log/slog"
	"sync"
	"time"

	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// Hooks are the queues this node knows, by name, with their compiled Lua
// hooks (none for most). Connection goroutines read it for on_enqueue;
// CreateQueue, DeleteQueue and recovery change it. A queue is added with
// its hooks in one step, so a message admitted once its queue is known
// always runs the queue's hooks.
type Hooks struct {
	limits hook.Limits
	cfg    hook.ConfigReader
	log    *slog.Logger

	mu     sync.RWMutex
	queues map[string]*hook.Runner // nil for a queue without hooks
}

// NewHooks returns an empty registry whose hooks run with limits and read
// runtime config through cfg.
func NewHooks(limits hook.Limits, cfg hook.ConfigReader, log *slog.Logger) *Hooks {
	return &Hooks{limits: limits, cfg: cfg, log: log, queues: map[string]*hook.Runner{}}
}

// Compile checks that the scripts compile, without registering them. The
// error wraps fault.ErrScriptError with the line number.
func (h *Hooks) Compile(onEnqueue, onFailure string) (*hook.Program, error) {
	return hook.Compile(onEnqueue, onFailure)
}

// Add registers queue with its compiled hooks (p nil for none), replacing
// any registration of the name.
func (h *Hooks) Add(queue string, p *hook.Program) {
	var r *hook.Runner
	if p != nil {
		// The runner's lines name the queue themselves.
		r = hook.NewRunner(p, h.cfg, h.limits, h.log, time.Now)
	}
	h.mu.Lock()
	old := h.queues[queue]
	h.queues[queue] = r
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// Remove forgets queue and its hooks.
func (h *Hooks) Remove(queue string) {
	h.mu.Lock()
	old := h.queues[queue]
	delete(h.queues, queue)
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// Lookup returns queue's hooks (nil for none) and whether the queue is
// known.
func (h *Hooks) Lookup(queue string) (*hook.Runner, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	r, ok := h.queues[queue]
	return r, ok
}

// Each calls fn with the stats of every queue that has hooks, in no
// particular order. fn must not call back into h.
func (h *Hooks) Each(fn func(queue string, st hook.Stats)) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for q, r := range h.queues {
		if r != nil {
			fn(q, r.Stats())
		}
	}
}

// Runner returns queue's hooks, or nil.
func (h *Hooks) Runner(queue string) *hook.Runner {
	r, _ := h.Lookup(queue)
	return r
}

// RestoreHooks registers every queue spec and its dead-letter queue, at
// startup, compiling their hooks. A script that no longer compiles is
// logged and the queue runs without hooks.
func (h *Hooks) RestoreHooks(specs []sched.QueueSpec) {
	for _, q := range specs {
		var p *hook.Program
		if q.OnEnqueue != "" || q.OnFailure != "" {
			var err error
			if p, err = hook.Compile(q.OnEnqueue, q.OnFailure); err != nil {
				h.log.Error("queue hooks do not compile; running without them", "queue", q.Name, "err", err)
			}
		}
		h.Add(q.Name, p)
		h.Add(q.Name+sched.DLQSuffix, nil)
	}
}
