package resolver

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	yaml "go.yaml.in/yaml/v3"
)

// fieldSet is one value an upgrade writes into a deployment file: a
// top-level field (appVersion) or a field of the driver struct
// (driver.version, driver.upgrade). Values are strings.
type fieldSet struct {
	field string // "appVersion", or "version" / "upgrade" under driver
	under string // "" or "driver"
	value string
	// boolean: value is "true" or "false", written as a boolean (a
	// top-level setting such as backupBeforeUpgrade, added when absent).
	boolean bool
}

func (f fieldSet) path() string {
	if f.under == "" {
		return f.field
	}
	return f.under + "." + f.field
}

// setFields returns data with each field set, editing as little as it
// can: CUE files are edited as text at the positions the parser reports,
// so comments and layout stay; YAML files get a one-scalar textual edit
// when a value is replaced, and are re-encoded from their node tree
// (comments kept) when the driver field changes shape.
func setFields(file string, data []byte, sets []fieldSet) ([]byte, error) {
	var err error
	for _, s := range sets {
		switch path.Ext(file) {
		case ".cue":
			data, err = setCUEField(file, data, s)
		case ".yaml", ".yml":
			data, err = setYAMLField(file, data, s)
		default:
			err = &ConfigError{File: file, Msg: "expected a .cue or .yaml file"}
		}
		if err != nil {
			return nil, err
		}
	}
	return data, nil
}

// cannotEdit is the error for a file whose shape the upgrade does not
// rewrite by itself: the user edits it, the upgrade says what to write.
func cannotEdit(file string, s fieldSet, why string) error {
	return &ConfigError{File: file, Field: s.path(), Msg: fmt.Sprintf("%s, so upgrade does not edit it: set %s: %q by hand", why, s.path(), s.value)}
}

// oneField finds the field name among decls and counts its definitions
// (CUE allows several; an upgrade edits only a field defined once).
func oneField(decls []ast.Decl, name string) (*ast.Field, int) {
	var found *ast.Field
	n := 0
	for _, d := range decls {
		fd, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		if l, _, err := ast.LabelName(fd.Label); err == nil && l == name {
			found = fd
			n++
		}
	}
	return found, n
}

func splice(data []byte, from, to int, with string) []byte {
	out := make([]byte, 0, len(data)+len(with))
	out = append(out, data[:from]...)
	out = append(out, with...)
	return append(out, data[to:]...)
}

func isStringLit(e ast.Expr) (*ast.BasicLit, bool) {
	lit, ok := e.(*ast.BasicLit)
	return lit, ok && lit.Kind == token.STRING
}

func setCUEField(file string, data []byte, s fieldSet) ([]byte, error) {
	f, err := parser.ParseFile(file, data, parser.ParseComments)
	if err != nil {
		return nil, cueSyntaxError(file, err)
	}
	quoted := strconv.Quote(s.value)
	if s.boolean {
		return setCUEBool(file, data, f, s)
	}
	if s.under == "" {
		fd, n := oneField(f.Decls, s.field)
		if n != 1 {
			return nil, cannotEdit(file, s, fmt.Sprintf("the file defines %s %d times", s.field, n))
		}
		lit, ok := isStringLit(fd.Value)
		if !ok {
			return nil, cannotEdit(file, s, "its value is not a string literal")
		}
		return splice(data, lit.Pos().Offset(), lit.End().Offset(), quoted), nil
	}
	drv, n := oneField(f.Decls, s.under)
	if n != 1 {
		return nil, cannotEdit(file, s, fmt.Sprintf("the file defines %s %d times", s.under, n))
	}
	field := s.field + ": " + quoted
	switch v := drv.Value.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return nil, cannotEdit(file, s, "driver is not a string or a struct")
		}
		// driver: "x" becomes driver: {name: "x", <field>}.
		name := string(data[v.Pos().Offset():v.End().Offset()])
		return splice(data, v.Pos().Offset(), v.End().Offset(), "{name: "+name+", "+field+"}"), nil
	case *ast.StructLit:
		if fd, n := oneField(v.Elts, s.field); n > 1 {
			return nil, cannotEdit(file, s, fmt.Sprintf("driver defines %s %d times", s.field, n))
		} else if n == 1 {
			lit, ok := isStringLit(fd.Value)
			if !ok {
				return nil, cannotEdit(file, s, "its value is not a string literal")
			}
			return splice(data, lit.Pos().Offset(), lit.End().Offset(), quoted), nil
		}
		if len(v.Elts) == 0 {
			if !v.Lbrace.IsValid() {
				return nil, cannotEdit(file, s, "driver is an empty struct")
			}
			at := v.Lbrace.Offset() + 1
			return splice(data, at, at, field), nil
		}
		first, last := v.Elts[0], v.Elts[len(v.Elts)-1]
		if !v.Lbrace.IsValid() {
			// driver: name: "x" becomes driver: {name: "x", <field>}.
			from, to := first.Pos().Offset(), last.End().Offset()
			return splice(data, from, to, "{"+string(data[from:to])+", "+field+"}"), nil
		}
		end := last.End().Offset()
		if last.End().Line() == v.Rbrace.Line() {
			// One line (or the brace right after the last field).
			return splice(data, end, end, ", "+field), nil
		}
		// A struct over several lines: a new line after the last field's
		// (after its trailing comment), indented like it.
		nl := bytes.IndexByte(data[end:], '\n')
		if nl < 0 {
			return nil, cannotEdit(file, s, "the driver struct has an unexpected layout")
		}
		lineStart := bytes.LastIndexByte(data[:last.Pos().Offset()], '\n') + 1
		indent := data[lineStart:last.Pos().Offset()]
		if len(bytes.TrimLeft(indent, " \t")) != 0 {
			return nil, cannotEdit(file, s, "the driver struct has an unexpected layout")
		}
		at := end + nl
		return splice(data, at, at, "\n"+string(indent)+field), nil
	default:
		return nil, cannotEdit(file, s, "driver is not a string or a struct literal")
	}
}

// setCUEBool sets a top-level boolean: the literal replaced where the
// file has one, else a line added at the end.
func setCUEBool(file string, data []byte, f *ast.File, s fieldSet) ([]byte, error) {
	fd, n := oneField(f.Decls, s.field)
	switch {
	case n > 1:
		return nil, cannotEdit(file, s, fmt.Sprintf("the file defines %s %d times", s.field, n))
	case n == 0:
		out := append([]byte(nil), data...)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		return append(out, s.field+": "+s.value+"\n"...), nil
	}
	lit, ok := fd.Value.(*ast.BasicLit)
	if !ok || (lit.Kind != token.TRUE && lit.Kind != token.FALSE) {
		return nil, cannotEdit(file, s, "its value is not a boolean literal")
	}
	return splice(data, lit.Pos().Offset(), lit.End().Offset(), s.value), nil
}

func setYAMLField(file string, data []byte, s fieldSet) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: file, Msg: err.Error()}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, cannotEdit(file, s, "the file is not one YAML mapping")
	}
	root := doc.Content[0]
	if s.boolean {
		b := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: s.value}
		switch v, n := yamlValue(root, s.field); {
		case n > 1:
			return nil, cannotEdit(file, s, fmt.Sprintf("%s is defined %d times", s.field, n))
		case n == 0:
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.field}, b)
		case v.Kind != yaml.ScalarNode:
			return nil, cannotEdit(file, s, "its value is not a boolean")
		default:
			b.LineComment = v.LineComment
			*v = *b
		}
		return encodeYAML(file, &doc)
	}
	target := root
	if s.under != "" {
		v, n := yamlValue(root, s.under)
		if n != 1 {
			return nil, cannotEdit(file, s, fmt.Sprintf("the file defines %s %d times", s.under, n))
		}
		switch {
		case v.Kind == yaml.ScalarNode:
			// driver: x becomes a mapping {name: x, <field>}.
			name := *v
			*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: 0, Content: []*yaml.Node{
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: "name"}, &name,
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.field}, quotedScalar(s.value),
			}}
			// The comments of the old scalar stay with the key line.
			v.LineComment, name.LineComment = name.LineComment, ""
			return encodeYAML(file, &doc)
		case v.Kind == yaml.MappingNode:
			target = v
		default:
			return nil, cannotEdit(file, s, "driver is not a string or a mapping")
		}
	}
	v, n := yamlValue(target, s.field)
	switch {
	case n > 1:
		return nil, cannotEdit(file, s, fmt.Sprintf("%s is defined %d times", s.path(), n))
	case n == 0:
		target.Content = append(target.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.field}, quotedScalar(s.value))
		return encodeYAML(file, &doc)
	case v.Kind != yaml.ScalarNode:
		return nil, cannotEdit(file, s, "its value is not a string")
	}
	if out, ok := replaceYAMLScalar(data, v, s.value); ok {
		return out, nil
	}
	*v = *quotedScalar(s.value)
	return encodeYAML(file, &doc)
}

// yamlValue returns the value of key in mapping m and how often the key
// is there.
func yamlValue(m *yaml.Node, key string) (*yaml.Node, int) {
	var v *yaml.Node
	n := 0
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v = m.Content[i+1]
			n++
		}
	}
	return v, n
}

// quotedScalar is a string the YAML decoder never reads as a number or a
// date (an upgrade token may look like one).
func quotedScalar(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: v}
}

// replaceYAMLScalar replaces a one-line scalar in place, when the text at
// its position is exactly its value (plain, or quoted without escapes):
// the rest of the file stays byte for byte. The new value is double-quoted
// unless the old one was plain and the new one reads as a string too.
func replaceYAMLScalar(data []byte, v *yaml.Node, value string) ([]byte, bool) {
	off, ok := lineColumnOffset(data, v.Line, v.Column)
	if !ok || strings.ContainsAny(v.Value, "\n\"'\\") {
		return nil, false
	}
	var raw string
	switch v.Style {
	case 0:
		raw = v.Value
	case yaml.DoubleQuotedStyle:
		raw = `"` + v.Value + `"`
	case yaml.SingleQuotedStyle:
		raw = "'" + v.Value + "'"
	default:
		return nil, false
	}
	if !bytes.HasPrefix(data[off:], []byte(raw)) {
		return nil, false
	}
	with := strconv.Quote(value)
	if v.Style == 0 && plainIsString(value) {
		with = value
	}
	return splice(data, off, off+len(raw), with), true
}

// plainIsString reports whether a plain YAML scalar reads back as the
// same string.
func plainIsString(v string) bool {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("k: "+v), &n); err != nil || len(n.Content) != 1 || len(n.Content[0].Content) != 2 {
		return false
	}
	s := n.Content[0].Content[1]
	return s.Tag == "!!str" && s.Value == v && s.Style == 0
}

// lineColumnOffset turns a 1-based line and column into a byte offset.
func lineColumnOffset(data []byte, line, col int) (int, bool) {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return 0, false
		}
		off += i + 1
	}
	off += col - 1
	return off, off >= 0 && off <= len(data)
}

func encodeYAML(file string, doc *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("encode: %v", err)}
	}
	if err := enc.Close(); err != nil {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("encode: %v", err)}
	}
	return b.Bytes(), nil
}

// cueSyntaxError is a parse error of a CUE file an edit reads, at its
// position, in the loader's words.
func cueSyntaxError(file string, err error) *ConfigError {
	ce := &ConfigError{File: file, Msg: err.Error(), Err: err}
	if errs := cueerrors.Errors(err); len(errs) > 0 {
		format, args := errs[0].Msg()
		ce.Msg = syntaxMsg(fmt.Sprintf(format, args...))
		ce.at(errs[0].Position().Position())
	}
	return ce
}
