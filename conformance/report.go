package conformance

import (
	"fmt"
	"strings"
)

// A Mismatch is one place where the side under test departed from a
// transcript.
type Mismatch struct {
	// Transcript is the transcript's name and Line the line of the block
	// that did not match (0 when the mismatch is after the last block).
	Transcript string
	Line       int
	// What says what went wrong, such as "server frame differs".
	What string
	// Want and Got are the expected and the actual frame, in notation
	// (or hex); either may be empty.
	Want, Got string
	// Fields lists the fields whose values differ, "path: want X, got Y".
	Fields []string
	// Bytes locates the difference in the encoded bytes: the first
	// differing byte and the field holding it, then every differing field
	// with its byte offsets.
	Bytes []string
}

// String formats the mismatch over several lines: where, what, the
// differing fields and bytes, then the expected and the actual frame.
func (m *Mismatch) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s.txt:%d: %s", m.Transcript, m.Line, m.What)
	for _, f := range m.Fields {
		b.WriteString("\n    field " + f)
	}
	for _, l := range m.Bytes {
		b.WriteString("\n    " + l)
	}
	if m.Want != "" {
		b.WriteString("\n  want: " + indent(m.Want, "        "))
	}
	if m.Got != "" {
		b.WriteString("\n  got:  " + indent(m.Got, "        "))
	}
	return b.String()
}

func indent(s, pad string) string {
	return strings.ReplaceAll(s, "\n", "\n"+pad)
}

// A Failure is a replay that departed from its transcript: every mismatch
// found, in order. The replayers return it as their error.
type Failure struct {
	Transcript string
	// Target is the replayer: core, broker, client, or codec for stale
	// hex.
	Target     string
	Mismatches []*Mismatch
}

// Error lists every mismatch, each formatted by Mismatch.String.
func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance: %s (%s): %d mismatch", f.Transcript, f.Target, len(f.Mismatches))
	if len(f.Mismatches) != 1 {
		b.WriteString("es")
	}
	for _, m := range f.Mismatches {
		b.WriteString("\n" + m.String())
	}
	return b.String()
}

func fieldLines(ds []fieldDiff) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		path := d.path
		if path == "" {
			path = "(frame)"
		}
		out[i] = fmt.Sprintf("%s: want %s, got %s", path, d.want, d.got)
	}
	return out
}
