package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// FairnessResult is the outcome of "fila bench fairness": the share of
// deliveries each fairness key received while every key was backlogged,
// against its entitled share weight / Σ weights.
type FairnessResult struct {
	Workload string `json:"workload"`
	Queue    string `json:"queue"`
	Size     int    `json:"size"`
	// Messages were enqueued in all, each key's in proportion to its
	// weight, before the consumer subscribed.
	Messages int64 `json:"messages"`
	// Window is the deliveries counted: from the first up to the one
	// that emptied a key, the span in which every key was backlogged.
	Window int64              `json:"window"`
	Keys   []FairnessKeyShare `json:"keys"`
	// MaxDeviation is the largest |share − entitled| over the keys, as a
	// fraction of all deliveries in the window (0.005 is half a
	// percentage point).
	MaxDeviation float64 `json:"max_deviation"`
	// MaxRelativeDeviation is the largest |share / entitled − 1|.
	MaxRelativeDeviation float64 `json:"max_relative_deviation"`
	// JainIndex is Jain's fairness index (Jain, Chiu & Hawe, DEC-TR-301,
	// 1984) of the keys' share / entitled over the window: (Σx)²/(n·Σx²),
	// 1 when every key got exactly its entitlement, 1/n when one key got
	// everything.
	JainIndex float64    `json:"jain_index"`
	Consume   Throughput `json:"consume"`
}

// FairnessKeyShare is one key's part of a FairnessResult.
type FairnessKeyShare struct {
	Key       string  `json:"key"`
	Weight    uint32  `json:"weight"`
	Enqueued  int64   `json:"enqueued"`
	Delivered int64   `json:"delivered"`
	Share     float64 `json:"share"`
	Entitled  float64 `json:"entitled"`
	Deviation float64 `json:"deviation"`
}

func (r *FairnessResult) writeTable(w io.Writer) error {
	rows := make([][]string, len(r.Keys))
	for i, k := range r.Keys {
		rows[i] = []string{k.Key, fmt.Sprint(k.Weight), group(k.Enqueued), group(k.Delivered), pct(k.Share), pct(k.Entitled), fmt.Sprintf("%+.3f pp", k.Deviation*100)}
	}
	if err := table(w, []string{"KEY", "WEIGHT", "ENQUEUED", "DELIVERED", "SHARE", "ENTITLED", "DEVIATION"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nwindow %s of %s deliveries; max deviation %.3f pp (%.2f%% relative); Jain's index %.4f; consume+ack %s msgs/s\n",
		group(r.Window), group(r.Messages), r.MaxDeviation*100, r.MaxRelativeDeviation*100, r.JainIndex, rate(r.Consume.PerSecond()))
	return err
}

// shares computes a FairnessResult's per-key figures from the order of
// deliveries (the index of each delivery's key) and each key's enqueued
// count. Messages are all the same size, so the share of bytes, DRR's
// cost unit, is the share of deliveries. It returns the window length.
func shares(order []int, enqueued []int64, weights []uint32) (window int64, keys []FairnessKeyShare, maxDev, maxRel float64) {
	delivered := make([]int64, len(enqueued))
	for _, k := range order {
		delivered[k]++
		window++
		if delivered[k] == enqueued[k] {
			break // key k is no longer backlogged
		}
	}
	var sumW float64
	for _, w := range weights {
		sumW += float64(w)
	}
	keys = make([]FairnessKeyShare, len(enqueued))
	for i := range keys {
		k := FairnessKeyShare{Weight: weights[i], Enqueued: enqueued[i], Delivered: delivered[i]}
		if window > 0 {
			k.Share = float64(delivered[i]) / float64(window)
		}
		k.Entitled = float64(weights[i]) / sumW
		k.Deviation = k.Share - k.Entitled
		maxDev = max(maxDev, math.Abs(k.Deviation))
		maxRel = max(maxRel, math.Abs(k.Share/k.Entitled-1))
		keys[i] = k
	}
	return window, keys, maxDev, maxRel
}

// jainIndex is Jain's index of keys' Share / Entitled (see
// FairnessResult.JainIndex); 0 for no keys or no deliveries.
func jainIndex(keys []FairnessKeyShare) float64 {
	var sum, sq float64
	for _, k := range keys {
		if k.Entitled == 0 {
			continue
		}
		x := k.Share / k.Entitled
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(keys)) * sq)
}

func newFairnessCmd(e *env) *cobra.Command {
	var (
		weightList string
		count      int64
		size       int
		prefetch   uint32
	)
	cmd := &cobra.Command{
		Use:   "fairness",
		Short: "Weighted fairness keys, all backlogged: each key's share against its entitlement",
		Long: `Enqueues --count messages over one fairness key per weight in --weights
(key-1 with the first weight, and so on), each key's count in proportion
to its weight, so all run out together. Then one consumer subscribes
and consumes everything; the deliveries are counted in arrival order up
to the moment the first key runs out, while every key is backlogged.
Each key's share of them is compared with weight / Σ weights.`,
		Example: `  fila bench fairness --weights 1,2,3,4,5 --count 60000`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := parseList("weights", weightList)
			if err != nil {
				return err
			}
			var sumW int64
			for _, w := range ws {
				sumW += int64(w)
			}
			if count < sumW || count > maxTracked {
				return usagef("bench: --count %d: want at least Σ weights (%d), at most %d", count, sumW, maxTracked)
			}
			if err := checkSize(size, 0); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "fairness", nil)
			if err != nil {
				return err
			}
			defer drop()
			res, err := fairness(ctx, e, q, ws, count, size, prefetch)
			if err != nil {
				return err
			}
			return e.emit(res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&weightList, "weights", "1,2,3,4,5", "weights of the fairness keys, comma-separated")
	fl.Int64Var(&count, "count", 60000, "messages in all (rounded down to whole cycles of Σ weights)")
	fl.IntVar(&size, "size", 1024, "payload bytes per message")
	fl.Uint32Var(&prefetch, "prefetch", 256, "the consumer's delivery credit")
	return cmd
}

func fairness(ctx context.Context, e *env, q string, ws []int, count int64, size int, prefetch uint32) (*FairnessResult, error) {
	// One cycle holds key i weights[i] times; message n gets the key at
	// n mod Σw of the cycle, so each key's count is its weight's share.
	var cycle []string
	var cycleW []uint32
	names := make([]string, len(ws))
	weights := make([]uint32, len(ws))
	index := make(map[string]int, len(ws))
	for i, w := range ws {
		names[i] = "key-" + strconv.Itoa(i+1)
		weights[i] = uint32(w)
		index[names[i]] = i
		for range w {
			cycle = append(cycle, names[i])
			cycleW = append(cycleW, uint32(w))
		}
	}
	count -= count % int64(len(cycle))
	enqueued := make([]int64, len(ws))
	for i, w := range ws {
		enqueued[i] = count / int64(len(cycle)) * int64(w)
	}
	var sent atomic.Int64
	stop := e.track("enqueue", count, sent.Load)
	if _, err := produce(ctx, e, produceSpec{
		queue: q, producers: 2, outstanding: 256, batch: 128, size: size, count: count,
		keys: cycle, weights: cycleW,
	}, &sent); err != nil {
		stop()
		return nil, err
	}
	stop()

	order := make([]int, count)
	var (
		pos     atomic.Int64
		got     atomic.Int64
		mu      sync.Mutex
		unknown string
	)
	stop = e.track("consume", count, got.Load)
	con, err := consume(ctx, e, consumeSpec{
		queue: q, consumers: 1, prefetch: prefetch, ackBatch: 128, count: count,
		onDelivery: func(d *fila.Delivery, _ time.Duration) {
			k, ok := index[d.FairnessKey()]
			if !ok {
				mu.Lock()
				unknown = d.FairnessKey()
				mu.Unlock()
				return
			}
			if i := pos.Add(1) - 1; i < int64(len(order)) {
				order[i] = k
			}
		},
	}, &got)
	stop()
	if err != nil {
		return nil, err
	}
	if unknown != "" {
		return nil, fmt.Errorf("bench: fairness: delivery with fairness key %q; want one of %s", unknown, strings.Join(names, ", "))
	}
	window, keys, maxDev, maxRel := shares(order[:min(pos.Load(), int64(len(order)))], enqueued, weights)
	for i := range keys {
		keys[i].Key = names[i]
	}
	return &FairnessResult{
		Workload: "fairness", Queue: q, Size: size, Messages: count, Window: window, Keys: keys,
		MaxDeviation: maxDev, MaxRelativeDeviation: maxRel, JainIndex: jainIndex(keys), Consume: con,
	}, nil
}
