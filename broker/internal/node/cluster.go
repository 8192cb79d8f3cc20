package node

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/rtconf"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
)

// ClusterEffects returns what the meta group's entries do on this node:
// register and forget queues' hooks in hooks, apply key changes to keys
// and runtime config changes to rt (either may be nil), reload both from
// the store when a snapshot of the meta group replaced their records,
// and, when this node starts leading a queue, propose the throttle rates
// of rt into its group. Pass it in cluster.Config before the Node exists.
func ClusterEffects(hooks *Hooks, keys *auth.Store, rt *rtconf.Store) cluster.Effects {
	return cluster.Effects{
		QueueCreated: func(spec sched.QueueSpec) {
			var prog *hook.Program
			if spec.OnEnqueue != "" || spec.OnFailure != "" {
				p, err := hooks.Compile(spec.OnEnqueue, spec.OnFailure)
				if err != nil {
					hooks.log.Error("queue hooks do not compile on this node; the queue runs without them", "queue", spec.Name, "err", err)
				} else {
					prog = p
				}
			}
			hooks.Add(spec.Name, prog)
			hooks.Add(spec.Name+sched.DLQSuffix, nil)
		},
		QueueDeleted: func(name string) {
			hooks.Remove(name)
			hooks.Remove(name + sched.DLQSuffix)
		},
		Auth: func(data []byte) error {
			if keys == nil {
				return nil
			}
			c, err := auth.DecodeChange(data)
			if err != nil {
				return err
			}
			return keys.Apply(c)
		},
		Config: func(data []byte) error {
			if rt == nil {
				return nil
			}
			c, err := rtconf.DecodeChange(data)
			if err != nil {
				return err
			}
			_, err = rt.Apply(c)
			return err
		},
		StatePrefixes: []string{auth.KeyPrefix, rtconf.KeyPrefix},
		Reload: func() error {
			if keys != nil {
				if err := keys.Reload(); err != nil {
					return err
				}
			}
			if rt != nil {
				return rt.Reload()
			}
			return nil
		},
		Leading: func(_ string, sh *shard.Shard) {
			if rt == nil {
				return
			}
			for _, e := range rt.List(rtconf.ThrottlePrefix) {
				rate, burst, err := sched.ParseThrottle(e.Value)
				if err != nil {
					continue
				}
				sh.Submit(context.Background(), &shard.SetThrottle{Key: e.Key[len(rtconf.ThrottlePrefix):], Rate: rate, Burst: burst}, nil)
			}
		},
	}
}

// byQueue splits items by queue (keeping their order within each queue),
// submits each part with submit, and answers done once every part has:
// with the parts' results merged in the items' order, or with the error
// of the whole operation when every part failed as a whole. item(r, j)
// returns the result of the j-th item of a part from the part's result
// (an error result when the part failed); merge joins per-item results.
func byQueue[T any](items []T, queue func(T) string,
	submit func(queue string, part []T, done func(Result)) error,
	item func(r Result, j int) Result, merge func([]Result) Result, done func(Result)) error {
	var order []string
	parts := map[string][]int{}
	for i, it := range items {
		q := queue(it)
		if _, ok := parts[q]; !ok {
			order = append(order, q)
		}
		parts[q] = append(parts[q], i)
	}
	if len(order) == 1 {
		return submit(order[0], items, done)
	}
	per := make([]Result, len(items))
	var mu sync.Mutex
	left := len(order)
	failed := 0
	var first error
	finish := func(q string, r Result) {
		mu.Lock()
		for j, i := range parts[q] {
			per[i] = item(r, j)
		}
		if r.Err != nil {
			failed++
			if first == nil {
				first = r.Err
			}
		}
		left--
		last := left == 0
		mu.Unlock()
		if !last {
			return
		}
		if failed == len(order) {
			done(Result{Err: first})
			return
		}
		done(merge(per))
	}
	for _, q := range order {
		idx := parts[q]
		part := make([]T, len(idx))
		for j, i := range idx {
			part[j] = items[i]
		}
		if err := submit(q, part, func(r Result) { finish(q, r) }); err != nil {
			finish(q, Result{Err: err})
		}
	}
	return nil
}

// barrierAll runs fn once every shard has run what was submitted before.
func barrierAll(ctx context.Context, shards []*shard.Shard, fn func()) error {
	if len(shards) == 0 {
		fn()
		return nil
	}
	var mu sync.Mutex
	left := len(shards)
	one := func() {
		mu.Lock()
		left--
		last := left == 0
		mu.Unlock()
		if last {
			fn()
		}
	}
	for _, sh := range shards {
		if err := sh.Barrier(ctx, one); err != nil {
			one()
		}
	}
	return nil
}

// listAll lists the queues of every shard, sorted by name.
func listAll(ctx context.Context, shards []*shard.Shard, done func(Result)) error {
	if len(shards) == 0 {
		done(Result{})
		return nil
	}
	var mu sync.Mutex
	left := len(shards)
	var out []QueueSummary
	var first error
	for _, sh := range shards {
		err := sh.ListQueues(ctx, func(r Result) {
			mu.Lock()
			out = append(out, r.Queues...)
			if r.Err != nil && first == nil {
				first = r.Err
			}
			left--
			last := left == 0
			mu.Unlock()
			if last {
				sortSummaries(out)
				done(Result{Queues: out, Err: first})
			}
		})
		if err != nil {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				sortSummaries(out)
				done(Result{Queues: out})
			}
		}
	}
	return nil
}

// mergeShards replaces the summaries of a sharded queue's shards, and of
// their DLQs, by one of the queue and one of its DLQ, summing their
// counts; shards(base) is the queue's number of shards (0 when base is
// not a sharded queue: a stale shard). qs is sorted by name, and so is
// the result.
func mergeShards(qs []QueueSummary, shards func(base string) int) []QueueSummary {
	out := qs[:0:0]
	at := map[string]int{}
	for _, q := range qs {
		name, dlq := strings.CutSuffix(q.Name, sched.DLQSuffix)
		base, _, ok := sched.CutShard(name)
		cnt := 0
		if ok {
			cnt = shards(base)
		}
		if cnt == 0 {
			out = append(out, q)
			continue
		}
		merged := base
		if dlq {
			merged += sched.DLQSuffix
		}
		i, seen := at[merged]
		if !seen {
			i = len(out)
			at[merged] = i
			s := QueueSummary{Name: merged, Shards: uint32(cnt)}
			if dlq {
				s.Parent = base
			} else {
				s.DeadLetterQueue = base + sched.DLQSuffix
			}
			out = append(out, s)
		}
		out[i].Ready += q.Ready
		out[i].Delayed += q.Delayed
		out[i].Leased += q.Leased
	}
	sortSummaries(out)
	return out
}

func sortSummaries(qs []QueueSummary) {
	slices.SortFunc(qs, func(a, b QueueSummary) int { return strings.Compare(a.Name, b.Name) })
}
