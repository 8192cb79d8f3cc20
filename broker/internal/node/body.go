package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// A message body is what the scheduler stores opaquely for a message: its
// headers and payload, encoded as
//
//	+---------+---------------+---------------------------------------+---------+
//	| ver 1B  | header count  | per header: u16 len, key, u16 len, val | payload |
//	|  = 1    | u16           |                                       | rest    |
//	+---------+---------------+---------------------------------------+---------+
//
// It is the tail of the message record (sched/record.go), read back from
// storage for each delivery and each on_failure hook. This package owns
// the format: EncodeBody writes it, and ReadMessage reads a stored record
// back in one step.

const bodyVersion = 1

// ErrBody is wrapped by the errors of a body that does not decode.
var ErrBody = errors.New("malformed message body")

// EncodeBody appends the body of a message (headers, each key and value
// at most 65535 bytes, and payload) to dst.
func EncodeBody(dst []byte, headers []wire.MessageHeader, payload []byte) []byte {
	dst = append(dst, bodyVersion)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(headers)))
	for _, h := range headers {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return append(dst, payload...)
}

// BodySize is the length in bytes EncodeBody will produce.
func BodySize(headers []wire.MessageHeader, payload []byte) int {
	n := 3 + len(payload)
	for _, h := range headers {
		n += 4 + len(h.Key) + len(h.Value)
	}
	return n
}

// DecodeBody returns a body's headers and payload; payload aliases b. It
// fails with ErrBody.
func DecodeBody(b []byte) ([]wire.MessageHeader, []byte, error) {
	if len(b) < 3 || b[0] != bodyVersion {
		return nil, nil, ErrBody
	}
	n := int(binary.BigEndian.Uint16(b[1:]))
	b = b[3:]
	if n*4 > len(b) {
		return nil, nil, ErrBody
	}
	var hs []wire.MessageHeader
	if n > 0 {
		hs = make([]wire.MessageHeader, n)
	}
	for i := range hs {
		var k, v string
		var ok bool
		if k, b, ok = readStr(b); !ok {
			return nil, nil, ErrBody
		}
		if v, b, ok = readStr(b); !ok {
			return nil, nil, ErrBody
		}
		hs[i] = wire.MessageHeader{Key: k, Value: v}
	}
	return hs, b, nil
}

func readStr(b []byte) (string, []byte, bool) {
	if len(b) < 2 {
		return "", nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, false
	}
	return string(b[2 : 2+n]), b[2+n:], true
}

// decodeRecord reads a stored message record's headers and payload.
func decodeRecord(record []byte) ([]wire.MessageHeader, []byte, error) {
	body, err := sched.MessageBody(record)
	if err != nil {
		return nil, nil, err
	}
	headers, payload, err := DecodeBody(body)
	if err != nil {
		return nil, nil, fmt.Errorf("message record: %w", err)
	}
	return headers, payload, nil
}

// bodyPool recycles the buffers that hold an Enqueue batch's encoded
// bodies (*[]byte). Each buffer lives from the frame's decoding until the
// scheduler has written the bodies into a storage group, then returns here.
var bodyPool sync.Pool

// maxPooledBody bounds the buffers bodyPool keeps, in bytes.
const maxPooledBody = 4 << 20

// GetBodyBuf returns an empty buffer of capacity at least n bytes, from a
// pool; give it back with PutBodyBuf.
func GetBodyBuf(n int) *[]byte {
	if p, _ := bodyPool.Get().(*[]byte); p != nil && cap(*p) >= n {
		return p
	}
	b := make([]byte, 0, n)
	return &b
}

// PutBodyBuf gives p back to the pool unless it is too large to keep.
func PutBodyBuf(p *[]byte) {
	if cap(*p) <= maxPooledBody {
		bodyPool.Put(p)
	}
}
