package rtconf

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A ChangeOp is what a Change does.
type ChangeOp uint8

// The changes to the entries.
const (
	// ChangeSet sets a key to a value.
	ChangeSet ChangeOp = 1
	// ChangeDelete removes a key.
	ChangeDelete ChangeOp = 2
)

// A Change is one change to the runtime config, as data: what Set and
// Delete propose and Apply applies.
type Change struct {
	Op    ChangeOp
	Key   string
	Value string // ChangeSet's; empty for ChangeDelete
}

// changeVersion is the first byte of an encoded Change.
const changeVersion = 1

// AppendTo appends the encoding of c to b: version (1 byte), op (1 byte),
// the key's length (u16) and bytes, then, for ChangeSet, the value's
// length (u32) and bytes. Integers are big-endian.
func (c *Change) AppendTo(b []byte) []byte {
	b = append(b, changeVersion, byte(c.Op))
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.Key)))
	b = append(b, c.Key...)
	if c.Op == ChangeSet {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.Value)))
		b = append(b, c.Value...)
	}
	return b
}

var errShortChange = errors.New("config change: truncated")

// DecodeChange decodes what AppendTo wrote. It fails on any other version
// or op, short or trailing bytes, an invalid key, and a value Set would
// refuse for its form (length, UTF-8).
func DecodeChange(b []byte) (Change, error) {
	if len(b) < 4 {
		return Change{}, errShortChange
	}
	if b[0] != changeVersion {
		return Change{}, fmt.Errorf("config change: version %d, want %d", b[0], changeVersion)
	}
	c := Change{Op: ChangeOp(b[1])}
	n := int(binary.BigEndian.Uint16(b[2:]))
	b = b[4:]
	if len(b) < n {
		return Change{}, errShortChange
	}
	c.Key, b = string(b[:n]), b[n:]
	if err := ValidateKey(c.Key); err != nil {
		return Change{}, fmt.Errorf("config change: %w", err)
	}
	switch c.Op {
	case ChangeSet:
		if len(b) < 4 {
			return Change{}, errShortChange
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(len(b)) < uint64(n) {
			return Change{}, errShortChange
		}
		c.Value, b = string(b[:n]), b[n:]
		if err := validateValue(c.Key, c.Value); err != nil {
			return Change{}, fmt.Errorf("config change: %w", err)
		}
	case ChangeDelete:
	default:
		return Change{}, fmt.Errorf("config change: op %d", c.Op)
	}
	if len(b) != 0 {
		return Change{}, fmt.Errorf("config change: %d trailing bytes", len(b))
	}
	return c, nil
}
