package main

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// staticVersion is the version the test's build sets, as scripts/dist.sh
// and the Dockerfile set a release's.
const staticVersion = "9.8.7-static"

// TestStaticReleaseBuild builds fila-server the way the release archives
// and the container image do (CGO_ENABLED=0, -trimpath, -ldflags "-s -w
// -X main.version=..."), checks that the binary is static, and runs it on
// a fresh data directory: it listens, takes one message from enqueue to
// ack through the Go SDK, reports the version it was built with, and
// exits 0 on SIGTERM.
func TestStaticReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fila-server")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	src, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fila-server")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w -X main.version="+staticVersion, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	checkStatic(t, bin)
	// -trimpath: the binary names its files by module path, not by where
	// they were built.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(src)) {
		t.Errorf("the binary holds its build directory %s: built without -trimpath", src)
	}

	p, err := filatest.StartProc(filatest.ProcConfig{Bin: bin, DataDir: t.TempDir(), Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if p.Addr == "" {
		code, _ := p.Wait(time.Second)
		t.Fatalf("fila-server exited with status %d before it listened:\n%s", code, p.Log())
	}
	if !strings.Contains(p.Log(), "version="+staticVersion) {
		t.Errorf("the startup log does not give version %s:\n%s", staticVersion, p.Log())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, p.Addr)
	if err != nil {
		t.Fatalf("connect to %s: %v\n%s", p.Addr, err, p.Log())
	}
	defer c.Close()
	if got, want := c.ServerName(), "fila-server/"+staticVersion; got != want {
		t.Errorf("server name %q; want %q", got, want)
	}
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("static")); err != nil {
		t.Fatalf("create queue: %v", err)
	}
	payload := []byte("from a static build")
	id, err := c.Producer().Enqueue(ctx, "static", payload)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "static", fila.Prefetch(1))
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	d, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next delivery: %v", err)
	}
	if d.ID() != id || !bytes.Equal(d.Payload(), payload) {
		t.Fatalf("delivered %x %q; want %x %q", d.ID(), d.Payload(), id, payload)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	if !p.Stop(30 * time.Second) {
		t.Fatalf("fila-server did not exit within 30s of SIGTERM:\n%s", p.Log())
	}
	if code, err := p.Wait(time.Second); err != nil || code != 0 {
		t.Fatalf("fila-server exited with status %d (%v) after SIGTERM:\n%s", code, err, p.Log())
	}
}

// checkStatic fails t unless the ELF binary at path is statically
// linked: no program interpreter (PT_INTERP) and no shared library it
// needs (DT_NEEDED).
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter (PT_INTERP): it is dynamically linked", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(libs) > 0 {
		t.Errorf("%s needs shared libraries (DT_NEEDED): %v", path, libs)
	}
}
