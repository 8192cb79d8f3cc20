package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// The command encoding, version 1. A command is its Kind byte, then its
// fields in declaration order:
//
//   - integers as uvarints (signed ones, times and durations zigzag
//     varints), booleans as one byte 0 or 1, floats as 8 bytes
//     little-endian IEEE 754;
//   - strings and byte strings as a uvarint length and the bytes;
//   - message IDs as their 16 bytes;
//   - lists as a uvarint count and the elements.
//
// The encoding is stable: a field is never reordered or retyped. A later
// version adds a new Kind rather than change an old one. It is what a
// command log holds and what a replicated entry carries.
//
// So an Enqueue has two: KindEnqueue, the original, and KindEnqueueSeq,
// whose items each end with the producer ID (16 bytes) and the sequence
// (a uvarint), used when an item has a producer. A decoder that predates
// producers still reads every Enqueue without them, and refuses (never
// misreads) one with them.

// ErrBadCommand is wrapped by DecodeCommand's errors: the bytes are not a
// command this version encodes.
var ErrBadCommand = errors.New("malformed replicated command")

// AppendCommand appends c's encoding to b and returns the extended slice.
func AppendCommand(b []byte, c Command) []byte {
	b = append(b, byte(c.Kind()))
	switch c := c.(type) {
	case *Tick:
		b = binary.AppendVarint(b, int64(c.Now))
	case *LeaseEpoch:
		b = binary.AppendUvarint(b, c.Base)
	case *CreateQueue:
		sp := &c.Spec
		b = appendString(b, sp.Name)
		b = binary.AppendVarint(b, int64(sp.VisibilityTimeout))
		b = appendString(b, sp.OnEnqueue)
		b = appendString(b, sp.OnFailure)
		b = binary.AppendUvarint(b, uint64(sp.MaxAttempts))
		b = binary.AppendVarint(b, int64(sp.BackoffBase))
		b = binary.AppendVarint(b, int64(sp.BackoffMax))
		b = binary.AppendVarint(b, int64(sp.DedupWindow))
		if c.Kind() == KindCreateQueueTTL { // every optional field, then the TTL's
			b = appendString(b, sp.Policy)
			b = binary.AppendUvarint(b, uint64(sp.LatencyBudget))
			b = binary.AppendVarint(b, int64(sp.LatencyIdle))
			b = appendString(b, sp.TenantSeparator)
			b = appendBool(b, sp.CostByTime)
			b = binary.AppendVarint(b, int64(sp.MessageTTL))
			b = appendString(b, sp.ExpiredAction)
		} else if sp.Policy != "" || sp.LatencyBudget != 0 || sp.LatencyIdle != 0 || sp.TenantSeparator != "" || sp.CostByTime { // absent as before policies: the defaults
			b = appendString(b, sp.Policy)
			b = binary.AppendUvarint(b, uint64(sp.LatencyBudget))
			b = binary.AppendVarint(b, int64(sp.LatencyIdle))
			if sp.TenantSeparator != "" || sp.CostByTime { // absent as before tenants
				b = appendString(b, sp.TenantSeparator)
			}
			if sp.CostByTime { // absent as before cost by time
				b = append(b, 1)
			}
		}
	case *DeleteQueue:
		b = appendString(b, c.Name)
	case *Enqueue:
		life := c.Kind() == KindEnqueueLife
		seqs := c.Kind() == KindEnqueueSeq || life
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for i := range c.Items {
			it := &c.Items[i]
			m := &it.Msg
			b = appendString(b, it.Queue)
			b = append(b, m.ID[:]...)
			b = appendString(b, m.FairnessKey)
			b = binary.AppendUvarint(b, uint64(m.Weight))
			b = binary.AppendUvarint(b, uint64(len(m.ThrottleKeys)))
			for _, k := range m.ThrottleKeys {
				b = appendString(b, k)
			}
			b = appendString(b, m.OrderingKey)
			b = appendString(b, m.IdempotencyKey)
			b = binary.AppendVarint(b, int64(m.Delay))
			b = binary.AppendUvarint(b, uint64(m.PayloadSize))
			b = appendBytes(b, m.Body)
			if seqs {
				b = append(b, m.ProducerID[:]...)
				b = binary.AppendUvarint(b, m.Sequence)
			}
			if life {
				b = binary.AppendVarint(b, int64(m.TTL))
				b = append(b, m.Priority)
			}
		}
	case *Subscribe:
		b = binary.AppendUvarint(b, uint64(c.Sub))
		b = appendString(b, c.Queue)
		b = binary.AppendUvarint(b, uint64(c.Credit))
		b = binary.AppendUvarint(b, uint64(len(c.Limits)))
		for _, l := range c.Limits {
			b = appendString(b, l.Name)
			b = binary.AppendUvarint(b, uint64(l.Limit))
			b = binary.AppendVarint(b, int64(l.Period))
			b = binary.AppendUvarint(b, uint64(l.Burst))
		}
		if c.Kind() == KindSubscribeLease {
			b = binary.AppendVarint(b, int64(c.Lease))
		}
	case *Unsubscribe:
		b = binary.AppendUvarint(b, uint64(c.Sub))
		b = appendBool(b, c.Release)
	case *AddCredit:
		b = binary.AppendUvarint(b, uint64(c.Sub))
		b = binary.AppendUvarint(b, uint64(c.N))
	case *Ack:
		b = appendRefs(b, c.Items)
	case *Release:
		b = appendRefs(b, c.Items)
	case *Nack:
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			b = appendRef(b, it.LeaseRef)
			b = appendString(b, it.Reason)
		}
	case *RetryAfter:
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			b = appendRef(b, it.LeaseRef)
			b = binary.AppendVarint(b, int64(it.Delay))
		}
	case *Extend:
		b = binary.AppendUvarint(b, uint64(len(c.Items)))
		for _, it := range c.Items {
			b = appendRef(b, it.LeaseRef)
			b = binary.AppendVarint(b, int64(it.Duration))
		}
	case *Redrive:
		b = appendString(b, c.DLQ)
		b = binary.AppendUvarint(b, c.N)
		if c.Kind() == KindRedriveWith {
			b = binary.AppendUvarint(b, uint64(c.Rate))
			b = appendString(b, c.FairnessKey)
		}
	case *CancelRedrive:
		b = appendString(b, c.DLQ)
	case *PurgeQueue:
		b = appendString(b, c.Name)
		b = appendBool(b, c.IncludeLeased)
	case *Decide:
		b = appendString(b, c.Queue)
		b = append(b, c.ID[:]...)
		b = appendBool(b, c.Decision.DeadLetter)
		b = binary.AppendVarint(b, int64(c.Decision.Delay))
	case *SetThrottle:
		b = appendString(b, c.Key)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Rate))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Burst))
	case *RemoveThrottle:
		b = appendString(b, c.Key)
	case *Deliver:
	default:
		panic(fmt.Sprintf("shard: command of unknown type %T", c))
	}
	return b
}

// DecodeCommand decodes one command, which must fill b. The command may
// point into b (message bodies do). It returns an error wrapping
// ErrBadCommand for an unknown kind, a truncated or overlong field, or
// bytes left over.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	d := decoder{b: b[1:]}
	var c Command
	switch k := Kind(b[0]); k {
	case KindTick:
		c = &Tick{Now: sched.Time(d.varint())}
	case KindLeaseEpoch:
		c = &LeaseEpoch{Base: d.uvarint()}
	case KindCreateQueueTTL:
		sp := sched.QueueSpec{Name: d.string(), VisibilityTimeout: d.duration(), OnEnqueue: d.string(), OnFailure: d.string(),
			MaxAttempts: d.u32(), BackoffBase: d.duration(), BackoffMax: d.duration(), DedupWindow: d.duration()}
		sp.Policy, sp.LatencyBudget, sp.LatencyIdle = d.string(), d.u32(), d.duration()
		sp.TenantSeparator, sp.CostByTime = d.string(), d.bool()
		sp.MessageTTL, sp.ExpiredAction = d.duration(), d.string()
		if sp.MessageTTL == 0 && sp.ExpiredAction == "" {
			d.fail("message ttl and expired action written zero")
		}
		c = &CreateQueue{Spec: sp}
	case KindCreateQueue:
		var sp sched.QueueSpec
		sp.Name = d.string()
		sp.VisibilityTimeout = d.duration()
		sp.OnEnqueue = d.string()
		sp.OnFailure = d.string()
		sp.MaxAttempts = d.u32()
		sp.BackoffBase = d.duration()
		sp.BackoffMax = d.duration()
		sp.DedupWindow = d.duration()
		if len(d.b) > 0 {
			// Present only when one is set.
			sp.Policy = d.string()
			sp.LatencyBudget = d.u32()
			sp.LatencyIdle = d.duration()
			if len(d.b) > 0 {
				// The scheduler checks them against the policy.
				if sp.TenantSeparator = d.string(); len(sp.TenantSeparator) > sched.MaxTenantSeparator {
					d.fail("tenant separator %q", sp.TenantSeparator)
				}
				if len(d.b) > 0 {
					if sp.CostByTime = d.bool(); !sp.CostByTime {
						d.fail("cost by time written false")
					}
				} else if sp.TenantSeparator == "" {
					d.fail("empty tenant separator")
				}
			}
			if sched.CheckPolicy(sp.Policy) != nil || (sp.Policy == "" && sp.LatencyBudget == 0 && sp.LatencyIdle == 0 && sp.TenantSeparator == "") {
				d.fail("policy %q, latency budget %d, idle %v", sp.Policy, sp.LatencyBudget, sp.LatencyIdle)
			}
		}
		c = &CreateQueue{Spec: sp}
	case KindDeleteQueue:
		c = &DeleteQueue{Name: d.string()}
	case KindEnqueue, KindEnqueueSeq, KindEnqueueLife:
		life := Kind(b[0]) == KindEnqueueLife
		seqs := Kind(b[0]) == KindEnqueueSeq || life
		minSize := minItemSize
		if seqs {
			minSize += 16 + 1
		}
		if life {
			minSize += 1 + 1
		}
		n := d.count(minSize)
		items := make([]sched.EnqueueItem, n)
		for i := range items {
			it := &items[i]
			m := &it.Msg
			it.Queue = d.string()
			m.ID = d.id()
			m.FairnessKey = d.string()
			m.Weight = d.u32()
			if nk := d.count(1); nk > 0 {
				m.ThrottleKeys = make([]string, nk)
				for j := range m.ThrottleKeys {
					m.ThrottleKeys[j] = d.string()
				}
			}
			m.OrderingKey = d.string()
			m.IdempotencyKey = d.string()
			m.Delay = d.duration()
			m.PayloadSize = d.u32()
			m.Body = d.bytes()
			if seqs {
				m.ProducerID = d.id()
				m.Sequence = d.uvarint()
			}
			if life {
				m.TTL = d.duration()
				m.Priority = d.u8()
			}
		}
		if life && !slices.ContainsFunc(items, func(it sched.EnqueueItem) bool { return it.Msg.TTL != 0 || it.Msg.Priority != 0 }) {
			d.fail("no item with a ttl or a priority")
		}
		c = &Enqueue{Items: items}
	case KindSubscribe, KindSubscribeLease:
		s := &Subscribe{Sub: sched.SubID(d.uvarint()), Queue: d.string(), Credit: d.u32()}
		if n := d.count(4); n > 0 {
			s.Limits = make([]sched.RateLimit, n)
			for i := range s.Limits {
				s.Limits[i] = sched.RateLimit{Name: d.string(), Limit: d.u32(), Period: d.duration(), Burst: d.u32()}
			}
		}
		if Kind(b[0]) == KindSubscribeLease {
			if s.Lease = d.duration(); s.Lease == 0 {
				d.fail("lease written zero")
			}
		}
		c = s
	case KindUnsubscribe:
		c = &Unsubscribe{Sub: sched.SubID(d.uvarint()), Release: d.bool()}
	case KindAddCredit:
		c = &AddCredit{Sub: sched.SubID(d.uvarint()), N: d.u32()}
	case KindAck:
		c = &Ack{Items: d.refs()}
	case KindRelease:
		c = &Release{Items: d.refs()}
	case KindNack:
		items := make([]sched.NackItem, d.count(minRefSize+1))
		for i := range items {
			items[i] = sched.NackItem{LeaseRef: d.ref(), Reason: d.string()}
		}
		c = &Nack{Items: items}
	case KindRetryAfter:
		items := make([]sched.RetryItem, d.count(minRefSize+1))
		for i := range items {
			items[i] = sched.RetryItem{LeaseRef: d.ref(), Delay: d.duration()}
		}
		c = &RetryAfter{Items: items}
	case KindExtend:
		items := make([]sched.ExtendItem, d.count(minRefSize+1))
		for i := range items {
			items[i] = sched.ExtendItem{LeaseRef: d.ref(), Duration: d.duration()}
		}
		c = &Extend{Items: items}
	case KindRedrive, KindRedriveWith:
		r := &Redrive{DLQ: d.string(), N: d.uvarint()}
		if Kind(b[0]) == KindRedriveWith {
			r.Rate, r.FairnessKey = d.u32(), d.string()
			if r.Rate == 0 && r.FairnessKey == "" {
				d.fail("rate and key written zero")
			}
		}
		c = r
	case KindCancelRedrive:
		c = &CancelRedrive{DLQ: d.string()}
	case KindPurgeQueue:
		c = &PurgeQueue{Name: d.string(), IncludeLeased: d.bool()}
	case KindDecide:
		dc := &Decide{Queue: d.string(), ID: d.id()}
		dc.Decision.DeadLetter = d.bool()
		dc.Decision.Delay = d.duration()
		c = dc
	case KindSetThrottle:
		c = &SetThrottle{Key: d.string(), Rate: d.float(), Burst: d.float()}
	case KindRemoveThrottle:
		c = &RemoveThrottle{Key: d.string()}
	case KindDeliver:
		c = &Deliver{}
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", ErrBadCommand, b[0])
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v: %v", ErrBadCommand, c.Kind(), d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %v: %d bytes left over", ErrBadCommand, c.Kind(), len(d.b))
	}
	return c, nil
}

// The smallest encodings of a list element, which bound a decoded count by
// the bytes left, so that a forged count cannot make a large allocation.
const (
	minRefSize  = 1 + 16 + 1 // queue length, ID, lease
	minItemSize = 1 + 16 + 8 // queue, ID, seven empty or zero fields, body length
)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendRef(b []byte, r sched.LeaseRef) []byte {
	b = appendString(b, r.Queue)
	b = append(b, r.ID[:]...)
	return binary.AppendUvarint(b, r.Lease)
}

func appendRefs(b []byte, refs []sched.LeaseRef) []byte {
	b = binary.AppendUvarint(b, uint64(len(refs)))
	for _, r := range refs {
		b = appendRef(b, r)
	}
	return b
}

// decoder reads fields from b; after the first error every read returns a
// zero value and err keeps that error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail("%d overflows 32 bits", v)
		return 0
	}
	return uint32(v)
}

func (d *decoder) duration() time.Duration { return time.Duration(d.varint()) }

func (d *decoder) u8() uint8 {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// count reads a list length, at most the bytes left divided by the
// element's smallest encoding.
func (d *decoder) count(minSize int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/minSize) {
		d.fail("count %d exceeds the %d bytes left", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) id() (id [16]byte) {
	if len(d.b) < 16 {
		d.fail("truncated ID")
		return id
	}
	copy(id[:], d.b)
	d.b = d.b[16:]
	return id
}

func (d *decoder) bool() bool {
	if len(d.b) < 1 || d.b[0] > 1 {
		d.fail("bad boolean")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

func (d *decoder) float() float64 {
	if len(d.b) < 8 {
		d.fail("truncated float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *decoder) ref() sched.LeaseRef {
	return sched.LeaseRef{Queue: d.string(), ID: d.id(), Lease: d.uvarint()}
}

func (d *decoder) refs() []sched.LeaseRef {
	refs := make([]sched.LeaseRef, d.count(minRefSize))
	for i := range refs {
		refs[i] = d.ref()
	}
	return refs
}
