// Package peer carries the Raft messages of every group between the nodes
// of a cluster: the transport under the cluster's Raft driver.
//
// # Connections
//
// Two nodes share one TCP connection (TLS when configured), which carries
// the messages of every group in both directions; only streams (below)
// take connections of their own. The node with the lower
// ID dials and the other accepts, so the pair never races to two
// connections. The dialer dials as soon as it learns of the peer (New,
// SetPeer) and redials whenever the connection breaks, after a backoff of
// 50 ms doubling to 1 s, reset by a successful handshake. The acceptor
// only waits: a new connection from a peer replaces the one it had.
//
// A connection opens with a hello from each side, the dialer's first:
//
//	+-------------------+------------+------------+-----------+---------------------+
//	| magic "FILAPEER"  | version 1B | node ID 8B | length 1B | cluster ID (length) |
//	+-------------------+------------+------------+-----------+---------------------+
//
// The node ID is big-endian; the version is 1. The acceptor closes the
// connection, logging why, if the magic or the version is wrong, if the
// cluster ID differs from its own, or if the dialer's ID is not one of its
// peers with an ID below its own; otherwise it answers with its own hello.
// The dialer in turn closes the connection unless the answer names the
// cluster and the node it meant to reach. A node of another cluster or a
// stray client thus never gets a message in. The hello is not a secret:
// with TLS (Config.TLS, mutual when it requires client certificates) the
// certificates authenticate the nodes and the hello only checks that they
// belong to the same cluster.
//
// # Frames
//
// After the hellos, each side writes frames, and frames only:
//
//	+------------------+----------------------------------+
//	| length 4B (BE)   | body: entries, back to back      |
//	+------------------+----------------------------------+
//	entry: group uvarint | size uvarint | raftpb.Message (protobuf, size bytes)
//
// The length counts the body's bytes, at most MaxFrameSize; a body holds
// at most 16384 entries. A frame that breaks either bound, or whose body
// does not decode, closes the connection.
//
// A message whose entry is larger than a frame (a snapshot of a queue
// with a large backlog) goes in chunk frames: each holds one entry of
// group 2^64-1 whose bytes are the next 16 MiB of the large entry. The
// reader appends them until they hold a whole entry, which it decodes as
// if it had come in a frame of its own; a chunk that runs past that
// entry's end, or an entry over MaxMessageSize (1 GiB), closes the
// connection. Nothing else is written between the chunks of one entry.
// Larger data goes in a stream.
//
// # Sending and loss
//
// Send never blocks. It appends the messages to the peer's queue, bounded
// at 4096 messages and 64 MiB, and one writer goroutine per peer takes
// everything queued at once and writes it as one frame (or a few, if it
// exceeds a frame's bounds) with one write. Messages within one connection
// arrive in the order they were sent; messages of a connection that
// broke may arrive interleaved with the first of the next.
//
// Messages are dropped, never retried, when the peer has no connection,
// when its queue is full, when the peer is isolated (below), when a single
// message is larger than MaxMessageSize, and when a write fails. Raft tolerates
// the loss. Each drop burst (drops with no successful write between them)
// calls Config.Unreachable once, so that the driver can call
// RawNode.ReportUnreachable; a snapshot message (MsgSnap) calls
// Config.SnapshotStatus once: failed when dropped, succeeded once written
// to the connection. Callbacks run on one goroutine of the transport,
// never inside Send, and never after Close has returned.
//
// Every batch read from a peer goes to Config.Handler on that connection's
// reader goroutine. Calls for one peer never overlap.
//
// # Streams
//
// A message with bulk data, such as the snapshot of a queue with a backlog
// of many GiB, goes by SendStream on a connection of its own instead: on
// the shared connection it would hold up the heartbeats and appends
// behind it for as long as its writing takes, and its reader would hold
// it whole in memory. A stream connection carries one message and its
// data, which Config.Stream reads as it arrives, and one reply back.
//
// Either node dials, whatever the IDs. The hellos are those of a peer
// connection with the magic "FILASNAP", the answer's too, and the
// acceptor checks the dialer's as a peer's (the cluster ID, a known peer)
// but for the rule that the lower ID dials; the dialer checks the answer
// as a peer's. Then the dialer writes a header frame, data frames and an
// end frame:
//
//	header: length 4B (BE) | group uvarint | raftpb.Message (protobuf)
//	data:   length 4B (BE), 1 to 1 MiB | data bytes
//	end:    length 4B = 0 | CRC-32C (Castagnoli) of the data 4B (BE) | data length uvarint
//
// The header's length counts the group's and the message's bytes, at most
// MaxFrameSize. The data is cut into frames of up to 1 MiB as it is written,
// and its reader gets io.EOF only once the end frame's checksum and
// length matched. The acceptor then writes its handler's reply and
// closes:
//
//	status 1B (0 accepted, 1 refused) | reason length uvarint (at most 4096) | reason
//
// The acceptor reads the header within 10 s and every later read within
// 30 s. The dialer writes each frame within 10 s, writes data it has held
// for 5 s in a frame not yet full, so that data written slowly still
// arrives, and waits for the reply for a minute. A data frame over 1 MiB,
// a header over MaxFrameSize or not a group and a message, a uvarint not
// in its shortest form or over 64 bits, a bad status, and a reason over
// 4096 bytes close the connection and are logged at Warn. Data whose
// checksum or length does not match fails the handler's read, and its
// refusal goes back. A connection that fails, Close or RemovePeer at
// either end, and the isolation of the peer at either end (checked at
// every frame) abort the stream without a reply: SendStream fails and
// the handler's read fails.
//
// # Fault injection
//
// Isolate drops every message to and from the given peers, in both
// directions, until Heal, without closing the connections: a partition
// that TCP has not noticed. Streams to and from them fail at their next
// frame. The end-to-end tests reach it through an admin hook to cut a
// cluster apart.
package peer
