package archlint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fila-mq/fila/"

// layers says, for every package of the broker and the client core, which
// of the repository's packages its non-test files may import. The
// direction is cmd → server → node → shard → {sched, hook, store}: the
// server speaks the wire and reaches the shards only through the node,
// which checks permissions, routes, and runs the hooks. In a cluster the
// node routes through cluster, which drives the Raft groups over the
// shards (cluster → {shard, raftlog, peer}). auth and rtconf
// are under the node; the server also uses auth, to authenticate a
// connection at its handshake and to hear of key changes. metrics reads
// the scheduler's, the storage's and the hooks' stats at scrape time and
// is updated by the server; httpapi serves it beside the health probes.
// tracing records the spans of traced messages for the server and knows
// nothing of the broker; otlptest is the tests' OTLP receiver.
// fault is under everything, and the client core knows nothing of the broker. A package
// missing here fails the test: place it when you add it.
var layers = map[string][]string{
	"broker/cmd/fila-server": {"broker/internal/auth", "broker/internal/cluster", "broker/internal/config", "broker/internal/hook", "broker/internal/node", "broker/internal/rtconf",
		"broker/internal/sched", "broker/internal/server", "broker/internal/shard", "broker/internal/store", "broker/internal/fault", "sdk/core/wire",
		"broker/internal/httpapi", "broker/internal/metrics", "broker/internal/tracing"},
	"broker/internal/server":       {"broker/internal/auth", "broker/internal/metrics", "broker/internal/tracing", "broker/internal/node", "broker/internal/fault", "sdk/core/wire"},
	"broker/internal/tracing":      {},
	"broker/internal/otlptest":     {},
	"broker/internal/metrics":      {"broker/internal/hook", "broker/internal/sched", "broker/internal/store", "sdk/core/wire"},
	"broker/internal/httpapi":      {"broker/internal/auth"},
	"broker/internal/node":         {"broker/internal/auth", "broker/internal/cluster", "broker/internal/hook", "broker/internal/rtconf", "broker/internal/sched", "broker/internal/shard", "broker/internal/fault", "sdk/core/wire"},
	"broker/internal/shard":        {"broker/internal/sched", "broker/internal/store", "broker/internal/fault"},
	"broker/internal/sched":        {"broker/internal/sched/bucket", "broker/internal/sched/drr", "broker/internal/sched/stfq", "broker/internal/sched/idem", "broker/internal/fault"},
	"broker/internal/sched/bucket": {},
	"broker/internal/sched/drr":    {},
	"broker/internal/sched/stfq":   {},
	"broker/internal/sched/idem":   {},
	"broker/internal/store":        {"broker/internal/fault"},
	"broker/internal/raftlog":      {"broker/internal/store"},
	"broker/internal/cluster":      {"broker/internal/peer", "broker/internal/raftlog", "broker/internal/sched", "broker/internal/shard", "broker/internal/store", "broker/internal/fault"},
	"broker/internal/peer":         {},
	"broker/internal/hook":         {"broker/internal/fault"},
	"broker/internal/auth":         {"broker/internal/fault"},
	"broker/internal/rtconf":       {"broker/internal/fault"},
	"broker/internal/config":       {"broker/internal/sched"},
	"broker/internal/fault":        {},
	"broker/internal/tmpfs":        {},
	"broker/filatest":              {},
	"sdk/core":                     {"sdk/core/wire"},
	"sdk/core/wire":                {},

	// The cluster tests' history checker: pure, the standard library only.
	"broker/internal/cluster/history": {},
}

// TestImportDirection parses the imports of every non-test Go file of
// the broker and the client core and checks them against layers.
func TestImportDirection(t *testing.T) {
	seen := map[string]bool{}
	for _, top := range []string{"broker", "sdk/core"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); name == "testdata" || name == "e2e" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			pkg := filepath.ToSlash(rel)
			allowed, placed := layers[pkg]
			if !placed {
				if !seen[pkg] {
					t.Errorf("package %s is not placed in the import layers (archlint/imports_test.go)", pkg)
				}
				seen[pkg] = true
				return nil
			}
			seen[pkg] = true
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				dep, ours := strings.CutPrefix(p, module)
				if ours && !slices.Contains(allowed, dep) {
					name, _ := filepath.Rel(root, path)
					t.Errorf("%s imports %s: %s may import only %v", name, dep, pkg, allowed)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for pkg := range layers {
		if !seen[pkg] {
			t.Errorf("layers names %s, which has no Go files", pkg)
		}
	}
}
