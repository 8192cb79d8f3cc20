package conformance

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// RecordOptions configures Record.
type RecordOptions struct {
	// CloseWait is how long to wait, after the scenario returned, for the
	// broker to close the connection before the client half-closes it;
	// 0 means 5s.
	CloseWait time.Duration
}

// Record runs sc against the live broker at addr, records both directions
// of its connection, and returns the transcript: each frame's notation and
// hex, placeholders for the values that differ from run to run, and (for
// a transcript that targets core) the core's events, from a core replay.
// The transcript's Name is sc.Name; its Path is empty.
//
// Placeholders: every non-zero UUID ($id1, ...; a client's producer ID is
// $producer1); leases ($lease1, keyed by
// message ID and lease, so a lease reused by another message is another
// placeholder); each timestamp (fields ending _at_ms: $enqueued1,
// $deadline1, ...) on its own; node IDs, server names, API key IDs and
// secrets, leader addresses, bucket token counts, a queue's stats window
// and its keys' dwells ($window1, $dwell1, $dwell_p991); and the client's
// name. UUIDs and leases inside strings become ${name}.
func Record(ctx context.Context, sc Scenario, addr string, opts RecordOptions) (*Transcript, error) {
	if opts.CloseWait <= 0 {
		opts.CloseWait = 5 * time.Second
	}
	s := NewSession(addr)
	s.tap = &tap{}
	if err := sc.Run(ctx, s); err != nil {
		s.tap.finish(opts.CloseWait)
		return nil, fmt.Errorf("conformance: record %s: %w", sc.Name, err)
	}
	chunks := s.tap.finish(opts.CloseWait)
	text, err := transcriptText(sc, chunks)
	if err != nil {
		return nil, fmt.Errorf("conformance: record %s: %w", sc.Name, err)
	}
	t, err := Parse(sc.Name, []byte(text))
	if err != nil {
		return nil, fmt.Errorf("conformance: record %s: the recording does not parse: %w\n%s", sc.Name, err, text)
	}
	if _, err := t.CheckHex(true); err != nil {
		return nil, err
	}
	if t.Applies("core") {
		if _, err := ReplayCore(t, CoreOptions{Rewrite: true}); err != nil {
			return nil, err
		}
		if _, err := ReplayCore(t, CoreOptions{}); err != nil {
			return nil, fmt.Errorf("conformance: record %s: the core does not replay its own recording: %w", sc.Name, err)
		}
	}
	return t, nil
}

// recFrame is one recorded frame or event, in order.
type recFrame struct {
	client bool
	raw    []byte // the frame's bytes
	isRaw  bool   // written with WriteRaw: shown as bytes only
	close  bool
}

// frames cuts the recorded chunks into frames, in the order their last
// byte crossed the connection.
func frames(chunks []chunk) ([]recFrame, error) {
	var out []recFrame
	var cbuf, sbuf []byte
	for _, ch := range chunks {
		switch {
		case ch.close:
			out = append(out, recFrame{client: ch.client, close: true})
		case ch.client && ch.raw:
			if len(cbuf) > 0 {
				return nil, fmt.Errorf("raw bytes written inside a frame")
			}
			out = append(out, recFrame{client: true, raw: ch.data, isRaw: true})
		case ch.client:
			cbuf = append(cbuf, ch.data...)
			for {
				fr, ok := nextFrame(cbuf)
				if !ok {
					break
				}
				out = append(out, recFrame{client: true, raw: fr})
				cbuf = cbuf[len(fr):]
			}
		default:
			sbuf = append(sbuf, ch.data...)
			for {
				fr, ok := nextFrame(sbuf)
				if !ok {
					break
				}
				out = append(out, recFrame{raw: fr})
				sbuf = sbuf[len(fr):]
			}
		}
	}
	if len(cbuf) > 0 {
		return nil, fmt.Errorf("the client left %d bytes of an unfinished frame: write them with WriteRaw", len(cbuf))
	}
	if len(sbuf) > 0 {
		return nil, fmt.Errorf("the broker left %d bytes of an unfinished frame", len(sbuf))
	}
	return out, nil
}

func transcriptText(sc Scenario, chunks []chunk) (string, error) {
	fs, err := frames(chunks)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(sc.Doc), "\n") {
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	if len(sc.Targets) > 0 {
		b.WriteString("targets " + strings.Join(sc.Targets, " ") + "\n")
	}
	if len(sc.BrokerEnv) > 0 || sc.Fresh {
		args := append([]string(nil), sc.BrokerEnv...)
		if sc.Fresh {
			args = append(args, "fresh")
		}
		b.WriteString("broker " + strings.Join(args, " ") + "\n")
	}
	n := &recNamer{b: newBindings(), seen: map[string]string{}, count: map[string]int{}}
	clientLeft := false // the client sent GoAway
	for _, f := range fs {
		dir := "server"
		if f.client {
			dir = "client"
		}
		b.WriteString("\n")
		switch {
		case f.close:
			b.WriteString(dir + " close\n")
		case f.isRaw:
			b.WriteString(dir + " raw\n")
			if desc := rawDescription(f.raw); desc != "" {
				b.WriteString("# " + desc + "\n")
			}
			b.WriteString("----\n" + strings.Join(chunkHex(f.raw, ""), "\n") + "\n")
		default:
			h, fr, err := decodeLogical(f.raw)
			if err != nil {
				return "", fmt.Errorf("%s frame %s: %v", dir, shortHex(f.raw), err)
			}
			if _, unknown := fr.(*wire.UnknownFrame); unknown {
				return "", fmt.Errorf("%s frame of unknown opcode 0x%04x: write it with WriteRaw", dir, uint16(h.Opcode))
			}
			split := 0
			if ps := splitPhysical(f.raw); len(ps) > 1 {
				split = int(ps[0].h.Length)
			}
			n.client = f.client
			text := renderer{n: n}.frame(h.RequestID, h.Flags, split, fr)
			// The broker's answer to a client's GoAway is a courtesy
			// the protocol does not require.
			if ga, ok := fr.(*wire.GoAway); ok {
				if f.client {
					clientLeft = true
				} else if clientLeft && ga.Code == wire.CodeOK {
					dir += " optional"
				}
			}
			b.WriteString(dir + "\n" + text + "\n")
		}
	}
	return b.String(), nil
}

// rawDescription says what raw bytes hold, as far as their header goes.
func rawDescription(b []byte) string {
	if len(b) < wire.HeaderSize {
		return fmt.Sprintf("%d bytes, less than a frame header", len(b))
	}
	h, _ := wire.ParseHeader(b)
	d := fmt.Sprintf("a header of %v (opcode 0x%04x) for request %d announcing %d body bytes", h.Opcode, uint16(h.Opcode), h.RequestID, h.Length)
	if body := len(b) - wire.HeaderSize; body != int(h.Length) {
		d += fmt.Sprintf("; %d follow", body)
	}
	return d
}

// recNamer chooses the placeholders of a recording.
type recNamer struct {
	b      *bindings
	client bool              // rendering a client frame
	seen   map[string]string // value key -> placeholder
	count  map[string]int    // prefix -> placeholders so far
}

func (n *recNamer) fresh(prefix string, v reflect.Value, field, key string) string {
	n.count[prefix]++
	name := prefix + strconv.Itoa(n.count[prefix])
	n.b.bind(name, v, field)
	if key != "" {
		n.seen[key] = name
	}
	return name
}

// stringPlaceholders are the string fields whose values differ from run
// to run, and the prefixes of their placeholders.
var stringPlaceholders = map[string]string{
	"node_id":        "node",
	"leader_node_id": "node",
	"server_name":    "server",
	"key_id":         "key",
	"secret":         "secret",
	"leader_addr":    "addr",
}

func (n *recNamer) placeholder(name string, parent, v reflect.Value) (string, bool) {
	k := kindOf(v.Type())
	switch {
	case name == "producer_id" && k == kUUID:
		// Clients draw their producer IDs at random.
		key := "uuid:" + textOf(v)
		if ph, ok := n.seen[key]; ok {
			return ph, true
		}
		return n.fresh("producer", v, name, key), true
	case k == kUUID:
		key := "uuid:" + textOf(v)
		if ph, ok := n.seen[key]; ok {
			return ph, true
		}
		if n.client {
			return "", false // chosen by the client: the same every run
		}
		return n.fresh("id", v, name, key), true
	case name == "lease" && k == kU64:
		key := "lease:" + textOf(v)
		if parent.IsValid() {
			if id := parent.FieldByName("ID"); id.IsValid() {
				key += "@" + textOf(id)
			}
		}
		if ph, ok := n.seen[key]; ok {
			return ph, true
		}
		if n.client {
			return "", false
		}
		return n.fresh("lease", v, name, key), true
	case strings.HasSuffix(name, "_at_ms") && !n.client:
		prefix := strings.TrimSuffix(name, "_at_ms")
		if i := strings.LastIndexByte(prefix, '_'); i >= 0 {
			prefix = prefix[i+1:]
		}
		return n.fresh(prefix, v, name, ""), true
	case name == "tokens" && k == kF64 && !n.client:
		return n.fresh("tokens", v, name, ""), true
	case (name == "window_ms" || name == "dwell_p50_ms" || name == "dwell_p99_ms") && !n.client:
		// How long the broker has run, how long messages waited.
		return n.fresh(strings.TrimSuffix(strings.TrimSuffix(name, "_ms"), "_p50"), v, name, ""), true
	case name == "nonce":
		// Clients draw Ping nonces as they like (the Go SDK from the
		// clock); a Pong echoes its Ping's.
		key := "nonce:" + textOf(v)
		if ph, ok := n.seen[key]; ok {
			return ph, true
		}
		return n.fresh("nonce", v, name, key), true
	case name == "client_name" && n.client:
		return n.fresh("client", v, name, ""), true
	case k == kString:
		prefix, ok := stringPlaceholders[name]
		if !ok && name != "api_key" {
			return "", false
		}
		key := "string:" + v.String()
		if ph, ok := n.seen[key]; ok {
			return ph, true
		}
		if n.client || !ok {
			return "", false
		}
		return n.fresh(prefix, v, name, key), true
	}
	return "", false
}

func (n *recNamer) interpolate(s string) string { return n.b.interpolate(s) }
