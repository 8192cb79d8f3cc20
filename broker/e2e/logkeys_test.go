package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestJSONLogKeys runs a broker with JSON logs at debug level through a
// workload (queues made, messages enqueued, consumed, acked, nacked to
// the dead-letter queue and redriven, a failing hook, a wrong API key, a
// garbage handshake, a revoked key) and reads back every line of its
// stderr: each is one JSON object whose keys appear once, and the lines
// of a connection carry the keys a log pipeline indexes: conn, remote,
// key_id, and queue on those about a queue.
func TestJSONLogKeys(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+bootstrap,
		"FILA_LOG_FORMAT=json", "FILA_LOG_LEVEL=debug"))
	ctx := ctxT(t, 2*time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	adm := root.Admin()
	if err := adm.CreateQueue(ctx, fila.NewQueueSpec("jobs").MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	if err := adm.CreateQueue(ctx, fila.NewQueueSpec("hooked").OnEnqueue(`function on_enqueue(msg) error("boom") end`)); err != nil {
		t.Fatal(err)
	}
	key, err := adm.CreateAPIKey(ctx, fila.NewAPIKeySpec("worker").Permissions(fila.Produce("*"), fila.Consume("jobs")))
	if err != nil {
		t.Fatal(err)
	}
	worker, err := connectKey(t, srv.Addr, key.Secret)
	if err != nil {
		t.Fatal(err)
	}

	// Two messages: one acked, one nacked into jobs.dlq, then redriven.
	for _, p := range []string{"ack me", "nack me"} {
		if _, err := worker.Producer().Send(ctx, fila.NewMessage("jobs", []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := worker.Consumer().Subscribe(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d := recv(t, ctx, sub)
		if string(d.Payload()) == "ack me" {
			err = d.Ack(ctx)
		} else {
			err = d.Nack(ctx, "bad input")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for moved := uint64(0); moved == 0; {
		if moved, err = adm.Redrive(ctx, "jobs.dlq", 0); err != nil {
			t.Fatal(err)
		}
		if moved == 0 {
			select {
			case <-ctx.Done():
				t.Fatal("the nacked message never reached jobs.dlq")
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if d := recv(t, ctx, sub); string(d.Payload()) != "nack me" {
		t.Fatalf("redriven %q; want the nacked message", d.Payload())
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}

	// A failing on_enqueue hook: each failure is logged, and the third
	// in a row opens the queue's circuit breaker.
	for range 3 {
		if _, err := worker.Producer().Send(ctx, fila.NewMessage("hooked", []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}

	// A wrong API key, and a handshake that is not one.
	if _, err := connectKey(t, srv.Addr, "fila_a-wrong-secret"); !errors.Is(err, fila.ErrUnauthorized) {
		t.Fatalf("Connect with a wrong key = %v; want UNAUTHORIZED", err)
	}
	nc, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	nc.Write([]byte("GET / HTTP/1.1\r\nHost: fila\r\n\r\n"))
	io.Copy(io.Discard, nc) // until the broker closes it
	nc.Close()

	// Revoking the worker's key closes its connection.
	if err := adm.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}

	rootConn := logLine(t, ctx, srv, map[string]any{"msg": "audit", "event": "queue.created", "queue": "jobs"})
	for _, want := range []map[string]any{
		{"msg": "audit", "event": "queue.created", "queue": "jobs", "key_id": "bootstrap"},
		{"msg": "audit", "event": "api_key.created", "key_id": "bootstrap", "target_key_id": key.ID},
		{"msg": "audit", "event": "api_key.revoked", "key_id": "bootstrap", "target_key_id": key.ID},
		{"msg": "on_enqueue failed; using the producer's values", "queue": "hooked"},
		{"msg": "hook circuit breaker opened: hook bypassed", "queue": "hooked", "hook": "on_enqueue"},
		{"msg": "closing connection", "key_id": key.ID},
	} {
		line := logLine(t, ctx, srv, want)
		if want["msg"] == "audit" || want["msg"] == "closing connection" {
			hasConnKeys(t, line)
		}
		if want["msg"] == "closing connection" && line["conn"] == rootConn["conn"] {
			t.Errorf("the worker's connection has the root's conn %v:\n%v", line["conn"], line)
		}
	}
	hasConnKeys(t, rootConn)
	for _, msg := range []string{"audit", "closing connection before handshake"} {
		want := map[string]any{"msg": msg}
		if msg == "audit" {
			want["event"] = "auth.failed"
		}
		line := logLine(t, ctx, srv, want)
		if _, ok := line["conn"].(float64); !ok || !strings.HasPrefix(fmt.Sprint(line["remote"]), "127.0.0.1:") {
			t.Errorf("line %q lacks conn or remote: %v", msg, line)
		}
	}

	for _, line := range strings.Split(srv.Log(), "\n") {
		if line == "" {
			continue
		}
		if err := uniqueKeys(line); err != nil {
			t.Errorf("%v in log line %s", err, line)
		}
	}
}

// TestJSONLogKeysCluster: the lines of a cluster's nodes, their peer
// transport's among them, have no key twice either, and those about a
// queue's group name the queue once.
func TestJSONLogKeysCluster(t *testing.T) {
	c := filatest.StartCluster(t, 3, filatest.WithEnv(append(clusterEnv, "FILA_LOG_FORMAT=json")...))
	ctx := ctxT(t, 3*time.Minute)
	cl := connect(t, c.Addrs())
	createQueue(t, ctx, cl.Admin(), "jobs")
	if _, err := cl.Producer().Send(ctx, fila.NewMessage("jobs", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		if line := logLine(t, ctx, n, map[string]any{"msg": "peer connected"}); line["component"] != "cluster" || line["subsystem"] != "peer" {
			t.Errorf("node %d: a line of the peer transport: %v; want component cluster, subsystem peer", i+1, line)
		}
		logLine(t, ctx, n, map[string]any{"msg": "leader changed", "queue": "jobs"})
		for _, line := range strings.Split(n.Log(), "\n") {
			if line == "" {
				continue
			}
			if err := uniqueKeys(line); err != nil {
				t.Errorf("node %d: %v in log line %s", i+1, err, line)
			}
		}
	}
}

// hasConnKeys checks that a line a connection logged names it: its conn
// number, the client's address, and, auth being on, the key.
func hasConnKeys(t *testing.T, line map[string]any) {
	t.Helper()
	if n, ok := line["conn"].(float64); !ok || n < 1 {
		t.Errorf("conn = %v; want a connection number:\n%v", line["conn"], line)
	}
	if r := fmt.Sprint(line["remote"]); !strings.HasPrefix(r, "127.0.0.1:") {
		t.Errorf("remote = %q; want the client's address:\n%v", r, line)
	}
	if k, ok := line["key_id"].(string); !ok || k == "" {
		t.Errorf("key_id = %v; want the connection's key:\n%v", line["key_id"], line)
	}
}

// logLine waits for the JSON log line that has every attribute of want,
// and returns it decoded.
func logLine(t *testing.T, ctx context.Context, srv *filatest.Server, want map[string]any) map[string]any {
	t.Helper()
	for {
		for _, s := range strings.Split(srv.Log(), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(s), &line) != nil {
				continue
			}
			found := true
			for k, v := range want {
				found = found && line[k] == v
			}
			if found {
				return line
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no log line with %v in:\n%s", want, srv.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// uniqueKeys reports an error unless line is one JSON object in which no
// object, at any depth, has a key twice. It reads the tokens: decoding
// into a map would keep one of two equal keys without a word.
func uniqueKeys(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object")
	}
	if err := objectKeys(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// objectKeys reads the rest of an object whose { was read.
func objectKeys(dec *json.Decoder) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q twice", key)
		}
		seen[key] = true
		if err := skipValue(dec); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	_, err := dec.Token() // }
	return err
}

// skipValue reads one value, checking the keys of the objects in it.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return objectKeys(dec)
	case json.Delim('['):
		for dec.More() {
			if err := skipValue(dec); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ]
		return err
	}
	return nil
}
