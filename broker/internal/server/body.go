package server

import (
	"encoding/binary"
	"errors"

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
// It is read back from storage for each delivery.

const bodyVersion = 1

var errBody = errors.New("server: malformed message body")

// encodeBody appends the body of a message to dst.
func encodeBody(dst []byte, headers []wire.MessageHeader, payload []byte) []byte {
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

// bodySize is the length encodeBody will produce.
func bodySize(headers []wire.MessageHeader, payload []byte) int {
	n := 3 + len(payload)
	for _, h := range headers {
		n += 4 + len(h.Key) + len(h.Value)
	}
	return n
}

// decodeBody returns a body's headers and payload; payload aliases b.
func decodeBody(b []byte) ([]wire.MessageHeader, []byte, error) {
	if len(b) < 3 || b[0] != bodyVersion {
		return nil, nil, errBody
	}
	n := int(binary.BigEndian.Uint16(b[1:]))
	b = b[3:]
	if n*4 > len(b) {
		return nil, nil, errBody
	}
	var hs []wire.MessageHeader
	if n > 0 {
		hs = make([]wire.MessageHeader, n)
	}
	for i := range hs {
		var k, v string
		var ok bool
		if k, b, ok = readStr(b); !ok {
			return nil, nil, errBody
		}
		if v, b, ok = readStr(b); !ok {
			return nil, nil, errBody
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
