package scenario

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/conformance"
	"github.com/fila-mq/fila/sdk/core/wire"
)

var record = flag.Bool("record", false, "record the transcripts of the scenarios from live brokers into ../testdata")

const corpusDir = "../testdata"

func corpus(t *testing.T) []*conformance.Transcript {
	t.Helper()
	ts, err := conformance.Corpus(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestEveryTranscriptHasAScenario checks the corpus and the scenarios
// name the same conversations, with the same targets and brokers.
func TestEveryTranscriptHasAScenario(t *testing.T) {
	names := map[string]bool{}
	for _, tr := range corpus(t) {
		names[tr.Name] = true
		sc, ok := Lookup(tr.Name)
		if !ok {
			if tr.Applies("client") {
				t.Errorf("transcript %s targets client but has no scenario", tr.Name)
			}
			continue
		}
		if strings.Join(sc.BrokerEnv, " ") != tr.BrokerKey() || sc.Fresh != tr.Fresh {
			t.Errorf("scenario %s wants broker %v fresh=%v; its transcript %v fresh=%v", sc.Name, sc.BrokerEnv, sc.Fresh, tr.BrokerEnv, tr.Fresh)
		}
	}
	for _, sc := range All() {
		if !names[sc.Name] {
			t.Errorf("scenario %s has no transcript in %s", sc.Name, corpusDir)
		}
	}
}

// TestClientModeSDK runs every client transcript's scenario, with the Go
// SDK, against the fake broker: the SDK must send exactly the
// transcripts' bytes.
func TestClientModeSDK(t *testing.T) {
	for _, tr := range corpus(t) {
		t.Run(tr.Name, func(t *testing.T) {
			if !tr.Applies("client") {
				t.Skip("not a client transcript")
			}
			sc, ok := Lookup(tr.Name)
			if !ok {
				t.Fatalf("no scenario %s", tr.Name)
			}
			t.Parallel()
			if err := serveScenario(t, tr, sc); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// serveScenario runs sc against the fake broker playing tr and returns
// the fake broker's verdict, or the scenario's error.
func serveScenario(t *testing.T, tr *conformance.Transcript, sc conformance.Scenario) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- conformance.ServeClient(ctx, tr, ln, conformance.ClientOptions{}) }()
	runErr := sc.Run(ctx, conformance.NewSession(ln.Addr().String()))
	if err := <-served; err != nil {
		return err
	}
	return runErr
}

// TestClientModeWrongClient checks client mode against a deliberately
// wrong client: it numbers its first request 7 and offers protocol
// versions from 0, and the report shows both differences with their
// bytes.
func TestClientModeWrongClient(t *testing.T) {
	var tr *conformance.Transcript
	for _, c := range corpus(t) {
		if c.Name == "session/connect_ping_close" {
			tr = c
		}
	}
	if tr == nil {
		t.Fatal("no transcript session/connect_ping_close")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		served <- conformance.ServeClient(context.Background(), tr, ln, conformance.ClientOptions{Timeout: 2 * time.Second})
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	hs := &wire.Handshake{MaxVersion: 1, MinVersion: 0, ClientName: "wrong-client/0.0.1", MaxFrameSize: wire.DefaultMaxFrameSize}
	c.Write(wire.AppendFrame(nil, 7, hs))
	c.Close()
	err = <-served
	var f *conformance.Failure
	if !errors.As(err, &f) {
		t.Fatalf("ServeClient(wrong client) = %v; want a *Failure", err)
	}
	msg := err.Error()
	t.Logf("the report:\n%s", msg)
	for _, want := range []string{
		"session/connect_ping_close.txt:", "the client's frame differs from the transcript's Handshake",
		"field header.request_id: want 1, got 7",
		"first difference at byte 11: header.request_id",
		"bytes 8-11 header.request_id: want 00000001, got 00000007",
		"field min_version: want 1, got 0",
		"bytes 14-15 min_version: want 0001, got 0000",
		"the client closed the connection",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report does not contain %q", want)
		}
	}
}

// TestRecord records every scenario from live brokers into the corpus
// when run with -record. Otherwise it records one scenario without
// writing, and checks the client's side of the recording is the committed
// transcript's (the broker's side may differ in order, as it may from run
// to run).
func TestRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts fila-server")
	}
	brokers := map[string]string{}
	addr := func(sc conformance.Scenario) string {
		key := strings.Join(sc.BrokerEnv, " ")
		if a, ok := brokers[key]; ok && !sc.Fresh {
			return a
		}
		a := filatest.Start(t, filatest.WithEnv(sc.BrokerEnv...)).Addr
		if !sc.Fresh {
			brokers[key] = a
		}
		return a
	}
	for _, sc := range All() {
		if sc.Manual || (!*record && sc.Name != "hotpath/enqueue_consume") {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			tr, err := conformance.Record(context.Background(), sc, addr(sc), conformance.RecordOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !*record {
				old, err := conformance.ReadFile(filepath.Join(corpusDir, sc.Name+".txt"), sc.Name)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := clientSide(tr), clientSide(old); got != want {
					t.Errorf("recording %s again, the client sends:\n%s\nwant:\n%s", sc.Name, got, want)
				}
				return
			}
			tr.Path = filepath.Join(corpusDir, filepath.FromSlash(sc.Name)+".txt")
			if err := os.MkdirAll(filepath.Dir(tr.Path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tr.WriteFile(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// clientSide returns the notation of a transcript's client frames.
func clientSide(tr *conformance.Transcript) string {
	var b strings.Builder
	for _, bl := range tr.Blocks {
		if bl.Directive == "client" {
			b.WriteString(strings.Join(append(bl.Args, bl.Input...), "\n") + "\n")
		}
	}
	return b.String()
}
