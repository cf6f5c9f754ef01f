package drivers

import (
	"reflect"
	"slices"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
)

// contextKeys lists the parts of the context a spec refers to
// (cluster, environment, deployment, parameters, services). Filling only
// those is what makes evaluating a spec per deployment cheap: the cost of
// a CUE evaluation grows with the size of what is filled in. all is true
// when the spec uses `context` other than through a plain selector.
type contextKeys struct {
	all  bool
	keys map[string]bool
	// fields lists, per key, the fields of it the spec selects
	// (context.cluster.name); whole marks the keys it uses otherwise too
	// (context.cluster alone, or indexed).
	fields map[string]map[string]bool
	whole  map[string]bool
	// selectsOnly is set when nothing but those selectors reads the
	// context (the spec declares no constraint on it): then the fields
	// selected decide an evaluation, which a cache can key on.
	selectsOnly bool
}

// findContextKeys walks a parsed spec (or a projection of it) for
// references to the top-level `context` field of the spec file scope.
func findContextKeys(f, scope *ast.File) contextKeys {
	// The parser resolves every identifier; a reference to the top-level
	// `context` is one whose scope is the file itself.
	refers := func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		return ok && id.Name == "context" && id.Scope == scope
	}
	ck := contextKeys{keys: map[string]bool{}, fields: map[string]map[string]bool{}, whole: map[string]bool{}}
	handled := map[*ast.Ident]bool{}
	// Inner selectors (context.cluster) seen from the selector around
	// them (context.cluster.name); Walk visits a node before its parts.
	selected := map[*ast.SelectorExpr]bool{}
	ast.Walk(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if in, ok := x.X.(*ast.SelectorExpr); ok && refers(in.X) {
				key, _, err1 := ast.LabelName(in.Sel)
				field, _, err2 := ast.LabelName(x.Sel)
				if err1 == nil && err2 == nil {
					selected[in] = true
					if ck.fields[key] == nil {
						ck.fields[key] = map[string]bool{}
					}
					ck.fields[key][field] = true
				}
			}
			if refers(x.X) {
				handled[x.X.(*ast.Ident)] = true
				if name, _, err := ast.LabelName(x.Sel); err == nil {
					ck.keys[name] = true
					if !selected[x] {
						ck.whole[name] = true
					}
				} else {
					ck.all = true
				}
			}
		case *ast.Ident:
			if refers(x) && !handled[x] {
				ck.all = true
			}
		}
		return true
	}, nil)
	return ck
}

// evalData is what eval fills in, and so what an evaluation depends on
// (a memo's key): data(c), narrowed to the fields the
// spec selects when those decide an evaluation (selectsOnly). A
// deployment's context holds thirty-odd fields (the environment's policy
// among them) where webapp's values read ten: converting the whole
// context was a fifth of evaluating them, and filling only the ten takes
// an eighth off.
func (ck contextKeys) evalData(c Context) map[string]any {
	d := ck.data(c)
	if !ck.selectsOnly || ck.all {
		return d
	}
	for k, fields := range ck.fields {
		if ck.whole[k] {
			continue
		}
		if part, ok := d[k]; ok {
			d[k] = pickFields(part, fields)
		}
	}
	return d
}

// pickFields returns the fields of a context part (a struct of the
// context, or a map) named in want, as CUE's conversion of the whole part
// would give them: a struct's fields by their JSON names, without those
// the conversion leaves out (unexported, "-", omitempty and zero).
func pickFields(part any, want map[string]bool) map[string]any {
	out := make(map[string]any, len(want))
	v := reflect.ValueOf(part)
	switch v.Kind() {
	case reflect.Map:
		for name := range want {
			if x := v.MapIndex(reflect.ValueOf(name)); x.IsValid() {
				out[name] = x.Interface()
			}
		}
	case reflect.Struct:
		for _, f := range contextFieldsOf(v.Type()) {
			if !want[f.name] {
				continue
			}
			x := v.Field(f.index)
			if f.omitEmpty && x.IsZero() {
				continue
			}
			out[f.name] = x.Interface()
		}
	}
	return out
}

// contextField is a field of a context struct as CUE's conversion names
// and keeps it.
type contextField struct {
	name      string
	index     int
	omitEmpty bool
}

// contextFields are the fields of the context's structs, computed once.
var contextFields = map[reflect.Type][]contextField{
	reflect.TypeFor[ClusterContext]():     structFields(reflect.TypeFor[ClusterContext]()),
	reflect.TypeFor[EnvironmentContext](): structFields(reflect.TypeFor[EnvironmentContext]()),
	reflect.TypeFor[DeploymentContext]():  structFields(reflect.TypeFor[DeploymentContext]()),
}

func contextFieldsOf(t reflect.Type) []contextField {
	if f, ok := contextFields[t]; ok {
		return f
	}
	return structFields(t)
}

// structFields lists t's fields as CUE's conversion of a Go struct (and
// encoding/json) sees them: exported ones named by their JSON tag,
// omitempty as the tag says.
func structFields(t reflect.Type) []contextField {
	var out []contextField
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		out = append(out, contextField{name: name, index: i, omitEmpty: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

// declaresContextOnce reports whether f declares the top-level context
// field once (the `context: _` parseSpec adds): no constraint of the
// spec's own on it.
func declaresContextOnce(f *ast.File) bool {
	n := 0
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok {
			if name, _, err := ast.LabelName(fd.Label); err != nil || name == "context" {
				n++
			}
		}
	}
	return n == 1
}

// none reports whether the spec does not use the context at all.
func (ck contextKeys) none() bool { return !ck.all && len(ck.keys) == 0 }

// data returns the parts of c the spec refers to, as CUE will see them.
// Nil maps become empty so the shape is always that of #Context.
func (ck contextKeys) data(c Context) map[string]any {
	m := make(map[string]any, 5)
	if ck.all || ck.keys["cluster"] {
		m["cluster"] = c.Cluster
	}
	if ck.all || ck.keys["environment"] {
		m["environment"] = c.Environment
	}
	if ck.all || ck.keys["deployment"] {
		m["deployment"] = c.Deployment
	}
	if ck.all || ck.keys["parameters"] {
		p := c.Parameters
		if p == nil {
			p = map[string]any{}
		}
		m["parameters"] = p
	}
	if ck.all || ck.keys["services"] {
		s := c.Services
		if s == nil {
			s = map[string]map[string]Endpoint{}
		}
		m["services"] = s
	}
	return m
}

// declGraph is the dependency graph of a spec's top-level declarations,
// used to build projections: the part of the spec one computation needs.
type declGraph struct {
	file  *ast.File
	named map[string][]ast.Decl      // field or let name -> its declarations
	deps  map[string]map[string]bool // name -> names it refers to
	specs map[string]map[*ast.ImportSpec]bool
}

func newDeclGraph(f *ast.File) *declGraph {
	g := &declGraph{file: f, named: map[string][]ast.Decl{}, deps: map[string]map[string]bool{}, specs: map[string]map[*ast.ImportSpec]bool{}}
	for _, d := range f.Decls {
		var name string
		switch x := d.(type) {
		case *ast.Field:
			n, _, err := ast.LabelName(x.Label)
			if err != nil {
				continue
			}
			name = n
		case *ast.LetClause:
			name = x.Ident.Name
		default:
			continue
		}
		g.named[name] = append(g.named[name], d)
		if g.deps[name] == nil {
			g.deps[name] = map[string]bool{}
			g.specs[name] = map[*ast.ImportSpec]bool{}
		}
		ast.Walk(d, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || id.Scope != f {
				return true
			}
			if spec, ok := id.Node.(*ast.ImportSpec); ok {
				g.specs[name][spec] = true
				return true
			}
			if id.Name != name {
				g.deps[name][id.Name] = true
			}
			return true
		}, nil)
	}
	return g
}

// project returns a file with only what the roots need: the package
// clause, the imports they use, declarations other than fields and lets
// (kept to be safe), and the fields and lets the roots depend on. ok is
// false when the spec has declarations a projection cannot reason about.
func (g *declGraph) project(roots ...string) (*ast.File, bool) {
	need := map[string]bool{"context": true}
	var visit func(string)
	visit = func(n string) {
		if need[n] && n != "context" {
			return
		}
		need[n] = true
		for d := range g.deps[n] {
			if !need[d] {
				visit(d)
			}
		}
	}
	for _, r := range roots {
		visit(r)
	}
	for d := range g.deps["context"] {
		visit(d)
	}
	used := map[*ast.ImportSpec]bool{}
	for n := range need {
		for s := range g.specs[n] {
			used[s] = true
		}
	}
	out := &ast.File{Filename: g.file.Filename}
	for _, d := range g.file.Decls {
		switch x := d.(type) {
		case *ast.Field:
			n, _, err := ast.LabelName(x.Label)
			if err != nil {
				return nil, false
			}
			if need[n] {
				out.Decls = append(out.Decls, d)
			}
		case *ast.LetClause:
			if need[x.Ident.Name] {
				out.Decls = append(out.Decls, d)
			}
		case *ast.ImportDecl:
			var specs []*ast.ImportSpec
			for _, s := range x.Specs {
				if used[s] {
					specs = append(specs, s)
				}
			}
			if len(specs) > 0 {
				out.Decls = append(out.Decls, &ast.ImportDecl{Specs: specs})
			}
		case *ast.Package, *ast.CommentGroup, *ast.Attribute:
			out.Decls = append(out.Decls, d)
		default:
			// Embeddings and top-level comprehensions may define any field.
			return nil, false
		}
	}
	return out, true
}

// projection is a part of the spec compiled on its own, with the parts of
// the context it refers to.
type projection struct {
	value cue.Value
	keys  contextKeys
}

// eval fills the context into the projection; one that does not use the
// context is returned as is.
func (p projection) eval(c Context) cue.Value {
	if p.keys.none() {
		return p.value
	}
	return p.value.FillPath(contextPath, p.keys.evalData(c))
}
