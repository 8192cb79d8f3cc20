package fila

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// shardedStats joins the stats of every shard of the sharded queue name
// (or of their DLQs): see QueueStats.Shards.
func (a *Administrator) shardedStats(ctx context.Context, name string, top uint32) (*QueueStats, error) {
	shards, err := a.Topology(ctx, name)
	if err != nil {
		return nil, err
	}
	var st *QueueStats
	for _, s := range shards {
		resp, err := a.c.request(ctx, &wire.QueueStats{Name: s.Queue, TopKeys: top}, s.Queue)
		if err != nil {
			return nil, err
		}
		one := statsOf(resp.(*wire.QueueStatsResult))
		if st == nil {
			st = one
			st.Name = name
			continue
		}
		st.Ready += one.Ready
		st.Delayed += one.Delayed
		st.Leased += one.Leased
		st.DeadLettered += one.DeadLettered
		st.Bytes += one.Bytes
		st.MessagesExpired += one.MessagesExpired
		st.Subscriptions += one.Subscriptions
		st.BackloggedKeys += one.BackloggedKeys
		st.WindowDelivered += one.WindowDelivered
		st.Window = max(st.Window, one.Window)
		st.FairnessKeys = append(st.FairnessKeys, one.FairnessKeys...)
		st.ThrottleKeys = append(st.ThrottleKeys, one.ThrottleKeys...)
		st.OnEnqueueCalls += one.OnEnqueueCalls
		st.OnEnqueueErr += one.OnEnqueueErr
		st.OnFailureCalls += one.OnFailureCalls
		st.OnFailureErr += one.OnFailureErr
		st.CircuitOpen = st.CircuitOpen || one.CircuitOpen
		st.CircuitTrips += one.CircuitTrips
	}
	st.Shards = len(shards)
	// Each shard's shares are of its own deliveries and weights: restate
	// them over the queue's.
	var weights float64
	for _, k := range st.FairnessKeys {
		weights += float64(max(k.Weight, 1))
	}
	for i := range st.FairnessKeys {
		k := &st.FairnessKeys[i]
		k.EntitledShare = float64(max(k.Weight, 1)) / weights
		k.WindowShare = 0
		if st.WindowDelivered > 0 {
			k.WindowShare = float64(k.WindowDelivered) / float64(st.WindowDelivered)
		}
	}
	st.JainIndex = jain(st.FairnessKeys)
	slices.SortStableFunc(st.FairnessKeys, func(a, b FairnessKeyStats) int {
		return cmp.Or(cmp.Compare(b.Pending, a.Pending), strings.Compare(a.Key, b.Key))
	})
	if n := int(cmp.Or(top, MaxTopKeys)); len(st.FairnessKeys) > n {
		st.FairnessKeys = st.FairnessKeys[:n]
	}
	return st, nil
}

// jain is Jain's fairness index (Jain, Chiu & Hawe, DEC-TR-301, 1984),
// (Σx)² / (n·Σx²), over the keys delivered to in the window, x being a
// key's window share over its entitled share; 0 when none was.
func jain(keys []FairnessKeyStats) float64 {
	var sum, sq float64
	n := 0
	for _, k := range keys {
		if k.WindowDelivered == 0 || k.EntitledShare == 0 {
			continue
		}
		x := k.WindowShare / k.EntitledShare
		sum += x
		sq += x * x
		n++
	}
	if n == 0 || sq == 0 {
		return 0
	}
	return sum * sum / (float64(n) * sq)
}
