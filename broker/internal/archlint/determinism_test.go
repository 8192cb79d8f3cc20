// Package archlint holds tests that keep the architecture: rules on what
// packages may import and do, checked by parsing their source.
package archlint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// A stateMachine is a package that must be a deterministic state machine:
// commands and time in, effects out (the shape of etcd raft's RawNode).
type stateMachine struct {
	dirs    []string        // its directories, from root
	allowed map[string]bool // non-standard imports it may use
	why     string          // what may be imported, for the error
	sync    bool            // may import sync (a buffer pool), never to start goroutines
}

var stateMachines = []stateMachine{
	{
		dirs: []string{"broker/internal/sched", "broker/internal/sched/drr", "broker/internal/sched/stfq", "broker/internal/sched/bucket", "broker/internal/sched/idem"},
		allowed: map[string]bool{
			"github.com/fila-mq/fila/broker/internal/fault":        true,
			"github.com/fila-mq/fila/broker/internal/sched/bucket": true,
			"github.com/fila-mq/fila/broker/internal/sched/drr":    true,
			"github.com/fila-mq/fila/broker/internal/sched/stfq":   true,
			"github.com/fila-mq/fila/broker/internal/sched/idem":   true,
		},
		why: "only the standard library, fault and sched's leaves",
	},
	{
		dirs:    []string{"sdk/core"},
		allowed: map[string]bool{"github.com/fila-mq/fila/sdk/core/wire": true},
		why:     "only the standard library and the codec",
	},
	{
		// The codec recycles large frame buffers in a sync.Pool.
		dirs: []string{"sdk/core/wire"},
		why:  "only the standard library",
		sync: true,
	},
}

// TestDeterministic enforces the rules of the state machines (the
// scheduler and the client core) on their non-test files: imports only
// from the standard library and the packages named; no goroutines, no
// clock, no randomness, no I/O.
func TestDeterministic(t *testing.T) {
	for _, sm := range stateMachines {
		banned := map[string]string{
			"math/rand": "randomness", "math/rand/v2": "randomness", "crypto/rand": "randomness",
			"os": "I/O", "io": "I/O", "net": "I/O", "sync": "goroutines", "sync/atomic": "goroutines",
			"unsafe": "unsafe memory", "reflect": "reflection on the hot path",
		}
		if sm.sync {
			delete(banned, "sync")
		}
		for _, dir := range sm.dirs {
			files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			if len(files) == 0 {
				t.Fatalf("%s: no Go files", dir)
			}
			for _, path := range files {
				if strings.HasSuffix(path, "_test.go") {
					continue
				}
				checkFile(t, path, sm, banned)
			}
		}
	}
}

func checkFile(t *testing.T, path string, sm stateMachine, banned map[string]string) {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := filepath.Rel(root, path)
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if why, ok := banned[p]; ok {
			t.Errorf("%s imports %s (%s)", name, p, why)
		}
		if strings.Contains(p, ".") && !sm.allowed[p] {
			t.Errorf("%s imports %s: %s", name, p, sm.why)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s:%d: go statement", name, fset.Position(n.Pos()).Line)
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" {
				switch n.Sel.Name {
				case "Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker":
					t.Errorf("%s:%d: time.%s: time enters as an argument", name, fset.Position(n.Pos()).Line, n.Sel.Name)
				}
			}
		}
		return true
	})
}
