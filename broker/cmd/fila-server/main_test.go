package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// These tests run a real fila-server (filatest.Binary) and check its exit
// status, its output and what it leaves on disk.

// serverRun is how a fila-server run ended.
type serverRun struct {
	stdout, stderr string
	code           int
}

// runServer runs fila-server with args in dir, with env added to an
// environment holding no FILA_ variable, and returns once it exits. It
// fails the test if the process is still running after two minutes: a
// run that starts a broker never exits by itself.
func runServer(t *testing.T, dir string, env []string, args ...string) serverRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filatest.Binary(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FILA_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("fila-server %s: still running after 2 minutes\nstderr: %s", strings.Join(args, " "), errb.String())
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("fila-server %s: %v", strings.Join(args, " "), err)
	}
	return serverRun{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// assertEmpty fails the test if dir holds anything.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s holds %s; want nothing", dir, e.Name())
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			dir := t.TempDir()
			r := runServer(t, dir, nil, arg)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("fila-server %s: exit %d, stderr %q; want exit 0 and no stderr", arg, r.code, r.stderr)
			}
			for _, want := range []string{
				"fila-server runs the Fila message broker",
				"Usage:",
				"--config PATH", "fila.toml", "the working directory", "/etc/fila/fila.toml",
				"FILA_<SECTION>_<KEY>", "docs/configuration.md",
				"--listen ADDR", "--data-dir DIR", "--http ADDR", "--print-config", "--version", "-h, --help",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("fila-server %s printed\n%s\nwant it to contain %q", arg, r.stdout, want)
				}
			}
			assertEmpty(t, dir)
		})
	}
}

func TestVersion(t *testing.T) {
	dir := t.TempDir()
	r := runServer(t, dir, nil, "--version")
	want := fmt.Sprintf("fila-server %s\nprotocol %d (oldest supported: %d)\n", version, wire.ProtocolVersion, wire.MinProtocolVersion)
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("fila-server --version: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", r.code, r.stdout, r.stderr, want)
	}
	assertEmpty(t, dir)
}

// TestRefusesArguments checks that what is not one of its flags makes
// fila-server exit 2 with a message, without listening and without
// creating its data directory.
func TestRefusesArguments(t *testing.T) {
	addr := filatest.FreePorts(t, 1)[0]
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"version"}, `unexpected argument "version": fila-server takes flags only (did you mean --version?)`},
		{[]string{"serve"}, `unexpected argument "serve": fila-server takes flags only`},
		{[]string{"--listen", addr, "extra"}, `unexpected argument "extra"`},
		{[]string{"--bogus"}, "unknown flag --bogus"},
		{[]string{"-bogus"}, "unknown flag --bogus"},
		{[]string{"--listen"}, "flag needs an argument: --listen"},
		{[]string{"--print-config=maybe"}, `invalid boolean value "maybe" for --print-config`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			r := runServer(t, dir, []string{"FILA_SERVER_LISTEN_ADDR=" + addr, "FILA_LOG_LEVEL=info"}, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d; want 2", r.code)
			}
			wantErr := "fila-server: " + tt.want
			if !strings.HasPrefix(r.stderr, wantErr) || !strings.Contains(r.stderr, "Run 'fila-server --help' for usage.") {
				t.Errorf("stderr = %q; want it to start %q and point to --help", r.stderr, wantErr)
			}
			if strings.Contains(r.stderr, "listening") || r.stdout != "" {
				t.Errorf("stdout %q, stderr %q; want nothing but the error", r.stdout, r.stderr)
			}
			assertEmpty(t, dir)
		})
	}
}

// TestFlagsBeatEnvironment starts fila-server with the environment
// naming one address and data directory and the flags others: the flags
// win.
func TestFlagsBeatEnvironment(t *testing.T) {
	addrs := filatest.FreePorts(t, 2)
	envAddr, flagAddr := addrs[0], addrs[1]
	envDir, flagDir := t.TempDir(), t.TempDir()
	args := []string{"--listen", flagAddr, "--data-dir", flagDir}

	r := runServer(t, envDir, []string{"FILA_SERVER_LISTEN_ADDR=" + envAddr, "FILA_STORAGE_DATA_DIR=" + envDir},
		append(args, "--print-config")...)
	if r.code != 0 {
		t.Fatalf("--print-config: exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("listen_addr = %q", flagAddr), "# flag --listen\n",
		fmt.Sprintf("data_dir = %q", flagDir), "# flag --data-dir\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--print-config printed\n%s\nwant it to contain %q", r.stdout, want)
		}
	}

	// StartProc gives the environment's address and directory; the
	// flags override them.
	p, err := filatest.StartProc(filatest.ProcConfig{Bin: filatest.Binary(t), DataDir: envDir, Listen: envAddr, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Minute)
	if p.Addr != flagAddr {
		t.Fatalf("fila-server listens on %q; want --listen's %s\nlog:\n%s", p.Addr, flagAddr, p.Log())
	}
	if !strings.Contains(p.Log(), "data_dir="+flagDir) {
		t.Errorf("log:\n%s\nwant data_dir=%s", p.Log(), flagDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, flagAddr)
	if err != nil {
		t.Fatalf("Connect(%s) = %v", flagAddr, err)
	}
	defer c.Close()
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("flags")); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(flagDir); len(entries) == 0 {
		t.Errorf("--data-dir %s is empty; want the store there", flagDir)
	}
	assertEmpty(t, envDir)
	if conn, err := net.DialTimeout("tcp", envAddr, 5*time.Second); err == nil {
		conn.Close()
		t.Errorf("something listens on the environment's address %s", envAddr)
	}
}
