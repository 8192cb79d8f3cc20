package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MaxFrameSize is the largest frame body a transport writes or reads, in
// bytes (64 MiB). A message whose entry would not fit in one frame goes
// in chunk frames (MaxMessageSize); a frame announcing a longer body
// closes the connection.
const MaxFrameSize = 64 << 20

// MaxMessageSize is the largest message a transport sends or receives,
// in bytes (1 GiB): a message whose entry exceeds MaxFrameSize (a
// snapshot of a large queue) goes in chunk frames, which the reader puts
// back together in memory.
const MaxMessageSize = 1 << 30

const (
	// chunkGroup is the group of a chunk entry: a frame holding one, and
	// nothing else, carries the next bytes of an entry too large for a
	// frame, which ends when its own group and size say it does.
	chunkGroup = ^uint64(0)
	// chunkSize is the bytes of a large entry each chunk frame carries.
	chunkSize = 16 << 20
	// frameHeaderLen is the frame's length prefix.
	frameHeaderLen = 4
	// maxFrameEntries bounds the entries of one frame, so that a body of
	// tiny entries cannot make the reader allocate a message for every two
	// bytes of a 64 MiB frame. The writer cuts its frames there.
	maxFrameEntries = 1 << 14

	// helloMagic opens the hello of a peer connection, streamMagic that of
	// a stream connection (stream.go); both are 8 bytes.
	helloMagic   = "FILAPEER"
	streamMagic  = "FILASNAP"
	helloVersion = 1
	// helloFixedLen is the hello up to the cluster ID: magic, version,
	// node ID, cluster ID length.
	helloFixedLen = len(helloMagic) + 1 + 8 + 1
	// maxClusterID is the longest cluster ID, in bytes.
	maxClusterID = 255
)

// errBadHello is wrapped by readHello's errors for bytes that are not a
// hello of this version, as opposed to the connection's I/O errors.
var errBadHello = errors.New("not a fila peer hello")

// appendHello appends the peer hello of node in cluster to b. cluster is
// at most maxClusterID bytes (New checks).
func appendHello(b []byte, node uint64, cluster string) []byte {
	return appendHelloOf(b, helloMagic, node, cluster)
}

// appendHelloOf appends the hello of node in cluster to b, opening with
// magic: helloMagic or streamMagic.
func appendHelloOf(b []byte, magic string, node uint64, cluster string) []byte {
	b = append(b, magic...)
	b = append(b, helloVersion)
	b = binary.BigEndian.AppendUint64(b, node)
	b = append(b, byte(len(cluster)))
	return append(b, cluster...)
}

// readHello reads one peer hello from r and returns the node ID and the
// cluster ID it carries. Its error wraps errBadHello if the magic is not
// helloMagic or the version is wrong, or is r's error (io.ErrUnexpectedEOF
// for a hello cut short).
func readHello(r io.Reader) (node uint64, cluster string, err error) {
	magic, node, cluster, err := readAnyHello(r)
	if err == nil && magic != helloMagic {
		return 0, "", fmt.Errorf("%w: magic %q", errBadHello, magic)
	}
	return node, cluster, err
}

// readAnyHello reads one hello from r, of a peer connection or of a stream
// connection, and returns its magic (helloMagic or streamMagic), node ID
// and cluster ID. Its errors are readHello's.
func readAnyHello(r io.Reader) (magic string, node uint64, cluster string, err error) {
	var fixed [helloFixedLen]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return "", 0, "", err
	}
	magic = string(fixed[:len(helloMagic)])
	if magic != helloMagic && magic != streamMagic {
		return "", 0, "", fmt.Errorf("%w: magic %q", errBadHello, magic)
	}
	if v := fixed[len(helloMagic)]; v != helloVersion {
		return "", 0, "", fmt.Errorf("%w: version %d, want %d", errBadHello, v, helloVersion)
	}
	node = binary.BigEndian.Uint64(fixed[len(helloMagic)+1:])
	id := make([]byte, fixed[helloFixedLen-1])
	if _, err := io.ReadFull(r, id); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", 0, "", err
	}
	return magic, node, string(id), nil
}

// entryLen is the length of a frame entry holding a message of size bytes.
func entryLen(group uint64, size int) int {
	return uvarintLen(group) + uvarintLen(uint64(size)) + size
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// appendEntry appends the frame entry of m, a message of group whose
// protobuf encoding is size bytes (proto.Size), to b. It returns an error,
// and b with a partial entry, if m does not marshal or no longer has that
// size (the caller changed it after Send).
func appendEntry(b []byte, group uint64, m *pb.Message, size int) ([]byte, error) {
	b = binary.AppendUvarint(b, group)
	b = binary.AppendUvarint(b, uint64(size))
	start := len(b)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b, fmt.Errorf("marshal message: %w", err)
	}
	if n := len(b) - start; n != size {
		return b, fmt.Errorf("message changed after Send: %d bytes, was %d", n, size)
	}
	return b, nil
}

// decodeBatch decodes a frame's body and appends its messages to dst, in
// order. Each message is newly allocated and shares no memory with body,
// which the caller may reuse. It returns an error, and dst as it was, if an
// entry's group or size is not a valid uvarint, its size runs past the end
// of body, its bytes are not a raftpb.Message, or body holds more than
// maxFrameEntries entries. An empty body is an empty batch. The messages
// of one call share one allocation, which lives while any of them does.
func decodeBatch(body []byte, dst []Message) ([]Message, error) {
	// First pass: check the framing and count the entries, so that a bad
	// frame costs no allocation and a good one one for all its messages
	// (besides what unmarshaling them allocates).
	n := 0
	for rest := body; len(rest) > 0; n++ {
		if n == maxFrameEntries {
			return dst, fmt.Errorf("batch of more than %d entries", maxFrameEntries)
		}
		group, _, m, err := nextEntry(rest)
		if err != nil {
			return dst, fmt.Errorf("batch entry %d: %w", n, err)
		}
		if group == chunkGroup {
			return dst, fmt.Errorf("batch entry %d: a chunk among other entries", n)
		}
		rest = rest[m:]
	}
	if n == 0 {
		return dst, nil
	}
	msgs := make([]pb.Message, n)
	out := dst
	for i, rest := 0, body; len(rest) > 0; i++ {
		group, data, m, _ := nextEntry(rest)
		if err := proto.Unmarshal(data, &msgs[i]); err != nil {
			return dst, fmt.Errorf("batch entry %d (group %d): %w", i, group, err)
		}
		out = append(out, Message{Group: group, Msg: &msgs[i]})
		rest = rest[m:]
	}
	return out, nil
}

// nextEntry splits the entry at the start of b into its group and its
// message's bytes, and returns the entry's length.
func nextEntry(b []byte) (group uint64, data []byte, n int, err error) {
	group, g := binary.Uvarint(b)
	if g <= 0 {
		return 0, nil, 0, errors.New("bad group uvarint")
	}
	size, s := binary.Uvarint(b[g:])
	if s <= 0 {
		return 0, nil, 0, errors.New("bad size uvarint")
	}
	rest := b[g+s:]
	if size > uint64(len(rest)) {
		return 0, nil, 0, fmt.Errorf("message of %d bytes, %d left", size, len(rest))
	}
	return group, rest[:size], g + s + int(size), nil
}

// reassembly puts a large entry back together from the chunk entries of
// consecutive frames.
type reassembly struct {
	buf []byte
}

// add appends a chunk entry's bytes. It returns the whole entry (group,
// size, message; the reassembly's to reuse after the call) once its last
// chunk has come, or nil while more are due. It fails when the chunks
// run past the entry's end or the entry exceeds MaxMessageSize.
func (r *reassembly) add(chunk []byte) ([]byte, error) {
	if len(r.buf)+len(chunk) > MaxMessageSize+2*binary.MaxVarintLen64 {
		return nil, fmt.Errorf("chunked message over the limit of %d bytes", MaxMessageSize)
	}
	r.buf = append(r.buf, chunk...)
	_, g := binary.Uvarint(r.buf)
	if g == 0 {
		return nil, nil // the group's uvarint is not whole yet
	}
	if g < 0 {
		return nil, errors.New("chunked message: bad group uvarint")
	}
	size, s := binary.Uvarint(r.buf[g:])
	if s == 0 {
		return nil, nil
	}
	if s < 0 || size > MaxMessageSize {
		return nil, fmt.Errorf("chunked message: bad size, or over the limit of %d bytes", MaxMessageSize)
	}
	total := uint64(g+s) + size
	switch {
	case uint64(len(r.buf)) < total:
		return nil, nil
	case uint64(len(r.buf)) > total:
		return nil, fmt.Errorf("chunked message of %d bytes followed by %d more", total, uint64(len(r.buf))-total)
	}
	out := r.buf
	r.buf = nil
	return out, nil
}

// chunkEntry returns the chunk entry of body's single entry, when it is
// one: a frame holding a chunk holds nothing else.
func chunkEntry(body []byte) (chunk []byte, ok bool, err error) {
	group, data, n, err := nextEntry(body)
	if err != nil || group != chunkGroup {
		return nil, false, nil // decodeBatch reports the error
	}
	if n != len(body) {
		return nil, false, errors.New("a chunk entry shares its frame")
	}
	return data, true, nil
}
