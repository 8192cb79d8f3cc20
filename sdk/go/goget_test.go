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

// sdkVersion is the version the user modules of TestGoGet and
// TestGoModTidy get this module and sdk/core at.
const sdkVersion = "v0.1.0"

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
	u := newUserModule(t)
	u.gocmd("get", "github.com/fila-mq/fila/sdk/go@"+sdkVersion)
	u.gocmd("build", "-o", "app", ".")

	// Each module's zip carries its LICENSE, the Apache License 2.0, so
	// the module cache holds it beside the code an application builds.
	for _, mod := range []string{"github.com/fila-mq/fila/sdk/go", "github.com/fila-mq/fila/sdk/core"} {
		lic, err := os.ReadFile(filepath.Join(u.modcache, filepath.FromSlash(mod)+"@"+sdkVersion, "LICENSE"))
		if err != nil {
			t.Fatalf("%s@%s: %v", mod, sdkVersion, err)
		}
		if !strings.Contains(string(lic), "Apache License\n                           Version 2.0, January 2004") {
			t.Fatalf("%s@%s: LICENSE is not the Apache License 2.0:\n%.200s", mod, sdkVersion, lic)
		}
	}

	u.runApp("go-get")
}

// A userModule is a throwaway module (example.com/app, whose main.go is
// appSource) outside the workspace, with a go command that gets this
// module and sdk/core from a file-based module proxy.
type userModule struct {
	t        *testing.T
	goBin    string
	dir      string   // the module's directory
	modcache string   // its GOMODCACHE
	env      []string // the go command's environment
}

// newUserModule publishes this module and sdk/core at sdkVersion in a
// file-based module proxy and writes a throwaway module that imports
// the SDK. Its go command works outside the workspace, on the proxy
// then the local module cache's download directory: no network, no
// checksum database.
func newUserModule(t *testing.T) *userModule {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	sdkDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	coreDir := filepath.Join(sdkDir, "..", "core")
	if _, err := os.Stat(filepath.Join(coreDir, "go.mod")); err != nil {
		t.Fatalf("sdk/core is not beside this module: %v", err)
	}
	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	for path, dir := range map[string]string{
		"github.com/fila-mq/fila/sdk/go":   sdkDir,
		"github.com/fila-mq/fila/sdk/core": coreDir,
	} {
		publish(t, proxy, module.Version{Path: path, Version: sdkVersion}, dir)
	}

	gomodcache, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	download := filepath.Join(strings.TrimSpace(string(gomodcache)), "cache", "download")

	u := &userModule{t: t, goBin: goBin, dir: filepath.Join(tmp, "app"), modcache: filepath.Join(tmp, "modcache")}
	must(t, os.MkdirAll(u.dir, 0o755))
	must(t, os.WriteFile(filepath.Join(u.dir, "go.mod"), []byte("module example.com/app\n\ngo 1.26\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(u.dir, "main.go"), []byte(appSource), 0o644))
	u.env = append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-modcacherw -mod=mod",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(download),
		"GOSUMDB=off",
		"GONOSUMDB=*",
		"GOTOOLCHAIN=local",
		"GOMODCACHE="+u.modcache,
	)
	return u
}

// gocmd runs the go command in the module and fails the test if it
// fails.
func (u *userModule) gocmd(args ...string) {
	u.t.Helper()
	cmd := exec.Command(u.goBin, args...)
	cmd.Dir = u.dir
	cmd.Env = u.env
	if out, err := cmd.CombinedOutput(); err != nil {
		u.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runApp runs the module's app binary against the examples' broker
// (TestMain's, at FILA_ADDR) on a new queue, and checks that it got its
// message.
func (u *userModule) runApp(queue string) {
	u.t.Helper()
	cmd := exec.Command(filepath.Join(u.dir, "app"), queue)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("app: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "got: hello from a module" {
		u.t.Fatalf("app printed %q; want %q", got, "got: hello from a module")
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
	queue := "app"
	if len(os.Args) > 1 {
		queue = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := fila.Connect(ctx, cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec(queue)); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Send(ctx, fila.NewMessage(queue, []byte("hello from a module")).FairnessKey("app")); err != nil {
		log.Fatal(err)
	}
	sub, err := client.Consumer().Subscribe(ctx, queue, fila.Prefetch(1))
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
