package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fila-mq/fila/gen/internal/golang"
	"github.com/fila-mq/fila/gen/internal/render"
	"github.com/fila-mq/fila/gen/internal/spec"
)

// root is the repository root, relative to this package.
const root = ".."

// TestGenUpToDate fails when a committed generated file differs from what
// the spec generates now: run `make gen`.
func TestGenUpToDate(t *testing.T) {
	files, err := render.All(root)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := render.Stale(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stale {
		t.Errorf("%s is stale: run make gen", name)
	}
}

func TestSpecChecks(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(root, render.SpecPath))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(string) string
		want string
	}{
		{
			"duplicate code value",
			func(s string) string {
				return s + "\n[[codes]]\nname = \"AGAIN\"\nvalue = 20\nscope = \"domain\"\ndoc = \"x\"\n"
			},
			`value 20 already used by "QUEUE_NOT_FOUND"`,
		},
		{
			"duplicate code name",
			func(s string) string {
				return s + "\n[[codes]]\nname = \"QUEUE_NOT_FOUND\"\nvalue = 99\nscope = \"domain\"\ndoc = \"x\"\n"
			},
			`code "QUEUE_NOT_FOUND": declared twice`,
		},
		{
			"code no operation lists",
			func(s string) string {
				return s + "\n[[codes]]\nname = \"ORPHAN\"\nvalue = 99\nscope = \"domain\"\ndoc = \"x\"\n"
			},
			`code "ORPHAN": no operation lists it`,
		},
		{
			"operation lists an undeclared code",
			func(s string) string {
				return strings.Replace(s, `codes = ["QUEUE_NOT_FOUND", "NOT_A_DLQ", "QUEUE_SHARDED"]`, `codes = ["QUEUE_NOT_FOUND", "NOT_A_DLQ", "QUEUE_SHARDED", "NO_SUCH_CODE"]`, 1)
			},
			`operation "Redrive": lists undeclared code "NO_SUCH_CODE"`,
		},
		{
			"operation lists a status code",
			func(s string) string {
				return strings.Replace(s, `codes = ["QUEUE_NOT_FOUND", "NOT_A_DLQ", "QUEUE_SHARDED"]`, `codes = ["QUEUE_NOT_FOUND", "NOT_A_DLQ", "QUEUE_SHARDED", "FORBIDDEN"]`, 1)
			},
			`lists status code "FORBIDDEN"`,
		},
		{
			"duplicate opcode",
			func(s string) string {
				return strings.Replace(s, "opcode = 0x0302", "opcode = 0x0301", 1)
			},
			`opcode 0x0301 already used`,
		},
		{
			"unknown field type",
			func(s string) string {
				return strings.Replace(s, `{ name = "nonce", type = "u64"`, `{ name = "nonce", type = "u128"`, 1)
			},
			`unknown type "u128"`,
		},
		{
			"max on a field that is not a list",
			func(s string) string {
				return strings.Replace(s, `{ name = "nonce", type = "u64"`, `{ name = "nonce", type = "u64", max = 3`, 1)
			},
			`field "nonce": max applies to lists only`,
		},
		{
			"required field after an optional one",
			func(s string) string {
				return strings.Replace(s, `{ name = "node_id", type = "string", doc = "ID of the server node." }`,
					`{ name = "node_id", type = "string", optional = true, doc = "ID of the server node." }`, 1)
			},
			`frame HandshakeOk: field "max_frame_size" follows an optional field and must be optional too`,
		},
		{
			"batch list without the protocol's max",
			func(s string) string {
				return strings.Replace(s, `{ name = "items", type = "[]LeaseRef", max = 65536, doc = "Deliveries to acknowledge." }`,
					`{ name = "items", type = "[]LeaseRef", doc = "Deliveries to acknowledge." }`, 1)
			},
			`operation "Ack": items "items": max 0; want protocol.max_batch_size (65536)`,
		},
		{
			"code without a text",
			func(s string) string {
				return strings.Replace(s, `text = "queue not found"`+"\n", "", 1)
			},
			`code "QUEUE_NOT_FOUND": text ""`,
		},
		{
			"struct doc that is not a noun phrase",
			func(s string) string {
				return strings.Replace(s, `doc = "A reference to one leased delivery."`, `doc = "Names one leased delivery."`, 1)
			},
			`struct "LeaseRef": doc must start with a noun phrase`,
		},
		{
			"type name that is not CamelCase",
			func(s string) string {
				return s + "\n[[structs]]\nname = \"key_info\"\ndoc = \"A key again.\"\nfields = []\n"
			},
			`struct "key_info": name must be CamelCase`,
		},
		{
			"enum doc that is not a noun phrase",
			func(s string) string {
				return strings.Replace(s, `doc = "One of the three kinds of permission`, `doc = "Three kinds of permission`, 1)
			},
			`enum "PermissionKind": doc must start with a noun phrase`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Parse([]byte(tc.edit(string(base))))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(edited spec) = %v; want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := spec.Parse(base); err != nil {
		t.Fatalf("the committed spec does not validate: %v", err)
	}
}

// TestGoNameClash: two types whose Go names are one (initialisms in
// capitals) are refused by the Go backend; the spec itself is
// language-neutral and accepts them.
func TestGoNameClash(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(root, render.SpecPath))
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse(append(base, "\n[[structs]]\nname = \"APIKeyInfo\"\ndoc = \"A key again.\"\nfields = []\n"...))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := `struct "APIKeyInfo": Go name APIKeyInfo already used by "ApiKeyInfo"`
	if _, err := golang.Wire(s); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("golang.Wire(spec with APIKeyInfo) = %v; want an error containing %q", err, want)
	}
}

// TestNewCodeGetsErrorValuesOnBothSides adds an error code to a copy of the
// spec, lists it for an operation, regenerates, and builds: both sides get
// the code's error value, with the spec's text, and build without a
// hand-written line.
func TestNewCodeGetsErrorValuesOnBothSides(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a copy of the repository")
	}
	dir := t.TempDir()
	copyTree(t, root, dir)
	specPath := filepath.Join(dir, render.SpecPath)
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b) + "\n[[codes]]\nname = \"QUEUE_PAUSED\"\nvalue = 90\nscope = \"domain\"\ntext = \"queue paused\"\ndoc = \"The queue is paused.\"\n"
	s = strings.Replace(s, `codes = ["QUEUE_NOT_FOUND", "MESSAGE_TOO_LARGE", "QUEUE_SHARDED"]`, `codes = ["QUEUE_NOT_FOUND", "MESSAGE_TOO_LARGE", "QUEUE_SHARDED", "QUEUE_PAUSED"]`, 1)
	if err := os.WriteFile(specPath, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := render.All(dir)
	if err != nil {
		t.Fatalf("generate from the edited spec: %v", err)
	}
	if err := render.Write(dir, files); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, want string
	}{
		{"broker/internal/fault/errors_gen.go", `ErrQueuePaused = &Error{"queue paused"}`},
		{"sdk/go/errors_gen.go", `ErrQueuePaused = errors.New("fila: queue paused")`},
	} {
		if !strings.Contains(string(files[tc.file]), tc.want) {
			t.Errorf("%s does not declare %s", tc.file, tc.want)
		}
	}
	for _, pkg := range []string{"github.com/fila-mq/fila/broker/internal/server", "github.com/fila-mq/fila/sdk/go"} {
		cmd := exec.Command("go", "build", pkg)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build %s with the new code: %v\n%s", pkg, err, out)
		}
	}
}

// generatedBy lists, for each language with generated code, a file of
// its that declares every error code: adding a code to the spec must make
// each stale until regenerated. A new backend adds its line.
var generatedBy = []struct{ lang, file string }{
	{"Go", "sdk/core/wire/codes_gen.go"},
	{"Python", "clients/python/src/fila/_errors_gen.py"},
	{"TypeScript", "clients/typescript/src/errors_gen.ts"},
}

// TestNewCodeMakesEveryLanguageStale adds an error code to a copy of the
// spec without regenerating: the freshness check (make check-gen) must
// name a stale file of every language, and regenerating must clear it.
func TestNewCodeMakesEveryLanguageStale(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(root, render.SpecPath))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := render.All(root)
	if err != nil {
		t.Fatal(err)
	}
	// The committed tree, as generated, plus the edited spec.
	if err := render.Write(dir, files); err != nil {
		t.Fatal(err)
	}
	s := string(base) + "\n[[codes]]\nname = \"QUEUE_PAUSED\"\nvalue = 90\nscope = \"domain\"\ntext = \"queue paused\"\ndoc = \"The queue is paused.\"\n"
	s = strings.Replace(s, `codes = ["QUEUE_NOT_FOUND", "MESSAGE_TOO_LARGE", "QUEUE_SHARDED"]`, `codes = ["QUEUE_NOT_FOUND", "MESSAGE_TOO_LARGE", "QUEUE_SHARDED", "QUEUE_PAUSED"]`, 1)
	if err := os.MkdirAll(filepath.Join(dir, "spec"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, render.SpecPath), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh, err := render.All(dir)
	if err != nil {
		t.Fatalf("generate from the edited spec: %v", err)
	}
	stale, err := render.Stale(dir, fresh)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range generatedBy {
		if !slices.Contains(stale, g.file) {
			t.Errorf("%s: %s is not stale after a code was added to the spec (stale: %v)", g.lang, g.file, stale)
		}
		if !strings.Contains(string(fresh[g.file]), "QUEUE_PAUSED") && !strings.Contains(string(fresh[g.file]), "QueuePaused") {
			t.Errorf("%s: regenerated %s does not declare the new code", g.lang, g.file)
		}
	}
	if err := render.Write(dir, fresh); err != nil {
		t.Fatal(err)
	}
	if stale, err := render.Stale(dir, fresh); err != nil || len(stale) > 0 {
		t.Errorf("after regenerating: stale %v, %v; want none", stale, err)
	}
}

// copyTree copies the repository's sources (not .git, bin or data) to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "data", "testdata", "node_modules":
				if rel != "." {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGeneratedDocComments: the generated Go reads as Go: doc comments are
// // lines, never /* */ blocks, and a type's comment is a sentence about
// it ("EnqueueMessage is one message of an Enqueue batch."), not "X is an
// is ...".
func TestGeneratedDocComments(t *testing.T) {
	files, err := render.All(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, data := range files {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		n++
		for i, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "/*") {
				t.Errorf("%s:%d: a /* */ comment block", name, i+1)
			}
			if strings.Contains(line, " is an is ") || strings.Contains(line, " is a is ") {
				t.Errorf("%s:%d: %q", name, i+1, trimmed)
			}
		}
	}
	if n == 0 {
		t.Fatal("no generated Go files")
	}
}
