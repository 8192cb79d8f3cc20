package conformance

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts' hex (from the codec) and events (from the core) instead of checking them")

func corpus(t *testing.T) []*Transcript {
	t.Helper()
	ts, err := Corpus("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	return ts
}

func named(t *testing.T, name string) *Transcript {
	t.Helper()
	for _, tr := range corpus(t) {
		if tr.Name == name {
			return tr
		}
	}
	t.Fatalf("no transcript %s", name)
	return nil
}

// TestCore replays every transcript against the sans-io core. With
// -rewrite it regenerates hex and events and writes the files.
func TestCore(t *testing.T) {
	for _, tr := range corpus(t) {
		t.Run(tr.Name, func(t *testing.T) {
			if *rewrite {
				changed, err := tr.CheckHex(true)
				if err == nil {
					var c bool
					c, err = ReplayCore(tr, CoreOptions{Rewrite: true})
					changed = changed || c
				}
				if err != nil {
					t.Fatal(err)
				}
				if changed {
					if err := tr.WriteFile(); err != nil {
						t.Fatal(err)
					}
					t.Logf("rewrote %s", tr.Path)
				}
				return
			}
			if !tr.Applies("core") {
				t.Skip("not a core transcript")
			}
			if _, err := ReplayCore(tr, CoreOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBroker replays every transcript against live brokers: one per
// broker configuration, one per transcript that needs a fresh broker.
func TestBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fila-server")
	}
	var mu sync.Mutex
	shared := map[string]*filatest.Server{}
	broker := func(tr *Transcript) string {
		if tr.Fresh {
			return filatest.Start(t, filatest.WithEnv(tr.BrokerEnv...)).Addr
		}
		mu.Lock()
		defer mu.Unlock()
		srv, ok := shared[tr.BrokerKey()]
		if !ok {
			srv = filatest.Start(t, filatest.WithEnv(tr.BrokerEnv...))
			shared[tr.BrokerKey()] = srv
		}
		return srv.Addr
	}
	for _, tr := range corpus(t) {
		t.Run(tr.Name, func(t *testing.T) {
			if !tr.Applies("broker") {
				t.Skip("not a broker transcript")
			}
			if err := ReplayBroker(context.Background(), tr, broker(tr), BrokerOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFormatRoundTrip checks that formatting a parsed transcript gives
// back its file.
func TestFormatRoundTrip(t *testing.T) {
	for _, tr := range corpus(t) {
		data, err := os.ReadFile(tr.Path)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(tr.Format()); got != string(data) {
			t.Errorf("Format(%s) differs from its file:\n%s", tr.Name, got)
		}
	}
}

// TestCorpusCoverage checks the corpus holds at least 30 transcripts, and
// that every opcode and every error code appears in a frame of one.
func TestCorpusCoverage(t *testing.T) {
	ts := corpus(t)
	if len(ts) < 30 {
		t.Errorf("the corpus has %d transcripts; want at least 30", len(ts))
	}
	ops := map[wire.Opcode][]string{}
	codes := map[wire.Code][]string{}
	for _, tr := range ts {
		for _, bl := range tr.Blocks {
			if bl.frame == nil {
				continue
			}
			ops[bl.frame.op] = append(ops[bl.frame.op], tr.Name)
			walkCodes(bl.frame.body, func(c wire.Code) { codes[c] = append(codes[c], tr.Name) })
		}
	}
	for _, op := range Opcodes() {
		if len(ops[op]) == 0 {
			t.Errorf("no transcript has a %v frame", op)
		}
	}
	var coreOnly []string
	for _, c := range Codes() {
		if len(codes[c]) == 0 {
			t.Errorf("no transcript has error code %v", c)
			continue
		}
		live := slices.ContainsFunc(codes[c], func(name string) bool { return named(t, name).Applies("broker") })
		if !live {
			coreOnly = append(coreOnly, c.String())
		}
	}
	t.Logf("codes only in transcripts a live broker does not replay: %s", strings.Join(coreOnly, " "))
}

func walkCodes(p *pattern, fn func(wire.Code)) {
	if p == nil {
		return
	}
	if p.kind == kCode && p.lit.IsValid() {
		fn(wire.Code(p.lit.Uint()))
	}
	if p.kind == kStruct {
		for i, fd := range fieldsOf(p.typ) {
			if fd.kind == kCode && p.fields[i] == nil {
				fn(wire.CodeOK) // left out: zero
			}
		}
	}
	for _, f := range p.fields {
		walkCodes(f, fn)
	}
	for _, it := range p.items {
		walkCodes(it, fn)
	}
}

// TestBrokenCodec stands in for a codec that encodes one field wrongly
// (Enqueue's weight): the core's bytes no longer match, and the failure
// names the transcript, the field and the byte.
func TestBrokenCodec(t *testing.T) {
	tr := named(t, "hotpath/enqueue_consume")
	flipWeight := func(out []byte) []byte {
		var res []byte
		for len(out) > 0 {
			fr, ok := nextFrame(out)
			if !ok {
				return append(res, out...)
			}
			out = out[len(fr):]
			h, f, err := decodeLogical(fr)
			if e, isEnqueue := f.(*wire.Enqueue); err == nil && isEnqueue {
				e.Messages[0].Weight ^= 0x10
				fr = wire.AppendFrame(nil, h.RequestID, e)
			}
			res = append(res, fr...)
		}
		return res
	}
	_, err := ReplayCore(tr, CoreOptions{outFilter: flipWeight})
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("ReplayCore(%s) with a broken codec = %v; want a *Failure", tr.Name, err)
	}
	msg := err.Error()
	for _, want := range []string{
		"hotpath/enqueue_consume.txt:", "the core wrote a different Enqueue",
		"field messages[0].weight: want 3, got 19",
		"first difference at byte 80: messages[0].weight",
		"bytes 77-80 messages[0].weight: want 00000003, got 00000013",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("ReplayCore(%s) with a broken codec:\n%s\nwant it to contain %q", tr.Name, msg, want)
		}
	}
}

// TestBrokenBroker puts a proxy that adds one to every delivered
// message's attempt between the replayer and a live broker: the replay
// fails, naming the field and its bytes.
func TestBrokenBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fila-server")
	}
	tr := named(t, "hotpath/enqueue_consume")
	srv := filatest.Start(t)
	proxy := startProxy(t, srv.Addr, func(h wire.Header, f wire.Frame) wire.Frame {
		if d, ok := f.(*wire.Delivery); ok {
			for i := range d.Messages {
				d.Messages[i].Attempt++
			}
		}
		return f
	})
	err := ReplayBroker(context.Background(), tr, proxy, BrokerOptions{})
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("ReplayBroker(%s) through a broken broker = %v; want a *Failure", tr.Name, err)
	}
	msg := err.Error()
	for _, want := range []string{
		"message 0 of the broker's Delivery differs",
		"field messages[0].attempt: want 1, got 2",
		"first difference at byte",
		"messages[0].attempt: want 00000001, got 00000002",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("ReplayBroker(%s) through a broken broker:\n%s\nwant it to contain %q", tr.Name, msg, want)
		}
	}
}

// startProxy relays one connection to addr, passing each frame from the
// broker through edit.
func startProxy(t *testing.T, addr string, edit func(wire.Header, wire.Frame) wire.Frame) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			return
		}
		go func() {
			io.Copy(b, c)
			closeWrite(b)
		}()
		defer c.Close()
		defer b.Close()
		var buf []byte
		chunk := make([]byte, 64<<10)
		for {
			n, err := b.Read(chunk)
			buf = append(buf, chunk[:n]...)
			for {
				fr, ok := nextFrame(buf)
				if !ok {
					break
				}
				buf = buf[len(fr):]
				if h, f, derr := decodeLogical(fr); derr == nil {
					fr = wire.AppendFrame(nil, h.RequestID, edit(h, f))
				}
				if _, err := c.Write(fr); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}

// TestCheckHexStale checks that a transcript whose hex does not encode its
// notation fails with the differing field, and that -rewrite fixes it.
func TestCheckHexStale(t *testing.T) {
	src := "client\nPing req=3 nonce=5\n----\n00000008 0003 0000 00000003\n0000000000000006\n"
	tr, err := Parse("stale", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.CheckHex(false)
	if err == nil || !strings.Contains(err.Error(), "bytes 12-19 nonce: want 0000000000000005, got 0000000000000006") {
		t.Fatalf("CheckHex(stale) = %v; want a mismatch at nonce", err)
	}
	changed, err := tr.CheckHex(true)
	if err != nil || !changed {
		t.Fatalf("CheckHex(stale, rewrite) = %v, %v; want true, nil", changed, err)
	}
	if want := "client\nPing req=3 nonce=5\n----\n00000008 0003 0000 00000003\n0000000000000005\n"; string(tr.Format()) != want {
		t.Errorf("rewritten = %q; want %q", tr.Format(), want)
	}
}

// TestPlaceholders checks binding at first sight and matching where
// reused, in the broker matcher.
func TestPlaceholders(t *testing.T) {
	fp, err := parseFrame(`EnqueueResult req=2 results=[{id=$a} {id=$b} {id=$a}]`, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := func(n byte) [16]byte { return [16]byte{15: n} }
	tests := []struct {
		name  string
		ids   [][16]byte
		diffs int
	}{
		{"bound then reused", [][16]byte{id(1), id(2), id(1)}, 0},
		{"reuse differs", [][16]byte{id(1), id(2), id(3)}, 1},
		{"two names, one value", [][16]byte{id(1), id(1), id(1)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &wire.EnqueueResult{}
			for _, v := range tc.ids {
				f.Results = append(f.Results, wire.EnqueueItemResult{ID: v})
			}
			m := newMatcher(newBindings())
			m.matchFrame(fp, wire.Header{Opcode: wire.OpEnqueueResult, RequestID: 2}, f)
			if len(m.diffs) != tc.diffs {
				t.Errorf("match(%v) = %v; want %d diffs", tc.ids, m.diffs, tc.diffs)
			}
		})
	}
}

// TestBrokerCreditCheck plays a broker that delivers two messages for a
// prefetch of 1 (a fake broker serving another transcript) to the broker
// replayer, which must report the delivery beyond credit whatever the
// transcript lists.
func TestBrokerCreditCheck(t *testing.T) {
	const prologue = `client
Handshake req=1 max_version=1 min_version=1 client_name=$client1 max_frame_size=16777216

server
HandshakeOk req=1 version=1 node_id=$node1 max_frame_size=16777216 server_name=$server1

client
Subscribe req=2 queue="q" prefetch=1

server
SubscribeOk req=2 prefetch=1

server
Delivery req=2 messages=[
  {id=$id1 queue="q" payload="one" attempt=1 lease=$lease1}
`
	parse := func(name, src string) *Transcript {
		tr, err := Parse(name, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.CheckHex(true); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	want := parse("one", prologue+"]\n")
	bad := parse("two", prologue+"  {id=$id2 queue=\"q\" payload=\"two\" attempt=1 lease=$lease2}\n]\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go ServeClient(context.Background(), bad, ln, ClientOptions{})
	err = ReplayBroker(context.Background(), want, ln.Addr().String(), BrokerOptions{})
	if err == nil || !strings.Contains(err.Error(), "the broker delivered 2 messages to subscription 2, which the client granted 1 credits so far") {
		t.Fatalf("ReplayBroker(over-delivering broker) = %v; want a delivery beyond credit", err)
	}
}
