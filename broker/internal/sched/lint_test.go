package sched

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

// TestDeterministic enforces the package's rules on its non-test files
// and those of its leaf packages: imports only from the standard library,
// package fault and its own leaves; no goroutines, no clock, no
// randomness, no I/O.
func TestDeterministic(t *testing.T) {
	const self = "github.com/fila-mq/fila/broker/internal/sched"
	allowed := map[string]bool{
		"github.com/fila-mq/fila/broker/internal/fault": true,
		self + "/bucket": true,
		self + "/drr":    true,
		self + "/idem":   true,
	}
	banned := map[string]string{
		"math/rand": "randomness", "math/rand/v2": "randomness", "crypto/rand": "randomness",
		"os": "I/O", "io": "I/O", "net": "I/O", "sync": "goroutines", "sync/atomic": "goroutines",
		"unsafe": "unsafe memory", "reflect": "reflection on the hot path",
	}
	for _, dir := range []string{".", "drr", "bucket", "idem"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if why, ok := banned[p]; ok {
					t.Errorf("%s imports %s (%s)", path, p, why)
				}
				if strings.Contains(p, ".") && !allowed[p] {
					t.Errorf("%s imports %s: only the standard library, fault and sched's leaves", path, p)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s: go statement", fset.Position(n.Pos()))
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Since" || n.Sel.Name == "Until" || n.Sel.Name == "Sleep" || n.Sel.Name == "After" || n.Sel.Name == "NewTimer" || n.Sel.Name == "NewTicker") {
						t.Errorf("%s: time.%s: time enters through Tick", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
				return true
			})
		}
	}
}
