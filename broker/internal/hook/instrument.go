package hook

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/yuin/gopher-lua/ast"
)

// The metered helpers an instrumented chunk receives as its arguments and
// keeps in locals. Their names are not Lua identifiers, so a script can
// neither name, reassign nor shadow them.
const (
	nameConcat = "(concat)" // a .. b .. c        → (concat)(a, b, c)
	nameTable  = "(table)"  // {x = 1, [k] = v}   → (table)({x = 1}, 1, k, v)
	nameFunc   = "(func)"   // function() ... end → (func)(function() ... end)
	nameSet    = "(set)"    // t[k] = v           → (set)(t, k, v)
	numHelpers = 4
)

// instrument rewrites a parsed chunk so that every operation whose
// allocation gopher-lua cannot bound by a constant goes through a metered
// helper: string concatenation, table constructors, closures and stores
// into tables. gopher-lua has no allocator hook, so this is where the
// memory limit gets its hold on the VM; builtins are metered where they
// are written (strlib.go, tablelib.go, ops.go).
//
// The result is a chunk
//
//	local (concat), (table), (func), (set) = ...
//	return function() <the script, rewritten> end
//
// which a state runs once, with the four helpers as arguments, to get the
// function that runs the script's top level; each call then runs that
// function in a fresh global table. The top level is not a vararg
// function, so "..." at the top level of a script is a compile error.
// Statement and expression lines are kept, so error positions stay right.
//
// Semantics are Lua 5.1's, with two liberties the manual allows: the
// targets of a multiple assignment are assigned in order, and the
// non-string keys of a table constructor are stored after its other
// fields (the manual leaves both orders undefined).
//
// instrument refuses a chunk nested deeper than maxNesting levels of
// blocks and expressions, as Lua's own parser does: gopher-lua's compiler
// recurses on the syntax tree, and a million nested parentheses would
// overflow the Go stack, which no recover survives.
func instrument(chunk []ast.Stmt) (stmts []ast.Stmt, err error) {
	var in instrumenter
	defer func() {
		if r := recover(); r != nil {
			deep, ok := r.(tooDeep)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("line %d: more than %d nested levels", int(deep), maxNesting)
		}
	}()
	body := in.block(chunk)
	top := &ast.FunctionExpr{ParList: &ast.ParList{}, Stmts: body}
	prologue := &ast.LocalAssignStmt{
		Names: []string{nameConcat, nameTable, nameFunc, nameSet},
		Exprs: []ast.Expr{&ast.Comma3Expr{}},
	}
	return []ast.Stmt{prologue, &ast.ReturnStmt{Exprs: []ast.Expr{top}}}, nil
}

// maxNesting is how deep blocks and expressions may nest (Lua 5.1's
// LUAI_MAXCCALLS).
const maxNesting = 200

// tooDeep is the line of a construct nested too deep, panicked with out of
// the instrumenter's recursion.
type tooDeep int

type instrumenter struct {
	temps int // temporaries named so far, for unique names
	depth int // of the block or expression being rewritten
}

// enter notes one more level of nesting at node, and returns the function
// that leaves it.
func (in *instrumenter) enter(node ast.PositionHolder) func() {
	in.depth++
	if in.depth > maxNesting {
		panic(tooDeep(node.Line()))
	}
	return func() { in.depth-- }
}

func (in *instrumenter) block(stmts []ast.Stmt) []ast.Stmt {
	out := make([]ast.Stmt, 0, len(stmts))
	for _, s := range stmts {
		out = append(out, in.stmt(s)...)
	}
	return out
}

func (in *instrumenter) stmt(s ast.Stmt) []ast.Stmt {
	defer in.enter(s)()
	switch s := s.(type) {
	case *ast.AssignStmt:
		return in.assign(s)
	case *ast.LocalAssignStmt:
		if len(s.Names) == 1 && len(s.Exprs) == 1 {
			if fn, ok := s.Exprs[0].(*ast.FunctionExpr); ok {
				// local function f: declare f before the closure is made, so
				// that its body can call it (gopher-lua does the same for
				// local f = function).
				decl := &ast.LocalAssignStmt{Names: s.Names, Exprs: []ast.Expr{}}
				decl.SetLine(s.Line())
				assign := &ast.AssignStmt{Lhs: []ast.Expr{ident(s.Names[0], s.Line())}, Rhs: []ast.Expr{in.function(fn)}}
				assign.SetLine(s.Line())
				return []ast.Stmt{decl, assign}
			}
		}
		s.Exprs = in.exprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = in.expr(s.Expr)
	case *ast.DoBlockStmt:
		s.Stmts = in.block(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = in.expr(s.Condition)
		s.Stmts = in.block(s.Stmts)
	case *ast.RepeatStmt:
		s.Stmts = in.block(s.Stmts)
		s.Condition = in.expr(s.Condition)
	case *ast.IfStmt:
		s.Condition = in.expr(s.Condition)
		s.Then = in.block(s.Then)
		s.Else = in.block(s.Else)
	case *ast.NumberForStmt:
		s.Init = in.expr(s.Init)
		s.Limit = in.expr(s.Limit)
		if s.Step != nil {
			s.Step = in.expr(s.Step)
		}
		s.Stmts = in.block(s.Stmts)
	case *ast.GenericForStmt:
		s.Exprs = in.exprs(s.Exprs)
		s.Stmts = in.block(s.Stmts)
	case *ast.FuncDefStmt:
		return []ast.Stmt{in.funcDef(s)}
	case *ast.ReturnStmt:
		s.Exprs = in.exprs(s.Exprs)
	}
	// BreakStmt, LabelStmt and GotoStmt hold no expressions.
	return []ast.Stmt{s}
}

// assign rewrites stores into tables as calls of (set).
func (in *instrumenter) assign(s *ast.AssignStmt) []ast.Stmt {
	indexed := false
	for _, lhs := range s.Lhs {
		if _, ok := lhs.(*ast.AttrGetExpr); ok {
			indexed = true
		}
	}
	if !indexed {
		s.Rhs = in.exprs(s.Rhs)
		return []ast.Stmt{s}
	}
	line := s.Line()
	if len(s.Lhs) == 1 && len(s.Rhs) == 1 {
		target := s.Lhs[0].(*ast.AttrGetExpr)
		return []ast.Stmt{setStmt(line, in.expr(target.Object), in.expr(target.Key), single(in.expr(s.Rhs[0])))}
	}

	// A multiple assignment evaluates the targets' tables and keys, then
	// all values, and only then assigns:
	//
	//	do
	//		local (t1), (k1) = obj, key
	//		local (v1), (v2) = rhs...
	//		(set)((t1), (k1), (v1)); x = (v2)
	//	end
	var prefixNames []string
	var prefixExprs []ast.Expr
	type target struct {
		name       ast.Expr // an identifier target, or nil
		tbl, key   string   // an indexed target's temporaries
		valueLocal string
	}
	targets := make([]target, len(s.Lhs))
	valueNames := make([]string, len(s.Lhs))
	for i, lhs := range s.Lhs {
		valueNames[i] = in.temp()
		targets[i].valueLocal = valueNames[i]
		if a, ok := lhs.(*ast.AttrGetExpr); ok {
			targets[i].tbl, targets[i].key = in.temp(), in.temp()
			prefixNames = append(prefixNames, targets[i].tbl, targets[i].key)
			prefixExprs = append(prefixExprs, single(in.expr(a.Object)), single(in.expr(a.Key)))
		} else {
			targets[i].name = lhs
		}
	}
	var body []ast.Stmt
	if len(prefixNames) > 0 {
		prefix := &ast.LocalAssignStmt{Names: prefixNames, Exprs: prefixExprs}
		prefix.SetLine(line)
		body = append(body, prefix)
	}
	values := &ast.LocalAssignStmt{Names: valueNames, Exprs: in.exprs(s.Rhs)}
	values.SetLine(line)
	body = append(body, values)
	for _, t := range targets {
		if t.name != nil {
			a := &ast.AssignStmt{Lhs: []ast.Expr{t.name}, Rhs: []ast.Expr{ident(t.valueLocal, line)}}
			a.SetLine(line)
			body = append(body, a)
		} else {
			body = append(body, setStmt(line, ident(t.tbl, line), ident(t.key, line), ident(t.valueLocal, line)))
		}
	}
	do := &ast.DoBlockStmt{Stmts: body}
	do.SetLine(line)
	do.SetLastLine(s.LastLine())
	return []ast.Stmt{do}
}

// funcDef rewrites "function a.b:c() end" and its simpler forms into an
// assignment of a metered closure.
func (in *instrumenter) funcDef(s *ast.FuncDefStmt) ast.Stmt {
	line := s.Line()
	fn := s.Func
	if s.Name.Func == nil {
		// A method gets its implicit first parameter self.
		fn.ParList = &ast.ParList{
			HasVargs: fn.ParList.HasVargs,
			Names:    append([]string{"self"}, fn.ParList.Names...),
		}
		key := &ast.StringExpr{Value: s.Name.Method}
		key.SetLine(line)
		return setStmt(line, in.expr(s.Name.Receiver), key, in.function(fn))
	}
	if a, ok := s.Name.Func.(*ast.AttrGetExpr); ok {
		return setStmt(line, in.expr(a.Object), in.expr(a.Key), in.function(fn))
	}
	a := &ast.AssignStmt{Lhs: []ast.Expr{s.Name.Func}, Rhs: []ast.Expr{in.function(fn)}}
	a.SetLine(line)
	a.SetLastLine(s.LastLine())
	return a
}

func (in *instrumenter) exprs(es []ast.Expr) []ast.Expr {
	for i, e := range es {
		es[i] = in.expr(e)
	}
	return es
}

func (in *instrumenter) expr(e ast.Expr) ast.Expr {
	defer in.enter(e)()
	switch e := e.(type) {
	case *ast.AttrGetExpr:
		e.Object = in.expr(e.Object)
		e.Key = in.expr(e.Key)
	case *ast.TableExpr:
		return in.table(e)
	case *ast.FuncCallExpr:
		if e.Func != nil {
			e.Func = in.expr(e.Func)
		}
		if e.Receiver != nil {
			e.Receiver = in.expr(e.Receiver)
		}
		e.Args = in.exprs(e.Args)
	case *ast.LogicalOpExpr:
		e.Lhs = in.expr(e.Lhs)
		e.Rhs = in.expr(e.Rhs)
	case *ast.RelationalOpExpr:
		e.Lhs = in.expr(e.Lhs)
		e.Rhs = in.expr(e.Rhs)
	case *ast.ArithmeticOpExpr:
		e.Lhs = in.expr(e.Lhs)
		e.Rhs = in.expr(e.Rhs)
	case *ast.StringConcatOpExpr:
		return in.concat(e)
	case *ast.UnaryMinusOpExpr:
		e.Expr = in.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		e.Expr = in.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		e.Expr = in.expr(e.Expr)
	case *ast.FunctionExpr:
		return in.function(e)
	}
	// Constants, identifiers and "..." allocate nothing.
	return e
}

// concat turns a chain a .. b .. c (right-associative, so a .. (b .. c))
// into one call (concat)(a, b, c). A chain of string literals is joined
// here, at compile time.
func (in *instrumenter) concat(e *ast.StringConcatOpExpr) ast.Expr {
	var operands []ast.Expr
	var cur ast.Expr = e
	for {
		c, ok := cur.(*ast.StringConcatOpExpr)
		if !ok {
			break
		}
		operands = append(operands, single(in.expr(c.Lhs)))
		cur = c.Rhs
	}
	operands = append(operands, single(in.expr(cur)))

	var literal strings.Builder
	for _, op := range operands {
		s, ok := op.(*ast.StringExpr)
		if !ok {
			return call(nameConcat, e.Line(), operands...)
		}
		literal.WriteString(s.Value)
	}
	folded := &ast.StringExpr{Value: literal.String()}
	folded.SetLine(e.Line())
	return folded
}

// table turns a constructor into (table)(ctor, nkeyed, k1, v1, ...): the
// constructor keeps its positional fields and its fields with string-literal
// keys, nkeyed counts the latter, and every other keyed field moves to the
// call's arguments, to be checked and stored by the helper. A computed
// index such as [1e7] would otherwise make gopher-lua grow the table's
// array part to 1e7 slots in a single unmetered instruction.
func (in *instrumenter) table(t *ast.TableExpr) ast.Expr {
	kept := t.Fields[:0]
	var moved []ast.Expr
	keyed := 0
	for _, f := range t.Fields {
		f.Value = in.expr(f.Value)
		if f.Key == nil {
			kept = append(kept, f)
			continue
		}
		f.Key = in.expr(f.Key)
		if _, ok := f.Key.(*ast.StringExpr); ok {
			kept = append(kept, f)
			keyed++
			continue
		}
		moved = append(moved, single(f.Key), single(f.Value))
	}
	t.Fields = kept
	n := &ast.NumberExpr{Value: strconv.Itoa(keyed)}
	n.SetLine(t.Line())
	return call(nameTable, t.Line(), append([]ast.Expr{t, n}, moved...)...)
}

// function meters the closure a function expression makes.
func (in *instrumenter) function(f *ast.FunctionExpr) ast.Expr {
	f.Stmts = in.block(f.Stmts)
	return call(nameFunc, f.Line(), f)
}

func (in *instrumenter) temp() string {
	in.temps++
	return "(t" + strconv.Itoa(in.temps) + ")"
}

// single makes an expression that could produce several values (a call,
// or "...") produce exactly one, as the operand of an operator does.
func single(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.FuncCallExpr:
		e.AdjustRet = true
	case *ast.Comma3Expr:
		e.AdjustRet = true
	}
	return e
}

func ident(name string, line int) *ast.IdentExpr {
	id := &ast.IdentExpr{Value: name}
	id.SetLine(line)
	id.SetLastLine(line)
	return id
}

func call(helper string, line int, args ...ast.Expr) *ast.FuncCallExpr {
	c := &ast.FuncCallExpr{Func: ident(helper, line), Args: args}
	c.SetLine(line)
	c.SetLastLine(line)
	return c
}

func setStmt(line int, tbl, key, value ast.Expr) ast.Stmt {
	s := &ast.FuncCallStmt{Expr: call(nameSet, line, tbl, key, value)}
	s.SetLine(line)
	s.SetLastLine(line)
	return s
}
