package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/fila-mq/fila/broker/internal/shard"
)

// QueueLoad is what a queue weighs in a rebalance, as one of its
// replicas reports it: the payload bytes of its messages and its DLQ's
// (sched.QueueStats.Bytes), and its deliveries over the stats window of
// the last 30 to 60 s (WindowDelivered).
type QueueLoad struct {
	Bytes     uint64
	Delivered uint64
}

// queueLoads reads the load of every queue this node holds a replica
// of, waiting at most a second for its shards (a queue whose shard does
// not answer in time is left out: it weighs as the mean queue).
func (n *Node) queueLoads(ctx context.Context) map[string]QueueLoad {
	n.mu.RLock()
	var names []string
	var shards []*shard.Shard
	for _, g := range n.groups {
		if g.sh != nil {
			names, shards = append(names, g.queue), append(shards, g.sh)
		}
	}
	n.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	loads := make(map[string]QueueLoad, len(names))
	for i, sh := range shards {
		wg.Add(1)
		err := sh.QueueStats(ctx, names[i], 1, func(r shard.Result) {
			defer wg.Done()
			if r.Err != nil {
				return
			}
			mu.Lock()
			loads[names[i]] = QueueLoad{Bytes: r.Stats.Bytes, Delivered: r.Stats.WindowDelivered}
			mu.Unlock()
		})
		if err != nil {
			wg.Done()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(loads)
}

// appendLoads encodes loads (the body of metaRebalance): count uvarint,
// then by name: name length uvarint, name, bytes uvarint, deliveries
// uvarint.
func appendLoads(b []byte, loads map[string]QueueLoad) []byte {
	b = binary.AppendUvarint(b, uint64(len(loads)))
	for _, name := range slices.Sorted(mapKeys(loads)) {
		l := loads[name]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, l.Bytes)
		b = binary.AppendUvarint(b, l.Delivered)
	}
	return b
}

// decodeLoads decodes appendLoads' encoding; an empty body (a rebalance
// proposed before loads were carried) is no loads.
func decodeLoads(b []byte) (map[string]QueueLoad, error) {
	if len(b) == 0 {
		return nil, nil
	}
	next := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	cnt, ok := next()
	if !ok || cnt > uint64(len(b)) {
		return nil, errors.New("loads: bad count")
	}
	loads := make(map[string]QueueLoad, cnt)
	for range cnt {
		l, ok := next()
		if !ok || l > uint64(len(b)) {
			return nil, errors.New("loads: bad name")
		}
		name := string(b[:l])
		b = b[l:]
		var ld QueueLoad
		var ok1, ok2 bool
		ld.Bytes, ok1 = next()
		ld.Delivered, ok2 = next()
		if !ok1 || !ok2 {
			return nil, errors.New("loads: truncated")
		}
		loads[name] = ld
	}
	if len(b) != 0 {
		return nil, errors.New("loads: trailing bytes")
	}
	return loads, nil
}

// weightUnit is the weight of the mean queue's bytes, or deliveries, and
// of every queue's base.
const weightUnit = 1000

// maxWeightTerm bounds a queue's bytes or deliveries term, so that
// weights summed over many queues cannot overflow.
const maxWeightTerm = 1 << 32

// queueWeights returns each queue's weight in a rebalance: weightUnit,
// plus weightUnit × its bytes over the mean of the queues' bytes, plus
// weightUnit × its deliveries over their mean (each term 0 when its mean
// is 0, and at most maxWeightTerm). The means are over the queues loads
// has; a queue it lacks gets the mean terms. With no loads, or equal
// ones, every queue weighs the same. Integer arithmetic only: every node
// must compute the same weights.
func queueWeights(names []string, loads map[string]QueueLoad) map[string]uint64 {
	var sumB, sumD, hiB, hiD uint64
	known := uint64(0)
	for _, name := range names {
		l, ok := loads[name]
		if !ok {
			continue
		}
		known++
		var c uint64
		sumB, c = bits.Add64(sumB, l.Bytes, 0)
		hiB += c
		sumD, c = bits.Add64(sumD, l.Delivered, 0)
		hiD += c
	}
	// term is weightUnit × v / (sum / known) = weightUnit × v × known / sum,
	// with sum as the 128-bit (hi, lo).
	term := func(v, hi, lo uint64) uint64 {
		if hi == 0 && lo == 0 {
			return 0
		}
		// Scale the sum down until it fits 64 bits, and v with it.
		for hi != 0 {
			lo = lo>>1 | hi<<63
			hi >>= 1
			v >>= 1
		}
		if lo == 0 {
			return maxWeightTerm
		}
		ph, pl := bits.Mul64(v, weightUnit*known)
		if ph >= lo {
			return maxWeightTerm
		}
		q, _ := bits.Div64(ph, pl, lo)
		return min(q, maxWeightTerm)
	}
	termB, termD := uint64(0), uint64(0)
	if hiB != 0 || sumB != 0 {
		termB = weightUnit
	}
	if hiD != 0 || sumD != 0 {
		termD = weightUnit
	}
	w := make(map[string]uint64, len(names))
	for _, name := range names {
		l, ok := loads[name]
		if !ok {
			w[name] = weightUnit + termB + termD
			continue
		}
		w[name] = weightUnit + term(l.Bytes, hiB, sumB) + term(l.Delivered, hiD, sumD)
	}
	return w
}
