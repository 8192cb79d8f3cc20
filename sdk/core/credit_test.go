package core

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// checkCredit checks the core's credit invariant for sub:
// outstanding + held + unreturned == prefetch + debt.
func checkCredit(c *Conn, sub uint32) error {
	s, ok := c.subs[sub]
	if !ok || s.prefetch == 0 {
		return nil
	}
	lhs := uint64(s.outstanding) + uint64(len(s.held)) + uint64(s.unreturned)
	rhs := uint64(s.prefetch) + uint64(s.debt)
	if lhs != rhs {
		return &invariantError{s: s}
	}
	return nil
}

type invariantError struct{ s *subscription }

func (e *invariantError) Error() string {
	s := e.s
	return "outstanding " + strconv.Itoa(int(s.outstanding)) + " + held " + strconv.Itoa(len(s.held)) +
		" + unreturned " + strconv.Itoa(int(s.unreturned)) + " != prefetch " + strconv.Itoa(int(s.prefetch)) +
		" + debt " + strconv.Itoa(int(s.debt))
}

// creditSeed returns the seed from SEED, or a new one.
func creditSeed(t *testing.T) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("SEED"), 10, 64); err == nil {
		return v
	}
	return uint64(time.Now().UnixNano())
}

// TestCreditModel plays a broker that keeps its own credit count against
// the core, with frames in flight both ways and random interleavings of
// deliveries, settles, lease expiries (some crossing an Ack), prefetch
// changes and deliveries of the returned credit. After every step the
// core's invariant holds; whenever nothing is in flight, the core's
// outstanding credit is exactly the broker's, and the leases it holds are
// exactly those the broker has leased. Set SEED to replay a run.
func TestCreditModel(t *testing.T) {
	seed := creditSeed(t)
	t.Logf("SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for run := 0; run < 200; run++ {
		prefetch := uint32(rng.IntN(12) + 1)
		m := newCreditModel(t, prefetch)
		for step := 0; step < 400; step++ {
			m.step(rng)
			if err := checkCredit(m.h.c, m.sub); err != nil {
				t.Fatalf("SEED=%d run %d step %d (%s): %v", seed, run, step, m.last, err)
			}
			if len(m.toClient) == 0 && len(m.toBroker) == 0 {
				m.checkQuiet(seed, run, step)
			}
		}
		// Drain both ways and settle everything: the broker ends with
		// exactly the prefetch, as credit or as leases.
		m.drain()
		m.checkQuiet(seed, run, -1)
	}
}

type creditModel struct {
	t   *testing.T
	h   *harness
	sub uint32
	// The broker.
	credit   int64
	leased   map[uint64]bool // leases held by the subscription
	lease    uint64
	toClient [][]byte // frames the broker sent, not yet received
	toBroker []wire.Frame
	// The application: deliveries it has and has not settled.
	app  []uint64
	last string
}

func newCreditModel(t *testing.T, prefetch uint32) *creditModel {
	h := newHarness(t, Config{})
	h.handshake()
	sub := subscribe(t, h, "q", prefetch)
	return &creditModel{t: t, h: h, sub: sub, credit: int64(prefetch), leased: map[uint64]bool{}}
}

func (m *creditModel) step(rng *rand.Rand) {
	switch op := rng.IntN(100); {
	case op < 25: // the broker delivers what its credit allows
		n := min(int(m.credit), rng.IntN(4)+1)
		if n <= 0 {
			m.last = "deliver (no credit)"
			return
		}
		d := &wire.Delivery{}
		for range n {
			m.lease++
			m.leased[m.lease] = true
			d.Messages = append(d.Messages, wire.DeliveredMessage{Queue: "q", Lease: m.lease, Attempt: 1})
		}
		m.credit -= int64(n)
		m.toClient = append(m.toClient, wire.AppendFrame(nil, m.sub, d))
		m.last = "deliver " + strconv.Itoa(n)
	case op < 40: // leases expire at the broker
		f := &wire.LeaseExpired{}
		for l := range m.leased {
			if rng.IntN(3) == 0 {
				delete(m.leased, l)
				m.credit++
				f.Leases = append(f.Leases, wire.ExpiredLease{Lease: l})
			}
		}
		if len(f.Leases) > 0 {
			m.toClient = append(m.toClient, wire.AppendFrame(nil, m.sub, f))
		}
		m.last = "expire " + strconv.Itoa(len(f.Leases))
	case op < 60: // the client receives the next frame
		m.receive()
	case op < 80: // the application settles some of its deliveries
		m.settle(rng, rng.IntN(3)+1)
	case op < 95: // the broker receives the next frame
		m.brokerReceive()
	default: // the application changes the prefetch
		n := uint32(rng.IntN(12) + 1)
		if err := m.h.c.SetPrefetch(m.sub, n); err != nil {
			m.t.Fatal(err)
		}
		m.collect()
		m.last = "set prefetch " + strconv.Itoa(int(n))
	}
}

func (m *creditModel) receive() {
	if len(m.toClient) == 0 {
		m.last = "receive (nothing)"
		return
	}
	f := m.toClient[0]
	m.toClient = m.toClient[1:]
	if err := m.h.c.Receive(f); err != nil {
		m.t.Fatalf("receive: %v", err)
	}
	m.h.drain()
	for _, d := range m.h.deliveries {
		for _, dm := range d.Messages {
			m.app = append(m.app, dm.Lease)
		}
	}
	m.h.deliveries = nil
	m.collect()
	m.last = "receive"
}

// settle settles n deliveries the application holds, in any order, some
// of them already expired, as an application racing the expiry would.
func (m *creditModel) settle(rng *rand.Rand, n int) {
	var leases []uint64
	for ; n > 0 && len(m.app) > 0; n-- {
		i := rng.IntN(len(m.app))
		leases = append(leases, m.app[i])
		m.app = append(m.app[:i], m.app[i+1:]...)
	}
	// Credit first, then the Ack: as an SDK does.
	m.h.c.Settle(m.sub, leases...)
	m.collect()
	for _, l := range leases {
		m.toBroker = append(m.toBroker, &wire.Ack{Items: []wire.LeaseRef{{Queue: "q", Lease: l}}})
	}
	m.last = "settle " + strconv.Itoa(len(leases))
}

// collect moves the frames the core wrote to the broker's inbox.
func (m *creditModel) collect() {
	for _, sf := range m.h.sent() {
		m.toBroker = append(m.toBroker, sf.f)
	}
}

func (m *creditModel) brokerReceive() {
	if len(m.toBroker) == 0 {
		m.last = "broker receive (nothing)"
		return
	}
	f := m.toBroker[0]
	m.toBroker = m.toBroker[1:]
	switch f := f.(type) {
	case *wire.Credit:
		m.credit += int64(f.Credits)
		m.last = "broker credit " + strconv.Itoa(int(f.Credits))
	case *wire.Ack:
		l := f.Items[0].Lease
		delete(m.leased, l) // an Ack of an expired lease changes nothing
		m.last = "broker ack"
	default:
		m.t.Fatalf("the core sent %v", f.Opcode())
	}
}

func (m *creditModel) drain() {
	for len(m.toClient) > 0 || len(m.toBroker) > 0 || len(m.app) > 0 {
		for len(m.toClient) > 0 {
			m.receive()
		}
		m.settle(rand.New(rand.NewPCG(1, 2)), len(m.app))
		for len(m.toBroker) > 0 {
			m.brokerReceive()
		}
	}
}

// checkQuiet checks, with nothing in flight, that the core's view is the
// broker's.
func (m *creditModel) checkQuiet(seed uint64, run, step int) {
	m.t.Helper()
	out, held, _ := m.h.c.Credit(m.sub)
	if int64(out) != m.credit {
		m.t.Fatalf("SEED=%d run %d step %d (%s): the core counts %d outstanding; the broker has %d credit", seed, run, step, m.last, out, m.credit)
	}
	if int(held) != len(m.leased) {
		m.t.Fatalf("SEED=%d run %d step %d (%s): the core holds %d leases; the broker has %d leased", seed, run, step, m.last, held, len(m.leased))
	}
	for l := range m.leased {
		if _, ok := m.h.c.subs[m.sub].held[l]; !ok {
			m.t.Fatalf("SEED=%d run %d step %d (%s): lease %d leased at the broker, not held by the core", seed, run, step, m.last, l)
		}
	}
}
