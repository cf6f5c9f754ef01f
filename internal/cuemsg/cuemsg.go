// Package cuemsg words why a value fails a CUE schema in terms a user can
// act on ("must be at most 10", `must be one of "a", "b"`), instead of
// CUE's own phrasing ("empty disjunction", "conflicting values"), which
// speaks of the evaluator rather than of the field the user wrote.
//
// It reads the schema's source expression: evaluated values lose the
// defaults' marks and inline references, while the source says what the
// schema's author wrote.
package cuemsg

import (
	"fmt"
	"math/bits"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"
)

// Want says what schema (a field of a schema, as looked up by path) asks
// of given, starting with "must": the first constraint given breaks. scope
// resolves the references of the schema's source (definitions such as
// #Name); it may be the zero Value. given must come from the same
// cue.Context as schema.
func Want(schema, scope, given cue.Value) string {
	expr := sourceExpr(schema)
	if expr == nil {
		return "must be " + Kind(schema.IncompleteKind())
	}
	w := &wanter{ctx: schema.Context(), scope: scope, given: given}
	return w.want(expr, schema)
}

// Show renders a value a user wrote, for "got …": scalars as written
// (50, "verbose", true), composite values by their kind.
func Show(v cue.Value) string {
	switch k := v.IncompleteKind(); {
	case !v.IsConcrete():
		return fmt.Sprint(v)
	case k == cue.StructKind:
		return "a struct"
	case k == cue.ListKind:
		return "a list"
	}
	s := fmt.Sprint(v)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// Kind words a set of CUE kinds: "an integer", "a string or a struct".
func Kind(k cue.Kind) string {
	if k&cue.NumberKind == cue.NumberKind {
		k = k&^cue.NumberKind | cue.FloatKind // float covers int
	}
	var words []string
	for k != 0 {
		bit := cue.Kind(1) << bits.TrailingZeros(uint(k))
		k &^= bit
		switch bit {
		case cue.NullKind:
			words = append(words, "null")
		case cue.BoolKind:
			words = append(words, "a bool (true or false)")
		case cue.IntKind:
			words = append(words, "an integer")
		case cue.FloatKind:
			words = append(words, "a number")
		case cue.StringKind:
			words = append(words, "a string")
		case cue.BytesKind:
			words = append(words, "bytes")
		case cue.StructKind:
			words = append(words, "a struct")
		case cue.ListKind:
			words = append(words, "a list")
		}
	}
	if len(words) == 0 {
		return "a value"
	}
	return strings.Join(words, " or ")
}

type wanter struct {
	ctx   *cue.Context
	scope cue.Value
	given cue.Value
}

// want words expr, whose evaluated value is v (zero when not known).
func (w *wanter) want(expr ast.Expr, v cue.Value) string {
	if d := w.deref(expr); d != expr {
		expr, v = d, cue.Value{}
	}
	ds := alternatives(expr)
	if len(ds) > 1 {
		return w.wantOneOf(ds)
	}
	if ds[0] != expr {
		expr, v = ds[0], cue.Value{}
	}
	if !v.Exists() {
		v = w.build(expr)
	}
	if v.Exists() && v.Err() == nil {
		if k := v.IncompleteKind(); w.given.Kind()&k == 0 && k != cue.BottomKind {
			return "must be " + Kind(k)
		}
	}
	cs := conjuncts(expr)
	// Bounds first: "must be at most 10" says more than "must be a uint".
	for _, pass := range []func(ast.Expr) bool{isBound, func(e ast.Expr) bool { return !isBound(e) }} {
		for _, c := range cs {
			if !pass(c) || w.satisfies(c) {
				continue
			}
			return wantOne(c)
		}
	}
	return "must satisfy " + text(expr)
}

// wantOneOf words a disjunction: an enumeration lists its values; otherwise
// the one alternative of given's kind is worded, or the kinds are listed.
func (w *wanter) wantOneOf(ds []ast.Expr) string {
	enum := true
	for _, d := range ds {
		if _, ok := d.(*ast.BasicLit); !ok {
			enum = false
		}
	}
	if enum {
		vals := make([]string, len(ds))
		for i, d := range ds {
			vals[i] = text(d)
		}
		return "must be one of " + strings.Join(vals, ", ")
	}
	var sameKind []ast.Expr
	var kinds []string
	for _, d := range ds {
		d = w.deref(d)
		var k cue.Kind
		if _, ok := d.(*ast.StructLit); ok {
			k = cue.StructKind
		} else if v := w.build(d); v.Exists() {
			k = v.IncompleteKind()
		} else {
			return "must satisfy " + joinText(ds, " | ")
		}
		if w.given.Kind()&k != 0 {
			sameKind = append(sameKind, d)
		}
		kinds = append(kinds, kindOrValue(d, k))
	}
	if len(sameKind) == 1 {
		return w.want(sameKind[0], cue.Value{})
	}
	return "must be " + strings.Join(dedupe(kinds), " or ")
}

// build evaluates expr in the scope, the zero Value when it does not
// evaluate on its own.
func (w *wanter) build(expr ast.Expr) cue.Value {
	opts := []cue.BuildOption{cue.InferBuiltins(true)}
	if w.scope.Exists() {
		opts = append(opts, cue.Scope(w.scope))
	}
	v := w.ctx.BuildExpr(expr, opts...)
	if v.Err() != nil {
		return cue.Value{}
	}
	return v
}

// satisfies reports whether given meets the constraint c; a constraint
// that cannot be evaluated counts as met, so it is not blamed.
func (w *wanter) satisfies(c ast.Expr) bool {
	v := w.build(c)
	if !v.Exists() {
		return true
	}
	return v.Unify(w.given).Validate(cue.Concrete(true)) == nil
}

// wantOne words a single constraint.
func wantOne(c ast.Expr) string {
	switch e := c.(type) {
	case *ast.UnaryExpr:
		x := text(e.X)
		switch e.Op {
		case token.GEQ:
			return "must be at least " + x
		case token.LEQ:
			return "must be at most " + x
		case token.GTR:
			return "must be greater than " + x
		case token.LSS:
			return "must be less than " + x
		case token.NEQ:
			if x == `""` {
				return "must not be empty"
			}
			return "must not be " + x
		case token.MAT:
			return "must match the regular expression " + unquote(e.X)
		case token.NMAT:
			return "must not match the regular expression " + unquote(e.X)
		}
	case *ast.Ident:
		switch e.Name {
		case "uint":
			return "must not be negative"
		}
		return "must be " + text(c)
	case *ast.BasicLit:
		return "must be " + text(c)
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && len(e.Args) == 1 {
			n := text(e.Args[0])
			switch text(sel) {
			case "strings.MaxRunes":
				return "must be at most " + n + " characters long"
			case "strings.MinRunes":
				return "must be at least " + n + " characters long"
			case "list.MaxItems":
				return "must have at most " + n + " items"
			case "list.MinItems":
				return "must have at least " + n + " items"
			}
		}
	}
	return "must satisfy " + text(c)
}

// kindOrValue words one alternative of a disjunction: a literal as
// written, a struct by its fields, anything else by its kind.
func kindOrValue(d ast.Expr, k cue.Kind) string {
	switch e := d.(type) {
	case *ast.BasicLit:
		return text(d)
	case *ast.StructLit:
		var names []string
		for _, el := range e.Elts {
			if f, ok := el.(*ast.Field); ok {
				if name, _, err := ast.LabelName(f.Label); err == nil {
					names = append(names, name)
				}
			}
		}
		if len(names) > 0 {
			return "a struct {" + strings.Join(names, ", ") + "}"
		}
	}
	return Kind(k)
}

// deref follows a reference to a definition or field of the scope
// (#Name) to the expression it was written as, so its constraints can be
// worded one by one.
func (w *wanter) deref(e ast.Expr) ast.Expr {
	for range 8 { // references to references, but never a cycle
		id, ok := e.(*ast.Ident)
		if !ok || !w.scope.Exists() || predeclared(id.Name) {
			return e
		}
		v := w.scope.LookupPath(cue.ParsePath(id.Name))
		x := sourceExpr(v)
		if !v.Exists() || x == nil {
			return e
		}
		e = x
	}
	return e
}

// predeclared reports CUE's type names, never references to follow.
func predeclared(name string) bool {
	switch name {
	case "_", "null", "bool", "int", "float", "number", "string", "bytes",
		"uint", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
		"rune", "float32", "float64":
		return true
	}
	return false
}

func isBound(e ast.Expr) bool {
	u, ok := e.(*ast.UnaryExpr)
	return ok && u.Op != token.MUL && u.Op != token.SUB && u.Op != token.ADD && u.Op != token.NOT
}

// sourceExpr is the expression a schema field was written as.
func sourceExpr(v cue.Value) ast.Expr {
	src := v.Source()
	if f, ok := src.(*ast.Field); ok {
		src = f.Value
	}
	e, _ := src.(ast.Expr)
	return e
}

// alternatives splits a disjunction. Defaults are dropped where another
// alternative covers them (*1 | int & >=1) and kept as plain values in an
// enumeration (*"small" | "large"), so they never shadow the real rule.
func alternatives(e ast.Expr) []ast.Expr {
	ds := split(e, token.OR)
	enum := true
	for _, d := range ds {
		if u, ok := d.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			d = u.X
		}
		if _, ok := d.(*ast.BasicLit); !ok {
			enum = false
		}
	}
	var keep []ast.Expr
	for _, d := range ds {
		if u, ok := d.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			if !enum && len(ds) > 1 {
				continue
			}
			d = u.X
		}
		keep = append(keep, d)
	}
	return keep
}

func conjuncts(e ast.Expr) []ast.Expr { return split(e, token.AND) }

func split(e ast.Expr, op token.Token) []ast.Expr {
	if p, ok := e.(*ast.ParenExpr); ok {
		return split(p.X, op)
	}
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == op {
		return append(split(b.X, op), split(b.Y, op)...)
	}
	return []ast.Expr{e}
}

// text formats an expression on one line.
func text(e ast.Node) string {
	b, err := format.Node(e)
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

func joinText(es []ast.Expr, sep string) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = text(e)
	}
	return strings.Join(parts, sep)
}

// unquote shows a regular expression without CUE's string escapes.
func unquote(e ast.Expr) string {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		if s, err := literal.Unquote(lit.Value); err == nil {
			return s
		}
	}
	return text(e)
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
