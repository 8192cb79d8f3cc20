package wire

import (
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestProtocolDocExamples checks the byte examples in docs/protocol.md
// against the codec: the hex before each line's comment is the frame.
func TestProtocolDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)## Example\n.*").FindString(string(doc))
	var frames [][]byte
	for _, block := range regexp.MustCompile("(?s)```\n(.*?)```").FindAllStringSubmatch(blocks, -1) {
		var hexText strings.Builder
		for _, line := range strings.Split(block[1], "\n") {
			// Hex groups come first; the comment starts at the first
			// token that is not hex.
			for _, tok := range strings.Fields(line) {
				if _, err := hex.DecodeString(tok); err != nil || len(tok)%2 != 0 {
					break
				}
				hexText.WriteString(tok)
			}
		}
		b, err := hex.DecodeString(hexText.String())
		if err != nil {
			t.Fatalf("example %q: %v", block[1], err)
		}
		frames = append(frames, b)
	}
	want := [][]byte{
		AppendFrame(nil, 1, &Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "x"}),
		AppendFrame(nil, 2, &Enqueue{Messages: []EnqueueMessage{{Queue: "q", Payload: []byte("hi"), FairnessKey: "t"}}}),
	}
	if len(frames) != len(want) {
		t.Fatalf("found %d examples; want %d", len(frames), len(want))
	}
	for i := range want {
		if hex.EncodeToString(frames[i]) != hex.EncodeToString(want[i]) {
			t.Errorf("example %d:\n doc   %x\n codec %x", i+1, frames[i], want[i])
		}
	}
}
