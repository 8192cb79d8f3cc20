package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A Transcript is one recorded conversation between a client and a broker,
// parsed from its file. See docs/conformance.md for the format; in short:
//
//	# What the case shows.
//	broker FILA_QUEUE_VISIBILITY_TIMEOUT=1s
//
//	client
//	Enqueue req=2 messages=[{queue="q" payload="hi"}]
//	----
//	00000025 0101 0000 00000002
//	00000001
//	  0000001d 0001 71 00000000 00000002 6869 ...
//
//	server
//	EnqueueResult req=2 results=[{id=$id1}]
//	----
//	...
//
// Blocks are separated by blank lines. A block is a directive line, input
// lines, and after ---- its output lines. For a frame the input is its
// decoded notation and the output its bytes in hex, which -rewrite
// regenerates from the notation with the codec.
type Transcript struct {
	// Name is the file's path under the corpus root without ".txt", such
	// as "hotpath/enqueue_partial".
	Name string
	// Path is the file the transcript was read from.
	Path string
	// Doc is the comment at the top of the file, without its # marks.
	Doc string
	// Targets lists the replayers the transcript applies to ("core",
	// "broker", "client"); all of them unless a targets directive says
	// otherwise.
	Targets []string
	// BrokerEnv is the environment (KEY=value) the broker must be started
	// with, from the broker directive.
	BrokerEnv []string
	// Fresh says the transcript needs a broker no other transcript has
	// used (its answers depend on everything the broker holds).
	Fresh bool
	// Nodes are the nodes of a cluster conversation, from the nodes
	// directive: the client speaks to several, one connection each, and
	// each frame block names its node (@name). Empty for one connection.
	Nodes []Node
	// Blocks are the blocks in file order.
	Blocks []*Block

	tail []string // comment and blank lines after the last block
}

// A Node is one node of a cluster conversation.
type Node struct {
	// Name is how blocks name it (client @a), Addr its client address
	// (host:port), as leader hints give it.
	Name, Addr string
}

// A Block is one block of a transcript.
type Block struct {
	// Line is the line number of the directive, from 1.
	Line int
	// Directive is the first word of the directive line: client, server,
	// events, tick, targets, broker or nodes.
	Directive string
	// Args are the other words of the directive line.
	Args []string
	// Node is the node of a frame or close block of a cluster
	// conversation (its @name argument); "" for the first node.
	Node string
	// Input are the lines between the directive and the ---- line.
	Input []string
	// Output are the lines after the ---- line.
	Output []string

	pre    []string // comment and blank lines before the block
	hasSep bool

	kind     blockKind
	optional bool          // a server frame the broker may leave out
	frame    *framePattern // frames: the decoded notation
	raw      []byte        // frames and raw blocks: the bytes from the hex
	dur      time.Duration // tick
}

type blockKind uint8

const (
	bClientFrame blockKind = iota + 1
	bServerFrame
	bClientRaw
	bServerRaw
	bClientClose
	bServerClose
	bEvents
	bTick
	bHeader // targets, broker
)

func (b *Block) isServer() bool {
	return b.kind == bServerFrame || b.kind == bServerRaw || b.kind == bServerClose
}

// Applies reports whether the transcript is meant for target ("core",
// "broker" or "client").
func (t *Transcript) Applies(target string) bool {
	return len(t.Targets) == 0 || slices.Contains(t.Targets, target)
}

// ReadFile parses the transcript at path; name is its corpus name.
func ReadFile(path, name string) (*Transcript, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	t.Path = path
	return t, nil
}

// A ParseError reports a malformed transcript.
type ParseError struct {
	Name string
	Line int
	Err  error
}

// Error returns "conformance: <name>.txt:<line>[:<col>]: <problem>".
func (e *ParseError) Error() string {
	var ne *NotationError
	if errors.As(e.Err, &ne) {
		return fmt.Sprintf("conformance: %s.txt:%d:%d: %s", e.Name, ne.Line, ne.Col, ne.Msg)
	}
	return fmt.Sprintf("conformance: %s.txt:%d: %v", e.Name, e.Line, e.Err)
}

// Unwrap returns the underlying error, a *NotationError for bad notation.
func (e *ParseError) Unwrap() error { return e.Err }

// Parse parses a transcript. It checks the notation of every frame and the
// hex of every frame and raw block, but not that the hex is the encoding
// of the notation: CheckHex does.
func Parse(name string, data []byte) (*Transcript, error) {
	t := &Transcript{Name: name}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	var pre []string
	docDone := false
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			if !docDone && strings.HasPrefix(l, "#") {
				t.Doc += strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ") + "\n"
			} else if strings.TrimSpace(l) == "" && t.Doc != "" {
				docDone = true
			}
			pre = append(pre, l)
			i++
			continue
		}
		docDone = true
		f := strings.Fields(l)
		b := &Block{Line: i + 1, Directive: f[0], Args: f[1:], pre: pre}
		pre = nil
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" && lines[i] != "----" {
			b.Input = append(b.Input, lines[i])
			i++
		}
		if i < len(lines) && lines[i] == "----" {
			b.hasSep = true
			i++
			for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
				b.Output = append(b.Output, lines[i])
				i++
			}
		}
		if err := t.interpret(b); err != nil {
			return nil, &ParseError{Name: name, Line: b.Line, Err: err}
		}
		t.Blocks = append(t.Blocks, b)
	}
	t.Doc = strings.TrimSuffix(t.Doc, "\n")
	t.tail = pre
	if err := t.checkNodes(); err != nil {
		return nil, &ParseError{Name: name, Line: err.line, Err: err.err}
	}
	return t, nil
}

type lineError struct {
	line int
	err  error
}

// checkNodes checks that blocks name declared nodes, and that a cluster
// conversation is for the core alone: the live broker and the fake broker
// speak one connection.
func (t *Transcript) checkNodes() *lineError {
	for _, b := range t.Blocks {
		if b.Node != "" && t.node(b.Node) == nil {
			return &lineError{b.Line, fmt.Errorf("%s @%s: no such node (declare it: nodes %s=host:port)", b.Directive, b.Node, b.Node)}
		}
	}
	if len(t.Nodes) > 0 && (len(t.Targets) == 0 || slices.ContainsFunc(t.Targets, func(s string) bool { return s != "core" })) {
		return &lineError{1, errors.New("a transcript with nodes replays against the core only: add targets core")}
	}
	return nil
}

// node returns the node named name, nil if none.
func (t *Transcript) node(name string) *Node {
	for i := range t.Nodes {
		if t.Nodes[i].Name == name {
			return &t.Nodes[i]
		}
	}
	return nil
}

// addrOf returns the address of bl's node: its @name, or the first.
func (t *Transcript) addrOf(bl *Block) string {
	if bl.Node == "" {
		return t.Nodes[0].Addr
	}
	return t.node(bl.Node).Addr
}

func (t *Transcript) interpret(b *Block) error {
	switch b.Directive {
	case "targets":
		b.kind = bHeader
		for _, a := range b.Args {
			if a != "core" && a != "broker" && a != "client" {
				return fmt.Errorf("targets: unknown target %q (want core, broker, client)", a)
			}
		}
		t.Targets = append(t.Targets, b.Args...)
		return nil
	case "broker":
		b.kind = bHeader
		for _, a := range b.Args {
			switch {
			case a == "fresh":
				t.Fresh = true
			case strings.Contains(a, "=") && strings.HasPrefix(a, "FILA_"):
				t.BrokerEnv = append(t.BrokerEnv, a)
			default:
				return fmt.Errorf("broker: want FILA_KEY=value or fresh, have %q", a)
			}
		}
		return nil
	case "nodes":
		b.kind = bHeader
		if len(b.Args) == 0 {
			return fmt.Errorf("nodes: want one or more name=host:port")
		}
		for _, a := range b.Args {
			name, addr, ok := strings.Cut(a, "=")
			if !ok || name == "" || addr == "" {
				return fmt.Errorf("nodes: want name=host:port, have %q", a)
			}
			if t.node(name) != nil {
				return fmt.Errorf("nodes: %s twice", name)
			}
			t.Nodes = append(t.Nodes, Node{Name: name, Addr: addr})
		}
		return nil
	case "events":
		b.kind = bEvents
		return nil
	case "tick":
		b.kind = bTick
		if len(b.Args) != 1 {
			return fmt.Errorf("tick wants one duration, such as tick 30s")
		}
		d, err := time.ParseDuration(b.Args[0])
		if err != nil || d <= 0 {
			return fmt.Errorf("tick: bad duration %q", b.Args[0])
		}
		b.dur = d
		return nil
	case "client", "server":
	default:
		return fmt.Errorf("unknown directive %q", b.Directive)
	}
	client := b.Directive == "client"
	var args []string
	for _, a := range b.Args {
		if name, ok := strings.CutPrefix(a, "@"); ok {
			if b.Node != "" || name == "" {
				return fmt.Errorf("%s: want one @node", b.Directive)
			}
			if len(t.Nodes) == 0 {
				return fmt.Errorf("%s %s: declare the nodes first (nodes %s=host:port)", b.Directive, a, name)
			}
			b.Node = name
			continue
		}
		args = append(args, a)
	}
	mode := ""
	if len(args) > 0 {
		mode = args[0]
	}
	if len(args) > 1 {
		return fmt.Errorf("%s: too many arguments", b.Directive)
	}
	switch mode {
	case "close":
		b.kind = pick(client, bClientClose, bServerClose)
		return nil
	case "raw":
		b.kind = pick(client, bClientRaw, bServerRaw)
		raw, err := parseHex(b.Output)
		if err != nil {
			return fmt.Errorf("raw bytes: %v", err)
		}
		if len(raw) == 0 {
			return fmt.Errorf("raw block without bytes")
		}
		b.raw = raw
		return nil
	case "":
		b.kind = pick(client, bClientFrame, bServerFrame)
	case "optional":
		if client {
			return fmt.Errorf("client optional: only a server frame may be optional")
		}
		b.kind, b.optional = bServerFrame, true
	default:
		return fmt.Errorf("%s: unknown argument %q (want raw, close or optional)", b.Directive, mode)
	}
	fp, err := parseFrame(frameText(b.Input), b.Line+1)
	if err != nil {
		return err
	}
	b.frame = fp
	if b.hasSep {
		raw, err := parseHex(b.Output)
		if err != nil {
			return fmt.Errorf("hex: %v", err)
		}
		b.raw = raw
	}
	return nil
}

func pick(client bool, c, s blockKind) blockKind {
	if client {
		return c
	}
	return s
}

// frameText joins a block's input lines, blanking comments so line
// numbers stay right.
func frameText(input []string) string {
	out := make([]string, len(input))
	for i, l := range input {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out[i] = l
		}
	}
	return strings.Join(out, "\n")
}

// Format returns the transcript's text, as Parse reads it.
func (t *Transcript) Format() []byte {
	var b bytes.Buffer
	for _, bl := range t.Blocks {
		for _, l := range bl.pre {
			b.WriteString(l + "\n")
		}
		b.WriteString(strings.Join(append([]string{bl.Directive}, bl.Args...), " ") + "\n")
		for _, l := range bl.Input {
			b.WriteString(l + "\n")
		}
		if bl.hasSep {
			b.WriteString("----\n")
			for _, l := range bl.Output {
				b.WriteString(l + "\n")
			}
		}
	}
	for _, l := range t.tail {
		b.WriteString(l + "\n")
	}
	return b.Bytes()
}

// CheckHex checks that the hex of every frame is the codec's encoding of
// its notation, placeholders taking their canonical values. With rewrite
// it replaces stale hex instead and reports whether anything changed.
func (t *Transcript) CheckHex(rewrite bool) (changed bool, err error) {
	b := newBindings()
	var mm []*Mismatch
	for _, bl := range t.Blocks {
		if bl.kind != bClientFrame && bl.kind != bServerFrame {
			continue
		}
		want, err := bl.frame.encode(b)
		if err != nil {
			return false, &ParseError{Name: t.Name, Line: bl.Line, Err: err}
		}
		if bl.hasSep && bytes.Equal(want, bl.raw) {
			continue
		}
		if rewrite {
			bl.hasSep = true
			bl.raw = want
			bl.Output = hexLines(want)
			changed = true
			continue
		}
		mm = append(mm, &Mismatch{
			Transcript: t.Name, Line: bl.Line,
			What:  "the hex is not the codec's encoding of the decoded frame (regenerate it with -rewrite, or fix the codec)",
			Want:  strings.Join(hexLines(want), "\n"),
			Got:   strings.Join(bl.Output, "\n"),
			Bytes: byteDiff(want, bl.raw),
		})
	}
	if len(mm) > 0 {
		return false, &Failure{Transcript: t.Name, Target: "codec", Mismatches: mm}
	}
	return changed, nil
}

// WriteFile writes the transcript back to its file.
func (t *Transcript) WriteFile() error {
	return os.WriteFile(t.Path, t.Format(), 0o644)
}

// Corpus reads every transcript under root (files ending .txt, outside
// directories named fuzz), in name order.
func Corpus(root string) ([]*Transcript, error) {
	var ts []*Transcript
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "fuzz" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".txt") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		t, err := ReadFile(path, strings.TrimSuffix(filepath.ToSlash(rel), ".txt"))
		if err != nil {
			return err
		}
		ts = append(ts, t)
		return nil
	})
	slices.SortFunc(ts, func(a, b *Transcript) int { return strings.Compare(a.Name, b.Name) })
	return ts, err
}
