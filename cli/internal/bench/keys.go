package bench

import (
	"cmp"
	"context"
	"io"
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/spf13/cobra"
)

// KeysResult is the outcome of "fila bench keys": enqueue and
// consume+ack throughput as the number of distinct fairness keys grows.
type KeysResult struct {
	Workload string `json:"workload"`
	Size     int    `json:"size"`
	// Base is the number of keys of the first run, which the others are
	// compared with.
	Base int       `json:"base_keys"`
	Runs []KeysRun `json:"runs"`
}

// KeysRun is one number of keys: a fresh queue, Messages spread over Keys
// fairness keys round robin, enqueued, then consumed and acked; with
// several rounds, the round of median consume rate.
type KeysRun struct {
	Keys     int        `json:"keys"`
	Messages int64      `json:"messages"`
	Enqueue  Throughput `json:"enqueue"`
	Consume  Throughput `json:"consume"`
	// ConsumeRates are the consume rates of every round, msgs/s.
	ConsumeRates []float64 `json:"consume_rates"`
	// VsBase is this run's consume rate over the first run's.
	VsBase float64 `json:"consume_vs_base"`
}

func (r *KeysResult) writeTable(w io.Writer) error {
	rows := make([][]string, len(r.Runs))
	for i, k := range r.Runs {
		rows[i] = []string{group(int64(k.Keys)), group(k.Messages), rate(k.Enqueue.PerSecond()), rate(k.Consume.PerSecond()), pct(k.VsBase)}
	}
	base := "VS " + group(int64(r.Base)) + " KEYS"
	if r.Base == 1 {
		base = "VS 1 KEY"
	}
	return table(w, []string{"KEYS", "MESSAGES", "ENQUEUE MSGS/S", "CONSUME+ACK MSGS/S", base}, rows)
}

func newKeysCmd(e *env) *cobra.Command {
	var (
		keyList  string
		count    int64
		size     int
		prefetch uint32
		batch    int
		rounds   int
	)
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Throughput as the number of distinct fairness keys grows",
		Long: `For each number of keys in --keys, on a fresh queue: enqueues --count
messages (at least one per key) spread over that many fairness keys
round robin, with 4 producers, then consumes and acks them all with one
consumer. Reports both rates and the consume rate against the first
entry's (1 key by default: the FIFO baseline, so the ratio is the cost
of DRR). With --rounds N the whole list runs N times, interleaved, and
each number of keys reports its round of median consume rate: on a
machine shared with other work, single runs differ by 10–20%.`,
		Example: `  fila bench keys --keys 1,10,1000,100000,1000000 --count 1000000`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, err := parseList("keys", keyList)
			if err != nil {
				return err
			}
			if count < 1 || rounds < 1 || batch < 1 {
				return usagef("bench: want --count ≥ 1, --rounds ≥ 1 and --batch ≥ 1")
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
			res := &KeysResult{Workload: "keys", Size: size, Base: ks[0]}
			prefix := e.queue
			if prefix == "" {
				prefix = "bench-keys-" + randomSuffix()
			}
			// Rounds interleave the numbers of keys, so a machine whose
			// speed drifts affects them alike; each keeps its median.
			samples := make([][]KeysRun, len(ks))
			for round := range rounds {
				for i, k := range ks {
					n := max(count, int64(k))
					name := prefix + "-" + strconv.Itoa(k)
					if rounds > 1 {
						name += "-" + strconv.Itoa(round)
					}
					q, drop, err := createQueue(ctx, c, name, e.keep, nil)
					if err != nil {
						return err
					}
					run, err := keysRun(ctx, e, q, k, n, size, prefetch, batch)
					drop()
					if err != nil {
						return err
					}
					samples[i] = append(samples[i], run)
				}
			}
			for _, runs := range samples {
				res.Runs = append(res.Runs, medianRun(runs))
			}
			for i := range res.Runs {
				if base := res.Runs[0].Consume.PerSecond(); base > 0 {
					res.Runs[i].VsBase = res.Runs[i].Consume.PerSecond() / base
				}
			}
			return e.emit(res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&keyList, "keys", "1,10,1000,100000,1000000", "numbers of fairness keys, comma-separated; the first is the base")
	fl.Int64Var(&count, "count", 1000000, "messages per run (at least the number of keys)")
	fl.IntVar(&size, "size", 128, "payload bytes per message")
	fl.Uint32Var(&prefetch, "prefetch", 1024, "the consumer's delivery credit")
	fl.IntVar(&batch, "batch", 256, "messages per SendBatch; deliveries per AckAll")
	fl.IntVar(&rounds, "rounds", 1, "times to run the whole list; each number of keys reports its median round")
	return cmd
}

func keysRun(ctx context.Context, e *env, q string, k int, n int64, size int, prefetch uint32, batch int) (KeysRun, error) {
	keys := make([]string, k)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var sent atomic.Int64
	desc := group(int64(k)) + " keys: enqueue"
	stop := e.track(desc, n, sent.Load)
	p, err := produce(ctx, e, produceSpec{
		queue: q, producers: 4, outstanding: 4 * batch, batch: batch, size: size, count: n, keys: keys,
	}, &sent)
	stop()
	if err != nil {
		return KeysRun{}, err
	}
	var got atomic.Int64
	stop = e.track(group(int64(k))+" keys: consume", n, got.Load)
	con, err := consume(ctx, e, consumeSpec{queue: q, consumers: 1, prefetch: prefetch, ackBatch: batch, count: n}, &got)
	stop()
	if err != nil {
		return KeysRun{}, err
	}
	return KeysRun{Keys: k, Messages: n, Enqueue: p.Throughput, Consume: con}, nil
}

// medianRun returns the run of median consume rate (the lower middle one
// of an even count), with every run's consume rate.
func medianRun(runs []KeysRun) KeysRun {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b KeysRun) int { return cmp.Compare(a.Consume.PerSecond(), b.Consume.PerSecond()) })
	m := sorted[(len(sorted)-1)/2]
	for _, r := range runs {
		m.ConsumeRates = append(m.ConsumeRates, math.Round(r.Consume.PerSecond()*10)/10)
	}
	return m
}
