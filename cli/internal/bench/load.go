package bench

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

// loadFlags are the flags of the throughput workloads.
type loadFlags struct {
	producers   int
	consumers   int
	size        int
	batch       int
	outstanding int
	prefetch    uint32
	duration    time.Duration
	count       int64
}

// check checks the flags of a workload with producers, consumers or both.
func (f *loadFlags) check(producers, consumers bool) error {
	switch {
	case producers && f.producers < 1:
		return usagef("bench: --producers %d: want 1 or more", f.producers)
	case consumers && f.consumers < 1:
		return usagef("bench: --consumers %d: want 1 or more", f.consumers)
	case f.batch < 1:
		return usagef("bench: --batch %d: want 1 or more", f.batch)
	case f.outstanding < 1:
		return usagef("bench: --outstanding %d: want 1 or more", f.outstanding)
	case f.count < 0:
		return usagef("bench: --count %d: want 0 or more", f.count)
	case f.duration < 0:
		return usagef("bench: --duration %v: want 0 or more", f.duration)
	case f.count == 0 && f.duration == 0:
		return usagef("bench: give --duration or --count")
	}
	if err := checkSize(f.size, 0); err != nil {
		return err
	}
	if !producers {
		return nil
	}
	inFlight := float64(f.producers) * float64(f.outstanding) // messages
	if f.count > 0 {
		inFlight = min(inFlight, float64(f.count))
	}
	if inFlight*float64(f.size) > maxPayloadMemory {
		return usagef("bench: --producers %d × --outstanding %d × --size %d: want at most %d payload bytes in flight (1 GiB)",
			f.producers, f.outstanding, f.size, maxPayloadMemory)
	}
	return nil
}

// produceSpec describes producers: how many clients, how many messages
// each keeps in flight, in batches of what size, and which fairness keys
// the messages carry.
type produceSpec struct {
	queue       string
	producers   int           // clients, one connection each
	outstanding int           // messages in flight per producer
	batch       int           // messages per SendBatch; 1: single-message Sends
	size        int           // payload bytes
	count       int64         // messages in all; 0 means until duration
	duration    time.Duration // 0 means until count
	stamp       bool          // write the send time into the first 8 payload bytes

	// keys, if not empty, are the fairness keys: message number i (from
	// 0, across all producers) gets keys[i%len(keys)] and, if weights is
	// not empty, weights[i%len(weights)].
	keys    []string
	weights []uint32
	// throttleKeys, if not empty, are added to every message.
	throttleKeys []string
}

// fit lowers the messages each producer keeps in flight, and the batch
// with them: to count, when that is fewer, which changes nothing but the
// buffers set up; and until the producers keep at most maxPayloadMemory
// payload bytes in flight. The flags of produce and lifecycle are checked
// against that bound, so it changes only the fixed settings of the other
// workloads' fills, and only for large messages.
func (s *produceSpec) fit() {
	if s.count > 0 && s.count < int64(s.outstanding) {
		s.outstanding = int(s.count)
	}
	if s.size > 0 {
		s.outstanding = min(s.outstanding, max(1, maxPayloadMemory/(max(s.producers, 1)*s.size)))
	}
	s.batch = min(s.batch, s.outstanding)
}

// produced is what producers achieved.
type produced struct {
	Throughput
	// Request is the round trip of each SendBatch (each Send, with a
	// batch of 1): its messages' wait for durability.
	Request Latency
}

// produce runs the producers of spec until count messages are enqueued
// or duration has passed, and returns the throughput. sent, if not nil,
// counts the messages enqueued so far. On a failure it returns the
// error with what was enqueued before it: messages of batches that
// succeeded, over the time until the producers stopped.
//
// Messages share one payload, which the SDK only reads, across every
// batch in flight. A stamped message carries its send time in its
// payload, so each message of a batch in flight has a buffer of its own.
func produce(ctx context.Context, e *env, spec produceSpec, sent *atomic.Int64) (produced, error) {
	if sent == nil {
		sent = new(atomic.Int64)
	}
	spec.fit()
	if len(spec.keys) == 0 {
		spec.keys = e.defaultKeys()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clients := make([]*fila.Client, spec.producers)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := e.dial(ctx)
		if err != nil {
			return produced{}, err
		}
		clients[i] = c
	}
	senders := max(1, (spec.outstanding+spec.batch-1)/spec.batch)
	batch := spec.batch
	stamp := spec.stamp && spec.size >= 8
	var shared []byte
	if !stamp {
		shared = make([]byte, spec.size)
		fill(shared)
	}
	var (
		next     atomic.Int64 // next message number to claim
		wg       sync.WaitGroup
		failOnce sync.Once
		failure  error
		mu       sync.Mutex
		samplers []*sampler
	)
	fail := func(err error) {
		failOnce.Do(func() { failure = err; cancel() })
	}
	start := time.Now()
	// A run bounded by time stops claiming batches at the deadline and
	// lets those in flight finish, so every message counted is enqueued
	// and every message enqueued is counted.
	deadline := start.Add(spec.duration)
	for _, c := range clients {
		p := c.Producer()
		for range senders {
			smp := newSampler(1 << 16)
			mu.Lock()
			samplers = append(samplers, smp)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var own []byte // stamped payloads, one per message of the batch
				if stamp {
					own = make([]byte, batch*spec.size)
					fill(own)
				}
				msgs := make([]*fila.Message, batch)
				for i := range msgs {
					payload := shared
					if stamp {
						payload = own[i*spec.size:][:spec.size:spec.size]
					}
					msgs[i] = fila.NewMessage(spec.queue, payload)
					for _, k := range spec.throttleKeys {
						msgs[i].ThrottleKey(k)
					}
				}
				for ctx.Err() == nil && (spec.duration == 0 || time.Now().Before(deadline)) {
					n := int64(batch)
					first := next.Add(n) - n
					if spec.count > 0 {
						n = min(n, spec.count-first)
						if n <= 0 {
							return
						}
					}
					out := msgs[:n]
					for i, m := range out {
						seq := first + int64(i)
						if len(spec.keys) > 0 {
							m.FairnessKey(spec.keys[seq%int64(len(spec.keys))])
						}
						if len(spec.weights) > 0 {
							m.Weight(spec.weights[seq%int64(len(spec.weights))])
						}
					}
					t0 := now()
					if stamp {
						for i := range out {
							binary.LittleEndian.PutUint64(own[i*spec.size:], uint64(t0))
						}
					}
					if err := sendOut(ctx, p, out); err != nil {
						fail(err)
						return
					}
					smp.add(now() - t0)
					sent.Add(n)
				}
			}()
		}
	}
	wg.Wait()
	n := sent.Load()
	p := produced{
		Throughput: Throughput{Messages: n, Bytes: n * int64(spec.size), Elapsed: time.Since(start)},
		Request:    summarize(merge(samplers)),
	}
	if failure != nil {
		return p, during("bench: produce", failure)
	}
	return p, nil
}

// sendOut enqueues out with p and returns the first failure: a batch of
// one with the SDK's single-message Send, which coalesces concurrent
// calls on one client into batch frames; more with SendBatch, in one
// request, where a message rejected alone fails the run too.
func sendOut(ctx context.Context, p *fila.Producer, out []*fila.Message) error {
	if len(out) == 1 {
		_, err := p.Send(ctx, out[0])
		return err
	}
	res, err := p.SendBatch(ctx, out)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// fill writes a recognisable pattern into b, so payloads do not compress
// to nothing anywhere along the way.
func fill(b []byte) {
	for i := range b {
		b[i] = byte('a' + i%26)
	}
}

// consumeSpec describes consumers.
type consumeSpec struct {
	queue     string
	consumers int    // clients, one subscription each
	prefetch  uint32 // credit per subscription; 0 is the broker's cap
	ackBatch  int    // deliveries per AckAll
	// count stops the consumers once they have taken this many
	// deliveries in all; duration stops them after this long. Either
	// may be 0 (no bound), not both.
	count    int64
	duration time.Duration
	// onDelivery, if not nil, sees every delivery when it arrives, with
	// the time (since epoch) it was taken from the subscription. It is
	// called from the consumer goroutines concurrently.
	onDelivery func(d *fila.Delivery, at time.Duration)
	// ready, if not nil, is closed once every subscription is open.
	ready chan<- struct{}
	// onStart, if not nil, is called with the time (since epoch) at which
	// every subscription was open, before the first delivery is taken.
	onStart func(at time.Duration)
}

// ackersPerConsumer is how many AckAll calls a consumer keeps in
// flight; ackFlush is how long a partial batch of acks waits for more
// deliveries.
const (
	ackersPerConsumer = 4
	ackFlush          = time.Millisecond
)

// consume runs the consumers of spec, acknowledging every delivery, and
// returns the throughput of acknowledged deliveries (every delivery
// taken, unless it fails). got, if not nil, counts the deliveries taken
// so far. On a failure it returns the error with the throughput of the
// deliveries acknowledged before it.
func consume(ctx context.Context, e *env, spec consumeSpec, got *atomic.Int64) (Throughput, error) {
	if got == nil {
		got = new(atomic.Int64)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clients := make([]*fila.Client, spec.consumers)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	subs := make([]*fila.Subscription, spec.consumers)
	for i := range clients {
		c, err := e.dial(ctx)
		if err != nil {
			return Throughput{}, err
		}
		clients[i] = c
		s, err := c.Consumer().Subscribe(ctx, spec.queue, fila.Prefetch(spec.prefetch))
		if err != nil {
			return Throughput{}, err
		}
		subs[i] = s
	}
	if spec.onStart != nil {
		spec.onStart(now())
	}
	if spec.ready != nil {
		close(spec.ready)
	}
	start := time.Now()
	var deadline <-chan time.Time
	if spec.duration > 0 {
		t := time.NewTimer(spec.duration)
		defer t.Stop()
		deadline = t.C
	}
	var (
		wg       sync.WaitGroup
		failOnce sync.Once
		failure  error
		acked    atomic.Int64 // deliveries acknowledged
		bytes    atomic.Int64 // their payload bytes
	)
	fail := func(err error) {
		failOnce.Do(func() { failure = err; cancel() })
	}
	for i, s := range subs {
		con := clients[i].Consumer()
		wg.Add(1)
		go func() {
			defer wg.Done()
			acks := make(chan []*fila.Delivery, ackersPerConsumer)
			var ackers sync.WaitGroup
			for range ackersPerConsumer {
				ackers.Add(1)
				go func() {
					defer ackers.Done()
					for batch := range acks {
						actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
						err := con.AckAll(actx, batch)
						acancel()
						if err != nil {
							fail(during("bench", err))
							continue
						}
						var nb int64
						for _, d := range batch {
							nb += int64(len(d.Payload()))
						}
						acked.Add(int64(len(batch)))
						bytes.Add(nb)
					}
				}()
			}
			defer ackers.Wait()
			defer close(acks)
			// Deliveries are acked in batches of ackBatch, handed to the
			// ackers so receiving never waits for an ack; a partial batch
			// goes after ackFlush without a new delivery.
			pending := make([]*fila.Delivery, 0, spec.ackBatch)
			flush := func() {
				if len(pending) > 0 {
					acks <- pending
					pending = make([]*fila.Delivery, 0, spec.ackBatch)
				}
			}
			defer flush()
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			defer timer.Stop()
			for ctx.Err() == nil {
				var d *fila.Delivery
				select {
				case d = <-s.C():
				case <-timer.C:
					flush()
					continue
				case <-ctx.Done():
					return
				}
				if d == nil {
					if err := s.Err(); err != nil {
						fail(err)
					}
					return
				}
				at := now()
				if spec.onDelivery != nil {
					spec.onDelivery(d, at)
				}
				pending = append(pending, d)
				switch {
				case len(pending) >= spec.ackBatch:
					timer.Stop()
					flush()
				case len(pending) == 1:
					timer.Reset(ackFlush)
				}
				if n := got.Add(1); spec.count > 0 && n >= spec.count {
					cancel()
				}
			}
		}()
	}
	go func() {
		select {
		case <-deadline:
			cancel()
		case <-ctx.Done():
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	for _, s := range subs {
		s.Close(context.Background())
	}
	t := Throughput{Messages: acked.Load(), Bytes: bytes.Load(), Elapsed: elapsed}
	if failure != nil {
		return t, failure
	}
	return t, nil
}

// stamped returns the send time written into a payload by a stamping
// producer, and false if the payload is too short to carry one.
func stamped(payload []byte) (time.Duration, bool) {
	if len(payload) < 8 {
		return 0, false
	}
	return time.Duration(binary.LittleEndian.Uint64(payload)), true
}
