package sched

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the scripts in testdata/*.txt. Each file starts
// with a fresh scheduler (defaults, clock at t0); `go test -rewrite`
// rewrites the expected output.
//
// Commands (arguments are key=value; lists are key=(a,b)):
//
//	new [quantum=N] [vis=D] [max-attempts=N] [batch=N] [dedup=D] [max-lease=D] [max-unsettled=N] [producer-seqs=N]
//	create-queue name=Q [vis=D] [max-attempts=N] [backoff=(base,max)] [dedup=D] [on-failure] [ttl=D] [expired=drop]
//	delete-queue name=Q
//	enqueue queue=Q [key=K] [weight=N] [size=N] [throttle=(a,b)] [order=O] [idem=I] [delay=D] [n=N]
//	        [ttl=D] [priority=P]   P from 0 to 9
//	        [producer=P seq=S]   message i of the n has sequence S+i; P is a small number
//	        [queues=(Q1,Q2,…)]   message i goes to queue Qi (instead of queue=Q)
//	subscribe sub=N queue=Q [credit=N|max] [limit=(name,limit,period[,burst])]
//	unsubscribe sub=N [release]
//	credit sub=N n=N
//	ack|nack|retry|extend queue=Q ids=(m1,…) [lease=N] [reason=R] [delay=D] [dur=D] [durs=(D1,…)]
//	decide queue=Q id=mN (dlq | delay=D)
//	redrive dlq=Q [n=N]
//	set-throttle key=K rate=R burst=B   /   remove-throttle key=K
//	tick D          advance the clock by D
//	ready [brief]   print the Ready (brief: deliveries as ids and keys), then Advance
//	pump            decide deliveries (HasReady) without taking the Ready
//	stats queue=Q   /   list-queues
//	restart         rebuild the scheduler from the records persisted so far
//
// Durations take time.ParseDuration's form, or "max" for the largest.
// Times print relative to t0. Every command is followed by an invariant
// check; `ready` also checks liveness.
func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			// The scripts print DRR's deficits: a queue they create
			// without a policy is a drr queue.
			h := newHarness(Config{Policy: PolicyDRR})
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out := h.handle(t, d)
				if err := checkInvariants(h.s, d.Cmd == "ready"); err != nil {
					t.Fatalf("%s: invariant: %v", d.Pos, err)
				}
				return out
			})
		})
	}
}

// t0 is the harness's start time: 2023-11-14T22:13:20Z.
const t0 = Time(1_700_000_000 * time.Second)

type harness struct {
	cfg   Config
	s     *Sched
	kv    map[string][]byte // records persisted by the Readys taken
	next  uint64            // next message number
	lease map[[16]byte]uint64
	ref   Ref
	// throttles is the runtime config the shell would re-apply at boot.
	throttles map[string][2]float64
}

func newHarness(cfg Config) *harness {
	h := &harness{cfg: cfg, kv: make(map[string][]byte), lease: make(map[[16]byte]uint64), throttles: make(map[string][2]float64)}
	h.s = New(cfg)
	h.s.Tick(t0)
	return h
}

// testID returns the ID of message n: a fixed UUIDv7-like prefix and n.
func testID(n uint64) [16]byte {
	var id [16]byte
	copy(id[:], "\x01\x8b\xcf\xe5\x68\x00\x70\x00")
	binary.BigEndian.PutUint64(id[8:], n)
	return id
}

// testProducer returns the ID of producer n.
func testProducer(n uint64) [16]byte {
	var id [16]byte
	copy(id[:], "producer")
	binary.BigEndian.PutUint64(id[8:], n)
	return id
}

func idName(id [16]byte) string {
	if bytes.HasPrefix(id[:], []byte("\x01\x8b\xcf\xe5\x68\x00\x70\x00")) {
		return "m" + strconv.FormatUint(binary.BigEndian.Uint64(id[8:]), 10)
	}
	if bytes.HasPrefix(id[:], []byte("producer")) {
		return "p" + strconv.FormatUint(binary.BigEndian.Uint64(id[8:]), 10)
	}
	return formatID(id)
}

func parseIDName(t *testing.T, s string) [16]byte {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "m"), 10, 64)
	if err != nil || !strings.HasPrefix(s, "m") {
		t.Fatalf("bad message id %q", s)
	}
	return testID(n)
}

func rel(t Time) string {
	if t == 0 {
		return "none"
	}
	d := time.Duration(t - t0)
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

// args wraps a command's arguments.
type args struct {
	t *testing.T
	d *datadriven.TestData
}

func (a args) has(key string) bool { return a.d.HasArg(key) }

func (a args) str(key, def string) string {
	arg, ok := a.d.Arg(key)
	if !ok {
		return def
	}
	return strings.Join(arg.Vals, ",")
}

func (a args) list(key string) []string {
	arg, ok := a.d.Arg(key)
	if !ok {
		return nil
	}
	return arg.Vals
}

func (a args) int(key string, def int64) int64 {
	arg, ok := a.d.Arg(key)
	if !ok {
		return def
	}
	v, err := strconv.ParseInt(arg.SingleVal(a.t), 10, 64)
	if err != nil {
		a.t.Fatalf("%s: %s: %v", a.d.Pos, key, err)
	}
	return v
}

func (a args) float(key string, def float64) float64 {
	arg, ok := a.d.Arg(key)
	if !ok {
		return def
	}
	v, err := strconv.ParseFloat(arg.SingleVal(a.t), 64)
	if err != nil {
		a.t.Fatalf("%s: %s: %v", a.d.Pos, key, err)
	}
	return v
}

func (a args) dur(key string, def time.Duration) time.Duration {
	arg, ok := a.d.Arg(key)
	if !ok {
		return def
	}
	return parseDur(a.t, arg.SingleVal(a.t))
}

// parseDur parses a duration of time.ParseDuration's form, or "max" for
// the largest one.
func parseDur(t *testing.T, s string) time.Duration {
	if s == "max" {
		return math.MaxInt64
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("bad duration %q: %v", s, err)
	}
	return v
}

func (h *harness) handle(t *testing.T, d *datadriven.TestData) string {
	a := args{t, d}
	h.ref++
	ref := h.ref
	switch d.Cmd {
	case "new":
		h.cfg = Config{
			Quantum:           a.int("quantum", 0),
			VisibilityTimeout: a.dur("vis", 0),
			MaxAttempts:       int(a.int("max-attempts", 0)),
			MaxDeliveryBatch:  int(a.int("batch", 0)),
			DedupWindow:       a.dur("dedup", 0),
			MaxLeaseExtension: a.dur("max-lease", 0),
			MaxUnsettled:      int(a.int("max-unsettled", 0)),
			ProducerSeqs:      int(a.int("producer-seqs", 0)),
			Policy:            PolicyDRR, // as above
		}
		*h = *newHarness(h.cfg)
		return "ok"
	case "create-queue":
		spec := QueueSpec{
			Name:              a.str("name", ""),
			VisibilityTimeout: a.dur("vis", 0),
			MaxAttempts:       uint32(a.int("max-attempts", 0)),
			DedupWindow:       a.dur("dedup", 0),
			MessageTTL:        a.dur("ttl", 0),
			ExpiredAction:     a.str("expired", ""),
		}
		if b := a.list("backoff"); len(b) == 2 {
			spec.BackoffBase, spec.BackoffMax = parseDur(t, b[0]), parseDur(t, b[1])
		}
		if a.has("on-failure") {
			spec.OnFailure = "function on_failure(msg) end"
		}
		h.s.CreateQueue(ref, spec)
	case "delete-queue":
		h.s.DeleteQueue(ref, a.str("name", ""))
	case "enqueue":
		queues := a.list("queues")
		n := a.int("n", int64(max(len(queues), 1)))
		items := make([]EnqueueItem, n)
		for i := range items {
			h.next++
			id := testID(h.next)
			queue := a.str("queue", "")
			if i < len(queues) {
				queue = queues[i]
			}
			items[i] = EnqueueItem{Queue: queue, Msg: Message{
				ID:             id,
				FairnessKey:    a.str("key", ""),
				Weight:         uint32(a.int("weight", 0)),
				ThrottleKeys:   a.list("throttle"),
				OrderingKey:    a.str("order", ""),
				IdempotencyKey: a.str("idem", ""),
				Delay:          a.dur("delay", 0),
				TTL:            a.dur("ttl", 0),
				PayloadSize:    uint32(a.int("size", 100)),
				Body:           []byte("body-" + idName(id)),
			}}
			if a.has("priority") {
				items[i].Msg.Priority = uint8(a.int("priority", 0)) + 1
			}
			if a.has("producer") {
				items[i].Msg.ProducerID = testProducer(uint64(a.int("producer", 0)))
				items[i].Msg.Sequence = uint64(a.int("seq", 0)) + uint64(i)
			}
		}
		h.s.Enqueue(ref, items)
	case "subscribe":
		var limits []RateLimit
		if l := a.list("limit"); len(l) > 0 {
			rl := RateLimit{Name: l[0]}
			v, _ := strconv.ParseUint(l[1], 10, 32)
			rl.Limit = uint32(v)
			rl.Period, _ = time.ParseDuration(l[2])
			if len(l) > 3 {
				v, _ := strconv.ParseUint(l[3], 10, 32)
				rl.Burst = uint32(v)
			}
			limits = append(limits, rl)
		}
		var credit uint32 = math.MaxUint32 // credit=max
		if a.str("credit", "") != "max" {
			credit = uint32(a.int("credit", 0))
		}
		h.s.Subscribe(ref, SubID(a.int("sub", 0)), a.str("queue", ""), credit, limits)
	case "unsubscribe":
		h.s.Unsubscribe(ref, SubID(a.int("sub", 0)), a.has("release"))
	case "credit":
		h.s.AddCredit(SubID(a.int("sub", 0)), uint32(a.int("n", 0)))
		return "ok"
	case "ack", "nack", "retry", "extend", "release":
		var refs []LeaseRef
		for _, name := range a.list("ids") {
			id := parseIDName(t, name)
			refs = append(refs, LeaseRef{Queue: a.str("queue", ""), ID: id, Lease: uint64(a.int("lease", int64(h.lease[id])))})
		}
		switch d.Cmd {
		case "ack":
			h.s.Ack(ref, refs)
		case "release":
			h.s.Release(ref, refs)
		case "nack":
			items := make([]NackItem, len(refs))
			for i, r := range refs {
				items[i] = NackItem{LeaseRef: r, Reason: a.str("reason", "")}
			}
			h.s.Nack(ref, items)
		case "retry":
			items := make([]RetryItem, len(refs))
			for i, r := range refs {
				items[i] = RetryItem{LeaseRef: r, Delay: a.dur("delay", 0)}
			}
			h.s.RetryAfter(ref, items)
		case "extend":
			items := make([]ExtendItem, len(refs))
			durs := a.list("durs")
			for i, r := range refs {
				items[i] = ExtendItem{LeaseRef: r, Duration: a.dur("dur", 0)}
				if i < len(durs) {
					items[i].Duration = parseDur(t, durs[i])
				}
			}
			h.s.ExtendLease(ref, items)
		}
	case "decide":
		dec := Retry(a.dur("delay", 0))
		if a.has("dlq") {
			dec = DeadLetter()
		}
		h.s.Decide(a.str("queue", ""), parseIDName(t, a.str("id", "")), dec)
		return "ok"
	case "redrive":
		h.s.Redrive(ref, a.str("dlq", ""), uint64(a.int("n", 0)))
	case "set-throttle":
		rate, burst := a.float("rate", 0), a.float("burst", 0)
		h.s.SetThrottle(a.str("key", ""), rate, burst)
		if ValidateThrottle(rate, burst) == nil {
			h.throttles[a.str("key", "")] = [2]float64{rate, burst}
		}
		return "ok"
	case "remove-throttle":
		h.s.RemoveThrottle(a.str("key", ""))
		delete(h.throttles, a.str("key", ""))
		return "ok"
	case "tick":
		if len(d.CmdArgs) != 1 {
			t.Fatalf("%s: tick D", d.Pos)
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		h.s.Tick(h.s.Now().Add(dur))
		return "now " + rel(h.s.Now())
	case "ready":
		return h.ready(a.has("brief"))
	case "pump":
		// Decide deliveries (HasReady) without taking the Ready.
		h.s.HasReady()
		return "ok"
	case "stats":
		h.s.QueueStats(ref, a.str("queue", ""), 0)
	case "list-queues":
		h.s.ListQueues(ref)
	case "restart":
		return h.restart(t)
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	return h.lastReply(ref)
}

// lastReply prints the reply to ref from the Ready being built.
func (h *harness) lastReply(ref Ref) string {
	for _, r := range slices.Backward(h.s.cur.replies) {
		if r.Ref == ref {
			return fmtValue(r.Value)
		}
	}
	return "no reply"
}

func fmtErr(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

func fmtValue(v any) string {
	var b strings.Builder
	switch v := v.(type) {
	case nil:
		return "ok"
	case error:
		return fmtErr(v)
	case Subscribed:
		return fmt.Sprintf("subscribed credit=%d", v.Credit)
	case QueueCreated:
		return fmt.Sprintf("created %s (dlq %s)", v.Name, v.DLQ)
	case Redriven:
		return fmt.Sprintf("moved %d", v.Moved)
	case []EnqueueResult:
		if len(v) > 3 && consecutive(v) {
			return idName(v[0].ID) + ".." + idName(v[len(v)-1].ID)
		}
		for _, r := range v {
			switch {
			case r.Err != nil:
				b.WriteString(fmtErr(r.Err))
			case r.Duplicate:
				b.WriteString(idName(r.ID) + " (duplicate)")
			default:
				b.WriteString(idName(r.ID))
			}
			b.WriteByte('\n')
		}
	case []error:
		for _, err := range v {
			b.WriteString(fmtErr(err) + "\n")
		}
	case []ExtendResult:
		for _, r := range v {
			if r.Err != nil {
				b.WriteString(fmtErr(r.Err) + "\n")
			} else {
				b.WriteString("deadline " + rel(r.Deadline) + "\n")
			}
		}
	case []QueueSummary:
		for _, q := range v {
			fmt.Fprintf(&b, "%s ready=%d delayed=%d leased=%d", q.Name, q.Ready, q.Delayed, q.Leased)
			if q.DeadLetterQueue != "" {
				fmt.Fprintf(&b, " dlq=%s", q.DeadLetterQueue)
			}
			if q.Parent != "" {
				fmt.Fprintf(&b, " parent=%s", q.Parent)
			}
			b.WriteByte('\n')
		}
	case QueueStats:
		fmt.Fprintf(&b, "%s ready=%d delayed=%d leased=%d dead-lettered=%d subscriptions=%d vis=%v max-attempts=%d\n",
			v.Name, v.Ready, v.Delayed, v.Leased, v.DeadLettered, v.Subscriptions, v.VisibilityTimeout, v.MaxAttempts)
		if v.MessageTTL != 0 || v.Counts.TTLExpired != 0 {
			fmt.Fprintf(&b, "  ttl=%v expired-action=%s ttl-expired=%d dead-lettered-count=%d\n", v.MessageTTL, v.ExpiredAction, v.Counts.TTLExpired, v.Counts.DeadLettered)
		}
		for _, k := range v.FairnessKeys {
			fmt.Fprintf(&b, "  key %s pending=%d weight=%d deficit=%d delivered=%d\n", k.Key, k.Pending, k.Weight, k.Deficit, k.Delivered)
		}
		for _, k := range v.ThrottleKeys {
			fmt.Fprintf(&b, "  throttle %s rate=%v burst=%v tokens=%.3f waiting=%d\n", k.Key, k.Rate, k.Burst, k.Tokens, k.Waiting)
		}
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (h *harness) ready(brief bool) string {
	if !h.s.HasReady() {
		return "none"
	}
	rd := h.s.Ready()
	var b strings.Builder
	if len(rd.Persist) > 0 {
		if brief {
			fmt.Fprintf(&b, "persist: %d mutations\n", len(rd.Persist))
		} else {
			b.WriteString("persist:\n")
		}
	}
	for _, m := range rd.Persist {
		if !brief {
			b.WriteString("  " + fmtMutation(m) + "\n")
		}
	}
	applyPersist(h.kv, rd.Persist)
	if len(rd.Replies) > 0 {
		fmt.Fprintf(&b, "replies: %d\n", len(rd.Replies))
	}
	for _, e := range rd.Expired {
		fmt.Fprintf(&b, "expired sub %d:", e.Sub)
		for _, l := range e.Leases {
			fmt.Fprintf(&b, " %s(lease=%d)", idName(l.ID), l.Lease)
		}
		b.WriteByte('\n')
	}
	for _, d := range rd.Deliveries {
		if brief {
			fmt.Fprintf(&b, "sub %d:", d.Sub)
			for _, m := range d.Msgs {
				fmt.Fprintf(&b, " %s(%s)", idName(m.ID), m.FairnessKey)
				h.lease[m.ID] = m.Lease
			}
			b.WriteByte('\n')
			continue
		}
		fmt.Fprintf(&b, "sub %d:\n", d.Sub)
		for _, m := range d.Msgs {
			h.lease[m.ID] = m.Lease
			fmt.Fprintf(&b, "  %s %s key=%s attempt=%d lease=%d deadline=%s", idName(m.ID), m.Queue, m.FairnessKey, m.Attempt, m.Lease, rel(m.LeaseDeadline))
			if m.Weight != 1 {
				fmt.Fprintf(&b, " weight=%d", m.Weight)
			}
			if len(m.ThrottleKeys) > 0 {
				fmt.Fprintf(&b, " throttle=(%s)", strings.Join(m.ThrottleKeys, ","))
			}
			if m.OrderingKey != "" {
				fmt.Fprintf(&b, " order=%s", m.OrderingKey)
			}
			if m.DeadLettered {
				fmt.Fprintf(&b, " dead-lettered attempts=%d error=%q", m.Attempts, m.LastError)
			}
			if v, ok := h.kv[string(m.Key)]; !ok {
				b.WriteString(" (record missing)")
			} else if body, err := MessageBody(v); err != nil || string(body) != "body-"+idName(m.ID) {
				fmt.Fprintf(&b, " (body %q, %v)", body, err)
			}
			b.WriteByte('\n')
		}
	}
	for _, f := range rd.Failures {
		fmt.Fprintf(&b, "failure: %s %s attempts=%d reason=%q key=%s policy=%d/%v/%v\n", f.Queue, idName(f.ID), f.Attempts, f.Reason, f.FairnessKey, f.Policy.MaxAttempts, f.Policy.BackoffBase, f.Policy.BackoffMax)
	}
	for _, e := range rd.Ended {
		fmt.Fprintf(&b, "ended: sub %d: %v\n", e.Sub, e.Err)
	}
	fmt.Fprintf(&b, "deadline: %s", rel(rd.Deadline))
	h.s.Advance(rd)
	return b.String()
}

// applyPersist applies a Ready's mutations to kv in order, as a store
// does: puts, deletes and range deletes (Mutation.End).
func applyPersist(kv map[string][]byte, ps []Mutation) {
	for _, m := range ps {
		switch {
		case !m.Delete:
			kv[string(m.Key)] = bytes.Clone(m.Value)
		case m.End == nil:
			delete(kv, string(m.Key))
		default:
			for k := range kv {
				if string(m.Key) <= k && k < string(m.End) {
					delete(kv, k)
				}
			}
		}
	}
}

func fmtMutation(m Mutation) string {
	op := "put"
	if m.Delete {
		op = "del"
	}
	if m.Delete && m.End != nil {
		// A queue's records of one kind: <prefix><queue> 0x00 to 0x01.
		for _, p := range []struct{ prefix, kind string }{
			{prefixQueue, "queue"}, {prefixDedup, "idk"}, {prefixMsg, "msg"}, {prefixProducer, "producer"}, {prefixState, "state"},
		} {
			rest, ok := bytes.CutPrefix(m.Key, []byte(p.prefix))
			if q, ok2 := bytes.CutSuffix(rest, []byte{0}); ok && ok2 && string(m.End) == p.prefix+string(q)+"\x01" {
				return fmt.Sprintf("del range %s %s", p.kind, q)
			}
		}
		return fmt.Sprintf("del range %q..%q", m.Key, m.End)
	}
	key := m.Key
	switch {
	case bytes.HasPrefix(key, []byte(prefixQueue)):
		s := fmt.Sprintf("%s queue %s", op, key[len(prefixQueue):])
		if !m.Delete {
			spec, err := decodeQueueRecord("", m.Value)
			if err != nil {
				return s + " " + err.Error()
			}
			s += fmt.Sprintf(" vis=%v max-attempts=%d backoff=%v/%v dedup=%v", spec.VisibilityTimeout, spec.MaxAttempts, spec.BackoffBase, spec.BackoffMax, spec.DedupWindow)
			if spec.MessageTTL != 0 || spec.ExpiredAction != "" {
				s += fmt.Sprintf(" ttl=%v expired=%q", spec.MessageTTL, spec.ExpiredAction)
			}
		}
		return s
	case bytes.HasPrefix(key, []byte(prefixDedup)):
		q, k, _ := bytes.Cut(key[len(prefixDedup):], []byte{0})
		s := fmt.Sprintf("%s idk %s %s", op, q, k)
		if !m.Delete {
			id, exp, err := decodeDedupRecord(m.Value)
			if err != nil {
				return s + " " + err.Error()
			}
			s += fmt.Sprintf(" -> %s expires=%s", idName(id), rel(exp))
		}
		return s
	case bytes.HasPrefix(key, []byte(prefixProducer)):
		q, rest, _ := bytes.Cut(key[len(prefixProducer):], []byte{0})
		var pid [16]byte
		copy(pid[:], rest)
		if len(rest) == 16 {
			s := fmt.Sprintf("%s producer %s %s", op, q, idName(pid))
			if !m.Delete {
				floor, exp, err := decodeProducerRecord(m.Value)
				if err != nil {
					return s + " " + err.Error()
				}
				s += fmt.Sprintf(" floor=%d expires=%s", floor, rel(exp))
			}
			return s
		}
		last := binary.BigEndian.Uint64(rest[16:])
		s := fmt.Sprintf("%s run %s %s ..%d", op, q, idName(pid), last)
		if !m.Delete {
			run, err := decodeRunRecord(m.Value, last)
			if err != nil {
				return s + " " + err.Error()
			}
			s += " ["
			for i, e := range run {
				if i > 0 {
					s += " "
				}
				s += fmt.Sprintf("%d:%s", e.seq, idName(e.id))
			}
			s += "]"
		}
		return s
	case bytes.HasPrefix(key, []byte(prefixMsg)):
		q, id, _ := parseIDKey(key, prefixMsg)
		s := fmt.Sprintf("%s msg %s %s", op, q, idName(id))
		if !m.Delete {
			meta, body, err := DecodeMessageRecord(m.Value)
			if err != nil {
				return s + " " + err.Error()
			}
			s += fmt.Sprintf(" key=%s weight=%d size=%d", meta.FairnessKey, meta.Weight, meta.PayloadSize)
			if len(meta.ThrottleKeys) > 0 {
				s += " throttle=(" + strings.Join(meta.ThrottleKeys, ",") + ")"
			}
			if meta.OrderingKey != "" {
				s += " order=" + meta.OrderingKey
			}
			if meta.Due != 0 {
				s += " due=" + rel(meta.Due)
			}
			if meta.Expires != 0 {
				s += " expires=" + rel(meta.Expires)
			}
			if meta.Priority != 0 {
				s += fmt.Sprintf(" priority=%d", meta.Priority-1)
			}
			s += fmt.Sprintf(" body=%q", body)
		}
		return s
	case bytes.HasPrefix(key, []byte(prefixState)):
		q, id, _ := parseIDKey(key, prefixState)
		s := fmt.Sprintf("%s state %s %s", op, q, idName(id))
		if !m.Delete {
			r, err := decodeStateRecord(m.Value)
			if err != nil {
				return s + " " + err.Error()
			}
			s += fmt.Sprintf(" attempts=%d", r.attempts)
			if r.dead {
				s += " dead"
			}
			if r.noTTL {
				s += " no-ttl"
			}
			if r.due != 0 {
				s += " due=" + rel(r.due)
			}
			if r.lastErr != "" {
				s += fmt.Sprintf(" error=%q", r.lastErr)
			}
		}
		return s
	}
	return fmt.Sprintf("%s %q", op, key)
}

// restart builds a new scheduler from the persisted records, at the same
// time, and re-applies the throttle config, as the shell does at boot.
func (h *harness) restart(t *testing.T) string {
	now := h.s.Now()
	cfg := h.cfg
	cfg.LeaseBase = h.s.lease + 1000
	s := New(cfg)
	var errs []error
	for _, k := range slices.Sorted(mapKeys(h.kv)) {
		if err := s.Restore([]byte(k), h.kv[k]); err != nil {
			errs = append(errs, err)
		}
	}
	s.Tick(now)
	for _, k := range slices.Sorted(mapKeys(h.throttles)) {
		s.SetThrottle(k, h.throttles[k][0], h.throttles[k][1])
	}
	h.s = s
	if len(errs) > 0 {
		return errors.Join(errs...).Error()
	}
	return fmt.Sprintf("restored %d records", len(h.kv))
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// consecutive reports whether the results are successes with consecutive
// test IDs.
func consecutive(rs []EnqueueResult) bool {
	for i, r := range rs {
		if r.Err != nil || r.Duplicate || r.ID != testID(binary.BigEndian.Uint64(rs[0].ID[8:])+uint64(i)) {
			return false
		}
	}
	return true
}
