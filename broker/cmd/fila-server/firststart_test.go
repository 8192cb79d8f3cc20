package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

const testBootstrap = "bootstrap-secret-for-tests-0123456789"

// startProc starts fila-server on dataDir with env added and returns it
// once it listens or exits; it is stopped when the test ends.
func startProc(t *testing.T, dataDir string, env []string, args ...string) *filatest.Proc {
	t.Helper()
	p, err := filatest.StartProc(filatest.ProcConfig{Bin: filatest.Binary(t), DataDir: dataDir, Env: env, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(time.Minute) })
	return p
}

// assertRefused checks that p exited with a non-zero status before it
// listened, logging an error that holds every string of want.
func assertRefused(t *testing.T, p *filatest.Proc, want ...string) {
	t.Helper()
	if p.Addr != "" {
		t.Fatalf("fila-server listens on %s; want it to refuse to start\nlog:\n%s", p.Addr, p.Log())
	}
	code, err := p.Wait(time.Minute)
	if err != nil || code == 0 {
		t.Errorf("fila-server exit %d (%v); want a non-zero exit", code, err)
	}
	log := p.Log()
	for _, w := range want {
		if !strings.Contains(log, w) {
			t.Errorf("log:\n%s\nwant it to contain %q", log, w)
		}
	}
	if strings.Contains(log, "fila-server listening") {
		t.Errorf("log:\n%s\nwant no listener", log)
	}
}

// howTo are the parts of the refusal that say how to get a first key.
var howTo = []string{
	"level=ERROR",
	"auth.bootstrap_apikey (or FILA_AUTH_BOOTSTRAP_APIKEY) to a secret of at least 16 bytes",
	"fila auth create --name admin --perm 'admin:*'",
}

// TestAuthWithoutKeyRefusesToStart: with auth on, a broker that holds no
// API key and has no bootstrap key could never be used; it refuses to
// start and says how to mint a key.
func TestAuthWithoutKeyRefusesToStart(t *testing.T) {
	authOn := []string{"FILA_AUTH_ENABLED=true"}

	t.Run("fresh data directory", func(t *testing.T) {
		dir := t.TempDir()
		missing := filepath.Join(dir, "data")
		p := startProc(t, dir, authOn, "--data-dir", missing)
		assertRefused(t, p, append(howTo, "no API key is stored and no bootstrap key is set")...)
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the data directory was created (%v); want it left alone", err)
		}
	})

	t.Run("data without keys", func(t *testing.T) {
		dir := t.TempDir()
		p := startProc(t, dir, nil)
		if p.Addr == "" {
			t.Fatalf("fila-server without auth did not start:\n%s", p.Log())
		}
		p.Stop(time.Minute)
		p = startProc(t, dir, authOn)
		assertRefused(t, p, append(howTo, "no API key is stored and no bootstrap key is set")...)
	})

	t.Run("a stored key is enough", func(t *testing.T) {
		dir := t.TempDir()
		p := startProc(t, dir, append(authOn, "FILA_AUTH_BOOTSTRAP_APIKEY="+testBootstrap))
		if p.Addr == "" {
			t.Fatalf("fila-server with a bootstrap key did not start:\n%s", p.Log())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := fila.Connect(ctx, p.Addr, fila.WithAPIKey(testBootstrap))
		if err != nil {
			t.Fatal(err)
		}
		key, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("admin").Permissions(fila.Admin("*")))
		admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		p.Stop(time.Minute)

		p = startProc(t, dir, authOn)
		if p.Addr == "" {
			t.Fatalf("fila-server with a stored key did not start:\n%s", p.Log())
		}
		c, err := fila.Connect(ctx, p.Addr, fila.WithAPIKey(key.Secret))
		if err != nil {
			t.Fatalf("Connect with the stored key = %v", err)
		}
		c.Close()
	})

	// A cluster node that would found a cluster on an empty data
	// directory refuses; one that joins a running cluster gets the
	// cluster's keys from the meta group, and starts. (A cluster node
	// advertises its client address, which must have a port.)
	ports := filatest.FreePorts(t, 3)
	cluster := func(nodeID, peers string, join bool) []string {
		env := append([]string{"FILA_CLUSTER_NODE_ID=" + nodeID, "FILA_CLUSTER_PEERS=" + peers,
			"FILA_CLUSTER_PEER_LISTEN_ADDR=" + ports[1]}, authOn...)
		if join {
			env = append(env, "FILA_CLUSTER_JOIN=true")
		}
		return env
	}
	t.Run("cluster founder", func(t *testing.T) {
		p := startProc(t, t.TempDir(), cluster("1", "1@"+ports[1], false), "--listen", ports[2])
		assertRefused(t, p, append(howTo, "this node starts on an empty data directory without cluster.join")...)
	})
	t.Run("cluster joiner", func(t *testing.T) {
		p := startProc(t, t.TempDir(), cluster("2", "1@"+ports[0]+",2@"+ports[1], true), "--listen", ports[2])
		if p.Addr == "" {
			t.Fatalf("a joining node did not start:\n%s", p.Log())
		}
	})
}
