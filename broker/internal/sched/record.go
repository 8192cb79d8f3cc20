package sched

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Prefix is the key prefix of every record the scheduler stores. The
// shell scans it at startup and passes each record to Restore.
//
// Five kinds of record live under it. Their key prefixes sort in the
// order Restore needs them (queues first; then idempotency keys,
// messages, idempotent producers, message states, of which only states
// need their messages first):
//
//	s/def/<queue>                            queue definition
//	s/idk/<queue> 0x00 <key>                 idempotency key
//	s/msg/<queue> 0x00 <id:16>               message: metadata and body
//	s/prd/<queue> 0x00 <producer:16>         idempotent producer: floor, expiry
//	s/prd/<queue> 0x00 <producer:16> <seq:8> a producer's run of sequences, by its highest
//	s/st/<queue> 0x00 <id:16>                message state: attempts, due, DLQ
//
// A message's records stay under the queue it was enqueued to, also while
// it is dead-lettered, so moving a message never rewrites its body. Queue
// names cannot contain 0x00 and IDs are 16 bytes, so every key parses
// unambiguously. Integers are big-endian; every value starts with a
// version byte (1).
const Prefix = "s/"

const (
	prefixQueue    = "s/def/"
	prefixDedup    = "s/idk/"
	prefixMsg      = "s/msg/"
	prefixProducer = "s/prd/"
	prefixState    = "s/st/"
)

const recordVersion = 1

// A KeyRange is the keys from Start (inclusive) to End (exclusive).
type KeyRange struct{ Start, End []byte }

// QueueRanges returns the key ranges that hold every record of queue: its
// definition (which defines its dead-letter queue too), its idempotency
// keys, its messages, its idempotent producers, and its messages' states,
// dead-lettered ones included
// (they stay under their home queue). A queue is one unit of state:
// copying these ranges from one store to another, and restoring them,
// moves the queue and its DLQ whole, with nothing of any other queue.
// queue must be a queue's name, not a DLQ's.
func QueueRanges(queue string) []KeyRange {
	under := func(prefix string) KeyRange {
		start := append([]byte(prefix+queue), 0)
		end := append([]byte(prefix+queue), 1)
		return KeyRange{start, end}
	}
	def := []byte(prefixQueue + queue)
	return []KeyRange{
		{def, append(def[:len(def):len(def)], 0)},
		under(prefixDedup),
		under(prefixMsg),
		under(prefixProducer),
		under(prefixState),
	}
}

// MaxReasonLen bounds a failure reason kept in memory and storage, in
// bytes; longer reasons are cut at a character boundary.
const MaxReasonLen = 1024

func msgKeyLen(queue string) int   { return len(prefixMsg) + len(queue) + 1 + 16 }
func stateKeyLen(queue string) int { return len(prefixState) + len(queue) + 1 + 16 }

func appendMsgKey(b []byte, queue string, id [16]byte) []byte {
	b = append(b, prefixMsg...)
	b = append(b, queue...)
	b = append(b, 0)
	return append(b, id[:]...)
}

func appendStateKey(b []byte, queue string, id [16]byte) []byte {
	b = append(b, prefixState...)
	b = append(b, queue...)
	b = append(b, 0)
	return append(b, id[:]...)
}

func appendDedupKey(b []byte, queue, key string) []byte {
	b = append(b, prefixDedup...)
	b = append(b, queue...)
	b = append(b, 0)
	return append(b, key...)
}

func producerKeyLen(queue string) int { return len(prefixProducer) + len(queue) + 1 + 16 }

func appendProducerKey(b []byte, queue string, producer [16]byte) []byte {
	b = append(b, prefixProducer...)
	b = append(b, queue...)
	b = append(b, 0)
	return append(b, producer[:]...)
}

func appendRunKey(b []byte, queue string, producer [16]byte, last uint64) []byte {
	return binary.BigEndian.AppendUint64(appendProducerKey(b, queue, producer), last)
}

func appendQueueKey(b []byte, queue string) []byte {
	b = append(b, prefixQueue...)
	return append(b, queue...)
}

// parseIDKey splits "<prefix><queue> 0x00 <id:16>".
func parseIDKey(key []byte, prefix string) (queue string, id [16]byte, ok bool) {
	rest := key[len(prefix):]
	if len(rest) < 1+1+16 || rest[len(rest)-17] != 0 {
		return "", id, false
	}
	copy(id[:], rest[len(rest)-16:])
	return string(rest[:len(rest)-17]), id, true
}

// cutReason bounds a reason to MaxReasonLen bytes at a rune boundary.
func cutReason(r string) string {
	if len(r) <= MaxReasonLen {
		return r
	}
	i := MaxReasonLen
	for i > 0 && !utf8.RuneStart(r[i]) {
		i--
	}
	return r[:i]
}

// A message record (value of s/msg/…):
//
//	+---------+----------------+---------+-----------+-----------------+
//	| ver 1B  | enqueued_at 8B | due 8B  | weight 4B | payload_size 4B |
//	+---------+----------------+---------+-----------+-----------------+
//	| fairness_key: len 2B, bytes | throttle_keys: count 2B, each len 2B, bytes |
//	| ordering_key: len 2B, bytes | body: the rest of the value             |
//	+----------------------------------------------------------------------+
//
// Times are Unix nanoseconds; due is 0 for a message enqueued without
// delay.
//
// A message with a TTL or a priority other than the default is written
// as version 2, which adds two fields before the body:
//
//	| ... ordering_key: len 2B, bytes | expires 8B | priority 1B | body |
//
// expires is when the message expires (Unix nanoseconds), 0 for never;
// priority is encoded as Message.Priority (0: the default). Every other
// message is written as version 1, byte for byte as before TTLs, so
// that data written by an older broker, and records of messages using
// neither, read the same.
const msgRecordVersion2 = 2

// MessageMeta is the metadata of a message record.
type MessageMeta struct {
	EnqueuedAt   Time     // when the scheduler accepted it
	Due          Time     // end of the enqueue delay; 0 for none
	Weight       uint32   // at least 1
	PayloadSize  uint32   // bytes, as given at enqueue
	FairnessKey  string   // resolved ("default" for none)
	ThrottleKeys []string // sorted, without duplicates
	OrderingKey  string   // empty for none
	// Expires is when the message expires (Unix nanoseconds); 0 for
	// never.
	Expires Time
	// Priority is 0 for DefaultPriority, else 1 + the priority (0 to 9).
	Priority uint8
}

func msgRecordLen(m *Message, fk string, keys []string) int {
	n := 1 + 8 + 8 + 4 + 4 + 2 + len(fk) + 2 + 2 + len(m.OrderingKey) + len(m.Body)
	for _, k := range keys {
		n += 2 + len(k)
	}
	return n
}

func appendMsgRecord(b []byte, meta *MessageMeta, body []byte) []byte {
	v2 := meta.Expires != 0 || meta.Priority != 0
	if v2 {
		b = append(b, msgRecordVersion2)
	} else {
		b = append(b, recordVersion)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(meta.EnqueuedAt))
	b = binary.BigEndian.AppendUint64(b, uint64(meta.Due))
	b = binary.BigEndian.AppendUint32(b, meta.Weight)
	b = binary.BigEndian.AppendUint32(b, meta.PayloadSize)
	b = appendString16(b, meta.FairnessKey)
	b = binary.BigEndian.AppendUint16(b, uint16(len(meta.ThrottleKeys)))
	for _, k := range meta.ThrottleKeys {
		b = appendString16(b, k)
	}
	b = appendString16(b, meta.OrderingKey)
	if v2 {
		b = binary.BigEndian.AppendUint64(b, uint64(meta.Expires))
		b = append(b, meta.Priority)
	}
	return append(b, body...)
}

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// DecodeMessageRecord decodes the value of a message record: its metadata
// and its body, which aliases value. It fails on a value that is
// truncated or of an unknown version.
func DecodeMessageRecord(value []byte) (meta MessageMeta, body []byte, err error) {
	d := decoder{b: value, what: "message record"}
	v2 := d.msgVersion()
	meta.EnqueuedAt = Time(d.u64())
	meta.Due = Time(d.u64())
	meta.Weight = d.u32()
	meta.PayloadSize = d.u32()
	meta.FairnessKey = d.str16()
	n := int(d.u16())
	if n > 0 && d.err == nil {
		if n*2 > len(d.b)-d.off {
			d.fail("throttle key count %d", n)
		} else {
			meta.ThrottleKeys = make([]string, n)
			for i := range meta.ThrottleKeys {
				meta.ThrottleKeys[i] = d.str16()
			}
		}
	}
	meta.OrderingKey = d.str16()
	if v2 {
		meta.Expires = Time(d.u64())
		meta.Priority = d.u8()
		if d.err == nil && (meta.Priority > MaxPriority+1 || meta.Expires < 0) {
			d.off -= 9
			d.fail("expires %d, priority %d", meta.Expires, meta.Priority)
		}
	}
	if d.err != nil {
		return MessageMeta{}, nil, d.err
	}
	return meta, value[d.off:], nil
}

// MessageBody returns the body of a message record's value without
// decoding the rest, for the delivery path. body aliases value.
func MessageBody(value []byte) ([]byte, error) {
	d := decoder{b: value, what: "message record"}
	v2 := d.msgVersion()
	d.skip(8 + 8 + 4 + 4)
	d.skip16()
	n := int(d.u16())
	for i := 0; i < n && d.err == nil; i++ {
		d.skip16()
	}
	d.skip16()
	if v2 {
		d.skip(8 + 1)
	}
	if d.err != nil {
		return nil, d.err
	}
	return value[d.off:], nil
}

// A state record (value of s/st/…), written when a message first fails
// and deleted with the message or when a redrive resets it:
//
//	+--------+----------+-------------+---------+--------------------------+
//	| ver 1B | flags 1B | attempts 4B | due 8B  | last_error: len 2B, bytes |
//	+--------+----------+-------------+---------+--------------------------+
//
// flags bit 0: dead-lettered (the message is in its queue's DLQ); bit 1:
// the message no longer expires (a redrive took its TTL away). due is
// the end of a retry backoff, 0 for ready.
type stateRecord struct {
	dead     bool
	noTTL    bool
	attempts uint32
	due      Time
	lastErr  string
}

const (
	stateDead  = 1
	stateNoTTL = 2
)

func appendStateRecord(b []byte, r *stateRecord) []byte {
	b = append(b, recordVersion)
	var flags byte
	if r.dead {
		flags |= stateDead
	}
	if r.noTTL {
		flags |= stateNoTTL
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, r.attempts)
	b = binary.BigEndian.AppendUint64(b, uint64(r.due))
	return appendString16(b, cutReason(r.lastErr))
}

func decodeStateRecord(value []byte) (r stateRecord, err error) {
	d := decoder{b: value, what: "state record"}
	d.version()
	flags := d.u8()
	if flags&^(stateDead|stateNoTTL) != 0 {
		d.fail("flags %#x", flags)
	}
	r.dead = flags&stateDead != 0
	r.noTTL = flags&stateNoTTL != 0
	r.attempts = d.u32()
	r.due = Time(d.u64())
	r.lastErr = d.str16()
	d.end()
	return r, d.err
}

// A dedup record (value of s/idk/…):
//
//	+--------+--------------+-------------+
//	| ver 1B | message id 16B | expires 8B |
//	+--------+--------------+-------------+
func appendDedupRecord(b []byte, id [16]byte, expires Time) []byte {
	b = append(b, recordVersion)
	b = append(b, id[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(expires))
}

func decodeDedupRecord(value []byte) (id [16]byte, expires Time, err error) {
	d := decoder{b: value, what: "dedup record"}
	d.version()
	copy(id[:], d.take(16))
	expires = Time(d.u64())
	d.end()
	return id, expires, d.err
}

// A producer record (value of s/prd/<queue> 0x00 <producer>): the
// sequences below floor are forgotten, and the producer is forgotten at
// expires (Unix nanoseconds):
//
//	+--------+----------+------------+
//	| ver 1B | floor 8B | expires 8B |
//	+--------+----------+------------+
func appendProducerRecord(b []byte, floor uint64, expires Time) []byte {
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, floor)
	return binary.BigEndian.AppendUint64(b, uint64(expires))
}

func decodeProducerRecord(value []byte) (floor uint64, expires Time, err error) {
	d := decoder{b: value, what: "producer record"}
	d.version()
	floor = d.u64()
	expires = Time(d.u64())
	d.end()
	return floor, expires, d.err
}

// A run record (value of s/prd/<queue> 0x00 <producer> <seq>): sequences
// of the producer remembered by one Enqueue command, in increasing order,
// the last one the key's, each with its message's ID:
//
//	+--------+--------+------------+--------+------------+-----+
//	| ver 1B | seq 8B | message 16B | seq 8B | message 16B | ... |
//	+--------+--------+------------+--------+------------+-----+
func appendRunRecord(b []byte, run []pentry) []byte {
	b = append(b, recordVersion)
	for _, e := range run {
		b = binary.BigEndian.AppendUint64(b, e.seq)
		b = append(b, e.id[:]...)
	}
	return b
}

// decodeRunRecord decodes a run record whose key names last; entries
// must increase and end at last.
func decodeRunRecord(value []byte, last uint64) ([]pentry, error) {
	d := decoder{b: value, what: "run record"}
	d.version()
	if d.err == nil && ((len(value)-1)%(8+16) != 0 || len(value) == 1) {
		d.fail("%d bytes of entries, want a positive multiple of 24", len(value)-1)
	}
	var run []pentry
	for d.err == nil && d.off < len(value) {
		var e pentry
		e.seq = d.u64()
		copy(e.id[:], d.take(16))
		if len(run) > 0 && e.seq <= run[len(run)-1].seq {
			d.fail("sequence %d after %d", e.seq, run[len(run)-1].seq)
		}
		run = append(run, e)
	}
	if d.err == nil && run[len(run)-1].seq != last {
		d.fail("last sequence %d, key names %d", run[len(run)-1].seq, last)
	}
	return run, d.err
}

// A queue record (value of s/def/…), the QueueSpec as given (zeros mean
// the broker's defaults):
//
//	+--------+------------------+-----------------+-----------------+
//	| ver 1B | visibility 8B ns | max_attempts 4B | backoff_base 8B |
//	+--------+------------------+-----------------+-----------------+
//	| backoff_max 8B | dedup_window 8B | on_enqueue: len 4B, bytes |
//	| on_failure: len 4B, bytes                                    |
//	+-------------------------------------------------------------+
//	| policy: len 4B, bytes | latency_budget 4B | latency_idle 8B ns |
//	+-------------------------------------------------------------+
//	| tenant_separator: len 4B, bytes | cost_by_time 1B (0 or 1)   |
//	+-------------------------------------------------------------+
//	| message_ttl 8B ns | expired_action: len 4B, bytes            |
//	+-------------------------------------------------------------+
//	(the TTL row absent when both are zero; then cost_by_time absent
//	when false, the tenant row when both are zero, the policy row when
//	all five are: the defaults, as records were before each)
func appendQueueRecord(b []byte, spec *QueueSpec) []byte {
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(spec.VisibilityTimeout))
	b = binary.BigEndian.AppendUint32(b, spec.MaxAttempts)
	b = binary.BigEndian.AppendUint64(b, uint64(spec.BackoffBase))
	b = binary.BigEndian.AppendUint64(b, uint64(spec.BackoffMax))
	b = binary.BigEndian.AppendUint64(b, uint64(spec.DedupWindow))
	b = binary.BigEndian.AppendUint32(b, uint32(len(spec.OnEnqueue)))
	b = append(b, spec.OnEnqueue...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(spec.OnFailure)))
	b = append(b, spec.OnFailure...)
	ttl := spec.MessageTTL != 0 || spec.ExpiredAction != ""
	if spec.Policy == "" && spec.LatencyBudget == 0 && spec.LatencyIdle == 0 && spec.TenantSeparator == "" && !spec.CostByTime && !ttl {
		return b // as records were before policies: the defaults
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(spec.Policy)))
	b = append(b, spec.Policy...)
	b = binary.BigEndian.AppendUint32(b, spec.LatencyBudget)
	b = binary.BigEndian.AppendUint64(b, uint64(spec.LatencyIdle))
	if spec.TenantSeparator == "" && !spec.CostByTime && !ttl {
		return b // as records were before tenants
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(spec.TenantSeparator)))
	b = append(b, spec.TenantSeparator...)
	switch {
	case ttl:
		var c byte
		if spec.CostByTime {
			c = 1
		}
		b = append(b, c)
		b = binary.BigEndian.AppendUint64(b, uint64(spec.MessageTTL))
		b = binary.BigEndian.AppendUint32(b, uint32(len(spec.ExpiredAction)))
		b = append(b, spec.ExpiredAction...)
	case spec.CostByTime:
		b = append(b, 1)
	}
	return b
}

func decodeQueueRecord(name string, value []byte) (spec QueueSpec, err error) {
	d := decoder{b: value, what: "queue record"}
	d.version()
	spec.Name = name
	spec.VisibilityTimeout = d.duration()
	spec.MaxAttempts = d.u32()
	spec.BackoffBase = d.duration()
	spec.BackoffMax = d.duration()
	spec.DedupWindow = d.duration()
	spec.OnEnqueue = d.str32()
	spec.OnFailure = d.str32()
	if d.err == nil && d.off < len(d.b) {
		spec.Policy = d.str32()
		spec.LatencyBudget = d.u32()
		spec.LatencyIdle = d.duration()
		if e := CheckPolicy(spec.Policy); e != nil && d.err == nil {
			d.fail("%v", e)
		}
		if e := checkLatency(&spec); e != nil && d.err == nil {
			d.fail("%v", e)
		}
		if d.err == nil && d.off < len(d.b) {
			spec.TenantSeparator = d.str32()
			if d.err == nil && d.off < len(d.b) {
				c := d.u8()
				ttl := d.err == nil && d.off < len(d.b)
				if (c > 1 || c == 0 && !ttl) && d.err == nil {
					d.fail("cost_by_time %d", c)
				}
				spec.CostByTime = c == 1
				if ttl {
					spec.MessageTTL = d.duration()
					spec.ExpiredAction = d.str32()
					if e := checkTTL(&spec); e != nil && d.err == nil {
						d.fail("%v", e)
					}
					if d.err == nil && spec.MessageTTL == 0 && spec.ExpiredAction == "" {
						d.fail("message ttl written all zero")
					}
				}
			} else if spec.TenantSeparator == "" && d.err == nil {
				d.fail("empty tenant separator")
			}
			if e := checkTenants(&spec, spec.Policy); e != nil && d.err == nil {
				d.fail("%v", e)
			}
		}
		if d.err == nil && spec.Policy == "" && spec.LatencyBudget == 0 && spec.LatencyIdle == 0 && spec.TenantSeparator == "" && !spec.CostByTime && spec.MessageTTL == 0 && spec.ExpiredAction == "" {
			d.fail("settings written all zero") // written only when one is set
		}
	}
	d.end()
	return spec, d.err
}

// decoder reads big-endian fields; the first error sticks and later reads
// return zeros.
type decoder struct {
	b    []byte
	off  int
	what string
	err  error
}

var errTruncated = errors.New("truncated")

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: byte %d: %s", d.what, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("%s: byte %d: need %d more bytes, have %d: %w", d.what, d.off, n, len(d.b)-d.off, errTruncated)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) skip(n int) { d.take(n) }

func (d *decoder) version() {
	if v := d.u8(); d.err == nil && v != recordVersion {
		d.off--
		d.fail("unknown version %d", v)
	}
}

// msgVersion reads a message record's version, 1 or 2, and reports
// whether it is 2.
func (d *decoder) msgVersion() bool {
	v := d.u8()
	if d.err == nil && v != recordVersion && v != msgRecordVersion2 {
		d.off--
		d.fail("unknown version %d", v)
	}
	return v == msgRecordVersion2
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) duration() time.Duration {
	v := int64(d.u64())
	if v < 0 {
		d.fail("negative duration %d", v)
		return 0
	}
	return time.Duration(v)
}

func (d *decoder) str16() string { return string(d.take(int(d.u16()))) }

func (d *decoder) skip16() { d.take(int(d.u16())) }

func (d *decoder) str32() string { return string(d.take(int(d.u32()))) }

func (d *decoder) end() {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
}

// formatID formats a message ID as a UUID for error messages.
func formatID(id [16]byte) string {
	const hex = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j] = hex[c>>4]
		b[j+1] = hex[c&0xf]
		j += 2
	}
	return string(b[:])
}
