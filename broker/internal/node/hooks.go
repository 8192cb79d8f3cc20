package node

import (
	"log/slog"
	"sync"
	"time"

	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// Hooks are the queues' compiled Lua hooks, by queue name. Connection
// goroutines read it for on_enqueue; CreateQueue, DeleteQueue and recovery
// change it.
type Hooks struct {
	limits hook.Limits
	cfg    hook.ConfigReader
	log    *slog.Logger

	mu      sync.RWMutex
	runners map[string]*hook.Runner
}

// NewHooks returns an empty registry whose hooks run with limits and read
// runtime config through cfg.
func NewHooks(limits hook.Limits, cfg hook.ConfigReader, log *slog.Logger) *Hooks {
	return &Hooks{limits: limits, cfg: cfg, log: log, runners: map[string]*hook.Runner{}}
}

// Compile checks that the scripts compile, without registering them. The
// error wraps fault.ErrScriptError with the line number.
func (h *Hooks) Compile(onEnqueue, onFailure string) (*hook.Program, error) {
	return hook.Compile(onEnqueue, onFailure)
}

// Set registers the compiled hooks of queue, replacing any.
func (h *Hooks) Set(queue string, p *hook.Program) {
	if h == nil {
		return
	}
	r := hook.NewRunner(p, h.cfg, h.limits, h.log.With("queue", queue), time.Now)
	h.mu.Lock()
	old := h.runners[queue]
	h.runners[queue] = r
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// Remove drops queue's hooks.
func (h *Hooks) Remove(queue string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	old := h.runners[queue]
	delete(h.runners, queue)
	h.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// Runner returns queue's hooks, or nil.
func (h *Hooks) Runner(queue string) *hook.Runner {
	if h == nil {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.runners[queue]
}

// RestoreHooks compiles and registers the hooks of every queue spec, at
// startup. A script that no longer compiles is logged and skipped.
func (h *Hooks) RestoreHooks(specs []sched.QueueSpec) {
	for _, q := range specs {
		if q.OnEnqueue == "" && q.OnFailure == "" {
			continue
		}
		p, err := hook.Compile(q.OnEnqueue, q.OnFailure)
		if err != nil {
			h.log.Error("queue hooks do not compile; running without them", "queue", q.Name, "err", err)
			continue
		}
		h.Set(q.Name, p)
	}
}
