package fila_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// TestGoGet checks that `go get` works for users: it serves this module
// and sdk/core from a file-based module proxy (module zips made with
// golang.org/x/mod/zip, as a real proxy would serve them), builds a
// throwaway module that requires the SDK outside the workspace, and runs
// it against a broker. Other dependencies come from the local module
// cache's download directory, so the test needs no network.
func TestGoGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from a proxy")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	sdkDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	coreDir := filepath.Join(sdkDir, "..", "core")
	if _, err := os.Stat(filepath.Join(coreDir, "go.mod")); err != nil {
		t.Skip("sdk/core is not beside this module (not a checkout of the repository)")
	}
	const version = "v0.1.0"
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for path, dir := range map[string]string{
		"github.com/fila-mq/fila/sdk/go":   sdkDir,
		"github.com/fila-mq/fila/sdk/core": coreDir,
	} {
		publish(t, proxy, module.Version{Path: path, Version: version}, dir)
	}

	modcache, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	download := filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download")

	app := filepath.Join(tmp, "app")
	must(t, os.MkdirAll(app, 0o755))
	must(t, os.WriteFile(filepath.Join(app, "go.mod"), []byte("module example.com/app\n\ngo 1.26\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(app, "main.go"), []byte(appSource), 0o644))

	env := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-modcacherw",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(download),
		"GOSUMDB=off",
		"GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
	)
	gocmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = app
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	gocmd("get", "github.com/fila-mq/fila/sdk/go@"+version)
	gocmd("build", "-o", "app", ".")

	cmd := exec.Command(filepath.Join(app, "app"))
	cmd.Env = os.Environ() // FILA_ADDR: the examples' broker (TestMain)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("app: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "got: hello from a module" {
		t.Fatalf("app printed %q; want %q", got, "got: hello from a module")
	}
}

// publish lays out one module version in a GOPROXY directory:
// <path>/@v/list, .info, .mod and .zip.
func publish(t *testing.T, proxy string, mv module.Version, dir string) {
	t.Helper()
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		t.Fatal(err)
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	must(t, os.MkdirAll(vdir, 0o755))
	must(t, os.WriteFile(filepath.Join(vdir, "list"), []byte(mv.Version+"\n"), 0o644))
	info, _ := json.Marshal(map[string]any{"Version": mv.Version, "Time": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	must(t, os.WriteFile(filepath.Join(vdir, mv.Version+".info"), info, 0o644))
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(vdir, mv.Version+".mod"), gomod, 0o644))
	f, err := os.Create(filepath.Join(vdir, mv.Version+".zip"))
	must(t, err)
	defer f.Close()
	if err := zip.CreateFromDir(f, mv, dir); err != nil {
		t.Fatalf("zip %s: %v", mv, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const appSource = `package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := fila.Connect(ctx, cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec("go-get")); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Send(ctx, fila.NewMessage("go-get", []byte("hello from a module")).FairnessKey("app")); err != nil {
		log.Fatal(err)
	}
	sub, err := client.Consumer().Subscribe(ctx, "go-get", fila.Prefetch(1))
	if err != nil {
		log.Fatal(err)
	}
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("got:", string(d.Payload()))
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
}
`
