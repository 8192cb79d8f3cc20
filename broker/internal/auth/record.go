package auth

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The stored record of an API key, the value at KeyPrefix+<key ID>. Integers
// are big-endian; the key ID is not repeated inside.
//
//	+-----------+----------------+-------------+--------+------+
//	| version 1 | created_ms 8   | sha256 32   | nlen 2 | name |
//	+-----------+----------------+-------------+--------+------+
//	| count 2   | count × ( kind 1 | plen 2 | pattern )        |
//	+-----------+------------------------------------------------+
//
// version is recordVersion; created_ms is the creation time in Unix
// milliseconds; sha256 is the hash of the secret; name and patterns are
// UTF-8. A decoder refuses any other version, short or trailing bytes, and
// names or permissions that Create and SetACL would refuse.
const recordVersion = 1

const recordFixed = 1 + 8 + sha256.Size + 2 // bytes before the name

var errShort = errors.New("truncated")

// encodeRecord returns the stored form of k.
func encodeRecord(k *apiKey) []byte {
	n := recordFixed + len(k.name) + 2
	for _, p := range k.perms {
		n += 3 + len(p.Pattern)
	}
	b := make([]byte, 0, n)
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(k.created.UnixMilli()))
	b = append(b, k.hash[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.name)))
	b = append(b, k.name...)
	return appendPerms(b, k.perms)
}

// appendPerms appends the count and the permissions of an ACL, in the
// record's layout.
func appendPerms(b []byte, perms []Permission) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(perms)))
	for _, p := range perms {
		b = append(b, byte(p.Kind))
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.Pattern)))
		b = append(b, p.Pattern...)
	}
	return b
}

// decodeRecord parses the stored record of key id. The error names the key.
func decodeRecord(id string, b []byte) (*apiKey, error) {
	k, err := parseRecord(b)
	if err != nil {
		return nil, fmt.Errorf("key %s: corrupt record (%d bytes): %w", id, len(b), err)
	}
	k.id = id
	return k, nil
}

func parseRecord(b []byte) (*apiKey, error) {
	if len(b) < recordFixed {
		return nil, errShort
	}
	if b[0] != recordVersion {
		return nil, fmt.Errorf("version %d, want %d", b[0], recordVersion)
	}
	ms := binary.BigEndian.Uint64(b[1:9])
	if ms > 1<<62 {
		return nil, fmt.Errorf("creation time %d ms out of range", ms)
	}
	k := &apiKey{created: time.UnixMilli(int64(ms)).UTC()}
	copy(k.hash[:], b[9:9+sha256.Size])
	b = b[recordFixed-2:]

	name, b, err := readString(b)
	if err != nil {
		return nil, err
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	k.name = name
	if k.perms, err = parsePerms(b); err != nil {
		return nil, err
	}
	return k, nil
}

// parsePerms parses what appendPerms wrote, to the end of b, and checks
// it as SetACL would.
func parsePerms(b []byte) ([]Permission, error) {
	if len(b) < 2 {
		return nil, errShort
	}
	count := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if count > MaxPermissions || count*3 > len(b) {
		return nil, fmt.Errorf("%d permissions in %d bytes", count, len(b))
	}
	var perms []Permission
	if count > 0 {
		perms = make([]Permission, count)
	}
	for i := range perms {
		if len(b) < 1 {
			return nil, errShort
		}
		kind := Kind(b[0])
		var (
			pattern string
			err     error
		)
		if pattern, b, err = readString(b[1:]); err != nil {
			return nil, err
		}
		perms[i] = Permission{Kind: kind, Pattern: pattern}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	if err := validatePermissions(perms); err != nil {
		return nil, err
	}
	return perms, nil
}

// readString reads a u16-length-prefixed string from b and returns the rest.
func readString(b []byte) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, errShort
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, errShort
	}
	return string(b[2 : 2+n]), b[2+n:], nil
}
