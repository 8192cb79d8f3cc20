// Package conformance checks implementations of the Fila wire protocol
// against recorded byte transcripts.
//
// A transcript (testdata/<area>/<case>.txt) is one conversation between a
// client and a broker: the frames each side sent, in order, each written
// as its decoded notation above its bytes in hex, with $name placeholders
// for the values that differ from run to run (message IDs, leases,
// timestamps, node IDs), bound when first seen and matched where reused.
// docs/conformance.md describes the format.
//
// One corpus, three replayers:
//
//   - ReplayCore feeds the broker's side into the sans-io client core
//     (sdk/core) and checks the bytes it writes and the events it reports;
//   - ReplayBroker plays the client's side to a live broker and checks its
//     replies, matching the frames of each exchange as a set and
//     deliveries message by message;
//   - ServeClient plays the broker's side, as a fake broker, to any client
//     that connects, and reports every byte it sends that differs from the
//     transcript, so a client in any language can be checked without a
//     broker.
//
// Record writes transcripts: it runs a Scenario (Go code driving the Go
// SDK, or raw frames for bad input; package scenario holds the corpus's)
// against a live broker and records both directions. The command
// fila-conformance runs all of this from a shell.
package conformance
