package resolver

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"

	"github.com/styrmin/styrmin/internal/cuemsg"
	"github.com/styrmin/styrmin/internal/keypath"
)

// ConfigError is bad input in one file of the desired-state repository. It
// names the file, the position when known, the field and what was
// expected, so the user can go straight to the line.
type ConfigError struct {
	File string
	// Line and Column locate the problem in File (1-based); 0 when the
	// problem is the file as a whole.
	Line, Column int
	Field        string
	Msg          string
	// Err is the underlying error, if any (for errors.Is).
	Err error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, so errors.Is sees through.
func (e *ConfigError) Unwrap() error { return e.Err }

// at places e at pos when pos is in e's file.
func (e *ConfigError) at(pos token.Position) *ConfigError {
	if pos.Line > 0 && pos.Filename == e.File {
		e.Line, e.Column = pos.Line, pos.Column
	}
	return e
}

// DeploymentError is a failure to resolve one deployment; the others still
// resolve.
type DeploymentError struct {
	ID  ID
	Err error
}

func (e *DeploymentError) Error() string { return e.ID.String() + ": " + e.Err.Error() }

func (e *DeploymentError) Unwrap() error { return e.Err }

// joinConfigErrors sorts errs by position and joins them, one per line; a
// single error is returned as itself so callers see a *ConfigError.
func joinConfigErrors(errs []*ConfigError) error {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i], errs[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		return a.Msg < b.Msg
	})
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// yamlLineRE matches the one position YAML syntax errors carry, once the
// file name is cut off: the CUE YAML decoder rewrites the parser's
// "yaml: line N: msg" as "file:N: msg".
var yamlLineRE = regexp.MustCompile(`(?s)^(\d+): (.*)$`)

// fromYAML turns a YAML syntax error into a ConfigError. The YAML parser
// reports a line but no column, so the column is where the text of that
// line starts (or its opening bracket, for an unclosed one): where the
// user has to look.
func fromYAML(file string, data []byte, err error) *ConfigError {
	msg := strings.TrimPrefix(err.Error(), file)
	msg = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(msg, ":"), " yaml:"))
	ce := &ConfigError{File: file, Line: 1, Column: 1, Err: err}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n > 0 {
			msg = strings.TrimSpace(m[2])
			if yamlParserProblem(msg) {
				// The parser (not the scanner) reports its mark's 0-based
				// line; the start of the construct it was parsing.
				n++
			}
			ce.Line, ce.Column = n, yamlColumn(data, n, msg)
		}
	}
	if msg == "" {
		msg = "unknown problem"
	}
	ce.Msg = "invalid YAML: " + withoutDecodedValue(msg)
	return ce
}

// withoutDecodedValue is a YAML decoder's message without the value it
// quotes: `cannot decode "…" as !!int: illegal number start "…"` names
// the tag only, since the value may be a parameter's (the position shows
// it).
func withoutDecodedValue(msg string) string {
	const prefix = "cannot decode "
	if !strings.HasPrefix(msg, prefix) {
		return msg
	}
	tag := "the type of its tag"
	if q, err := strconv.QuotedPrefix(msg[len(prefix):]); err == nil {
		rest := msg[len(prefix)+len(q):]
		for _, t := range []string{"!!int", "!!float"} {
			if strings.HasPrefix(rest, " as "+t+":") || rest == " as "+t {
				tag = t
			}
		}
	}
	return "cannot decode the value as " + tag + " (not shown: it may be a sensitive parameter)"
}

// yamlParserProblem reports the messages of the YAML parser, whose line
// numbers are 0-based, unlike the scanner's.
func yamlParserProblem(msg string) bool {
	switch msg {
	case "did not find expected ',' or ']'", "did not find expected ',' or '}'",
		"did not find expected '-' indicator", "did not find expected <document start>",
		"did not find expected key", "did not find expected node content",
		"found duplicate %TAG directive", "found duplicate %YAML directive",
		"found incompatible YAML document", "found undefined tag handle":
		return true
	}
	return false
}

// yamlColumn is the 1-based column to show for a YAML error on line n of
// data: the bracket that is not closed, else the first non-blank
// character (1 when the line is blank or missing).
func yamlColumn(data []byte, n int, msg string) int {
	lines := strings.Split(string(data), "\n")
	if n > len(lines) {
		return 1
	}
	l := lines[n-1]
	for _, b := range [][2]string{{"']'", "["}, {"'}'", "{"}} {
		if strings.HasSuffix(msg, b[0]) {
			if i := strings.LastIndex(l, b[1]); i >= 0 {
				return i + 1
			}
		}
	}
	if t := strings.TrimLeft(l, " \t"); t != "" {
		return len(l) - len(t) + 1
	}
	return 1
}

// explainer turns the CUE errors of one configuration file into
// ConfigErrors located in that file: raw is the file as the user wrote it,
// schema the definition it was checked against (the zero Value for syntax
// errors) and scope the schema's root, where its references resolve.
type explainer struct {
	file          string
	raw           cue.Value
	schema, scope cue.Value
}

// explain reports every distinct problem of err, sorted by position.
// Errors at a field and below it (a disjunction's alternatives) keep only
// the deepest: it says which part of the value is wrong.
func (x *explainer) explain(err error) error {
	var out []*ConfigError
	seen := map[string]bool{}
	for _, e := range cueerrors.Errors(err) {
		ce := x.one(e)
		if k := ce.Error(); !seen[k] {
			seen[k] = true
			out = append(out, ce)
		}
	}
	if len(out) == 0 {
		return &ConfigError{File: x.file, Line: 1, Column: 1, Msg: err.Error(), Err: err}
	}
	var kept []*ConfigError
	for _, ce := range out {
		shadowed := false
		for _, o := range out {
			if ce.Field != "" && strings.HasPrefix(o.Field, ce.Field) && len(o.Field) > len(ce.Field) &&
				(o.Field[len(ce.Field)] == '.' || o.Field[len(ce.Field)] == '[') {
				shadowed = true
				break
			}
		}
		if !shadowed {
			kept = append(kept, ce)
		}
	}
	return joinConfigErrors(kept)
}

// one translates a single CUE error.
func (x *explainer) one(e cueerrors.Error) *ConfigError {
	sels := userPath(e.Path())
	ce := &ConfigError{File: x.file, Field: fieldName(sels), Err: e}
	format, args := e.Msg()
	ce.Msg = fmt.Sprintf(format, args...)
	if len(sels) == 0 {
		// Syntax and reference errors: CUE's position is the user's.
		ce.Msg = syntaxMsg(ce.Msg)
		if strings.HasPrefix(format, "conflicting values") {
			// The file's top level against something else: CUE would
			// quote the whole file, parameters included.
			ce.Msg = "the file's top level " + conflictMsg(args)
		}
		for _, p := range append([]token.Pos{e.Position()}, e.InputPositions()...) {
			if p.IsValid() && p.Filename() == x.file {
				ce.at(p.Position())
				break
			}
		}
		if ce.Line == 0 {
			ce.Line, ce.Column = 1, 1
		}
		return ce
	}
	given := x.raw.LookupPath(cue.MakePath(sels...))
	ce.at(x.position(sels, e))
	if p := given.Pos(); strings.Contains(format, "not allowed") && p.IsValid() && p.Filename() == x.file {
		ce.at(p.Position()) // the label is what is wrong, not its value
	}
	want := schemaAt(x.schema, sels)
	switch {
	case strings.HasPrefix(format, "parse error"):
		// CUE's YAML reader writes what it cannot hold (.inf, .nan, an
		// integer past 64 bits) as CUE text it then fails to read: the
		// field is set, not missing, and the text is CUE's, not the user's.
		ce.Msg = unreadableNumber
	case strings.Contains(format, "not allowed"):
		ce.Msg = "unknown field" + x.allowed(sels[:len(sels)-1])
	case isParameter(sels):
		// A driver parameter may be sensitive, which only the driver
		// tells, later: nothing written in one is quoted.
		ce.Msg = x.parameterMsg(format, args, given, want)
	case !given.Exists():
		ce.Msg = "required, not set"
	case !given.IsConcrete():
		ce.Msg = "must be a concrete value, got " + cuemsg.Show(given)
	case want.Exists():
		ce.Msg = cuemsg.Want(want, x.scope, given) + ", got " + cuemsg.Show(given)
	case strings.HasPrefix(format, "conflicting values") && len(args) >= 2 && x.concrete(args[0]) && x.concrete(args[1]):
		// Two values the user wrote for one field (the schema leaves it
		// open): say so rather than "conflicting values".
		ce.Msg = fmt.Sprintf("set to both %v and %v: keep one", args[0], args[1])
	default:
		ce.Msg = scrub(ce.Msg)
	}
	return ce
}

// unreadableNumber is the message of a number that cannot be read: one
// CUE's YAML reader cannot hold, or one past what a block read through
// JSON holds (unheldNumber).
const unreadableNumber = "a number that cannot be read (.inf, .nan, an integer past 64 bits, or a float past 64 bits' range such as 1e400): expected a finite number within 64 bits, or a quoted string"

// unheldNumber returns the path (prefix, then its fields and [index]es,
// as positions names them) of the first number in v, a value CUE decoded,
// that 64 bits do not hold: an integer past int64 (a *big.Int) or a float
// past float64's range, 1e400 or 1e-400 (a *big.Float). Read through
// JSON, the one becomes a rounded float, the other a string.
func unheldNumber(v any, prefix string) (string, bool) {
	switch t := v.(type) {
	case *big.Int, *big.Float:
		return prefix, true
	case map[string]any:
		for _, k := range sortedKeys(t) {
			if p, ok := unheldNumber(t[k], keypath.Child(prefix, k)); ok {
				return p, true
			}
		}
	case []any:
		for i, x := range t {
			if p, ok := unheldNumber(x, fmt.Sprintf("%s[%d]", prefix, i)); ok {
				return p, true
			}
		}
	}
	return "", false
}

// isParameter reports whether sels is a driver parameter's path or the
// parameters field holding them: a layer's parameters, or those of a
// cluster's ingress: driver.
func isParameter(sels []cue.Selector) bool {
	for _, s := range sels {
		if s.String() == "parameters" {
			return true
		}
	}
	return false
}

// notShown ends a message about a driver parameter that leaves out what
// was written there.
const notShown = "(not shown: a parameter may be sensitive)"

// parameterMsg words the CUE error format(args) at a driver parameter
// without quoting anything written in it: only kinds (a string, an
// integer), operators and the schema's own words. CUE's messages quote
// the values, constraints and names involved, so a format not known here
// gets a plain wording rather than CUE's.
func (x *explainer) parameterMsg(format string, args []any, given, want cue.Value) string {
	switch {
	case strings.HasPrefix(format, "reference ") && strings.HasSuffix(format, " not found"):
		return "refers to a name that is not defined " + notShown + ": a string needs quotes"
	case !given.Exists():
		return "required, not set"
	case want.Exists() && given.IsConcrete():
		// The schema's own words: parameters must be a struct.
		return cuemsg.Want(want, x.scope, given) + " " + notShown
	case strings.HasPrefix(format, "conflicting values") && len(args) >= 2 && x.concrete(args[0]) && x.concrete(args[1]):
		return "set to two different values " + notShown + ": keep one"
	case strings.HasPrefix(format, "conflicting values"):
		return conflictMsg(args) + " " + notShown
	case strings.HasPrefix(format, "invalid value "):
		// "(out of bound …)", "(does not satisfy …)"
		return "fails a constraint written with it " + notShown
	case strings.HasPrefix(format, "invalid operands "):
		// "invalid operands %s and %s to '%s' (type %s and %s)"
		if a, b, ok := kindPair(args, 3); ok {
			if op := fmt.Sprint(args[2]); operatorRE.MatchString(op) {
				return fmt.Sprintf("cannot apply %s to %s and %s %s", op, a, b, notShown)
			}
		}
		return "applies an operator to values it does not apply to " + notShown
	case strings.HasPrefix(format, "invalid operand ") || strings.HasPrefix(format, "cannot range over "):
		if len(args) >= 2 {
			if k, ok := args[1].(cue.Kind); ok {
				return fmt.Sprintf("uses %s as a list or struct %s", cuemsg.Kind(k), notShown)
			}
		}
		return "uses a value as a list or struct that is neither " + notShown
	case strings.Contains(format, "empty disjunction"):
		return "matches none of the allowed forms"
	case !given.IsConcrete():
		if op, _ := given.Expr(); op == cue.OrOp {
			return "must be a concrete value, got several alternatives " + notShown + ": keep one, or mark the default with *"
		}
		return "must be a concrete value, not a type or a constraint " + notShown
	}
	return "does not evaluate to a value " + notShown
}

// operatorRE matches the operators CUE names in "invalid operands": what
// else an argument holds is not shown.
var operatorRE = regexp.MustCompile(`^[-+*/&|=!<>~]{1,2}$`)

// conflictMsg words CUE's "conflicting values %s and %s (mismatched
// types %s and %s)" by the two kinds only: the values may hold a
// parameter.
func conflictMsg(args []any) string {
	if a, b, ok := kindPair(args, 2); ok {
		return fmt.Sprintf("cannot be both %s and %s", a, b)
	}
	return "holds two values that conflict"
}

// kindPair words the kinds a CUE message names at args[i] and args[i+1];
// false when they are not both kinds.
func kindPair(args []any, i int) (string, string, bool) {
	if len(args) < i+2 {
		return "", "", false
	}
	a, ok1 := args[i].(cue.Kind)
	b, ok2 := args[i+1].(cue.Kind)
	return cuemsg.Kind(a), cuemsg.Kind(b), ok1 && ok2
}

// concrete reports whether a CUE message argument is a value (3, "a")
// rather than a type or constraint.
func (x *explainer) concrete(arg any) bool {
	v := x.raw.Context().CompileString(fmt.Sprint(arg))
	return v.Err() == nil && v.IsConcrete()
}

// schemaAt looks up the schema of the field at sels: optional fields and
// pattern constraints ([string]: string, [...string]) count.
func schemaAt(v cue.Value, sels []cue.Selector) cue.Value {
	if !v.Exists() {
		return cue.Value{}
	}
	for _, s := range sels {
		next := v.LookupPath(cue.MakePath(s))
		if !next.Exists() && s.Type() == cue.StringLabel {
			if next = v.LookupPath(cue.MakePath(s.Optional())); !next.Exists() {
				next = v.LookupPath(cue.MakePath(cue.AnyString))
			}
		}
		if !next.Exists() && s.Type() == cue.IndexLabel {
			next = v.LookupPath(cue.MakePath(cue.AnyIndex))
		}
		if !next.Exists() {
			// A field of one alternative: driver: #Name | {name: #Name, …}.
			if op, alts := v.Expr(); op == cue.OrOp {
				for _, a := range alts {
					if next = schemaAt(a, []cue.Selector{s}); next.Exists() {
						break
					}
				}
			}
		}
		if !next.Exists() {
			return cue.Value{}
		}
		v = next
	}
	return v
}

// valuePos is where a field's value starts (the 50 of replicas: 50), which
// is what the user has to change; the label's position otherwise.
func valuePos(v cue.Value) token.Pos {
	if f, ok := v.Source().(*ast.Field); ok && f.Value != nil && f.Value.Pos().IsValid() {
		return f.Value.Pos()
	}
	return v.Pos()
}

// position is where the user wrote the field at sels, or the nearest
// enclosing field they wrote (a missing field belongs to its parent), or
// where CUE saw the problem in the file, or the file's start.
func (x *explainer) position(sels []cue.Selector, e cueerrors.Error) token.Position {
	for n := len(sels); n >= 0; n-- {
		v := x.raw.LookupPath(cue.MakePath(sels[:n]...))
		if p := valuePos(v); v.Exists() && p.IsValid() && p.Filename() == x.file {
			return p.Position()
		}
	}
	for _, p := range cueerrors.Positions(e) {
		if p.IsValid() && p.Filename() == x.file {
			return p.Position()
		}
	}
	return token.Position{Filename: x.file, Line: 1, Column: 1}
}

// allowed lists the fields the schema allows at parent, for an unknown
// field: the user most often misspelt one of them.
func (x *explainer) allowed(parent []cue.Selector) string {
	if !x.schema.Exists() {
		return ""
	}
	v := x.schema.LookupPath(cue.MakePath(parent...))
	if v.IncompleteKind() != cue.StructKind {
		return ""
	}
	it, err := v.Fields(cue.Optional(true))
	if err != nil {
		return ""
	}
	var names []string
	for it.Next() {
		names = append(names, it.Selector().Unquoted())
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return " (allowed here: " + strings.Join(names, ", ") + ")"
}

// userPath turns a CUE error path into selectors of the user's file: the
// schema's definition (#Deployment…) is ours, not a field the user wrote.
func userPath(p []string) []cue.Selector {
	for len(p) > 0 && strings.HasPrefix(p[0], "#") {
		p = p[1:]
	}
	sels := make([]cue.Selector, 0, len(p))
	for _, s := range p {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			sels = append(sels, cue.Index(n))
			continue
		}
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
		if strings.HasPrefix(s, "#") {
			break // inside one of our definitions: the field above is the user's
		}
		sels = append(sels, cue.Str(s))
	}
	return sels
}

// fieldName formats selectors like the rest of Styrmin's errors and the
// plan (keypath): parameters.replicas, connects[0], config["a.b"]. A key
// is the author's: written as it is, a newline in it printed lines of its
// own (a CI log's workflow commands), a control character reached the
// terminal, and "a.b" read as a: b:.
func fieldName(sels []cue.Selector) string {
	var b strings.Builder
	for _, s := range sels {
		if s.Type() == cue.IndexLabel {
			fmt.Fprintf(&b, "[%s]", s.String())
			continue
		}
		keypath.Append(&b, s.Unquoted())
	}
	return b.String()
}

// syntaxMsg words a CUE parser message for people: its token names
// ('EOF', 'STRING') are the parser's. The literal the parser found after
// a token ("found 'STRING' \"…\"") is left out: it may be a parameter's
// value, and the position shows it.
func syntaxMsg(msg string) string {
	const found = ", found '"
	if i := strings.Index(msg, found); i >= 0 {
		rest := msg[i+len(found):]
		if j := strings.Index(rest, "' "); j >= 0 && literalToken(rest[:j]) {
			msg = msg[:i+len(found)+j+1]
		}
	}
	msg = strings.NewReplacer("'EOF'", "the end of the file", "'STRING'", "a string",
		"'INT'", "a number", "'FLOAT'", "a number", "'IDENT'", "a name").Replace(msg)
	return scrub(msg)
}

// literalToken reports whether name is the parser's name of a token it
// quotes the text of (token.Token.IsLiteral).
func literalToken(name string) bool {
	for _, t := range []token.Token{token.IDENT, token.INT, token.FLOAT, token.STRING, token.INTERPOLATION, token.BOTTOM} {
		if t.String() == name {
			return true
		}
	}
	return false
}

var (
	moreErrorsRE = regexp.MustCompile(`\s*\(and \d+ more errors?\)`)
	outOfBoundRE = regexp.MustCompile(`^invalid value (.*) \(out of bound (.*)\)$`)
)

// scrub removes CUE's evaluator phrasing from a message that could not be
// worded from the schema: what remains still names the problem.
func scrub(msg string) string {
	msg = moreErrorsRE.ReplaceAllString(msg, "")
	if m := outOfBoundRE.FindStringSubmatch(msg); m != nil {
		return "must satisfy " + m[2] + ", got " + m[1]
	}
	if strings.Contains(msg, "empty disjunction") {
		return "matches none of the allowed forms"
	}
	msg = strings.ReplaceAll(msg, "conflicting values", "cannot be both")
	return msg
}

// placeOf is the position of field in a loaded file, zero when unknown.
func placeOf(pos map[string]token.Position, field string) token.Position {
	if p, ok := pos[field]; ok {
		return p
	}
	// A missing field belongs to the nearest field above it.
	for f := field; f != ""; {
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
		if p, ok := pos[f]; ok {
			return p
		}
	}
	return token.Position{}
}

// positions records where each field of a file's value was written, by
// field name as fieldName writes it (parameters.replicas, connects[0],
// config["a.b"]): errors found after
// loading, once the values are plain Go, still point at the user's line.
func positions(file string, v cue.Value) map[string]token.Position {
	out := map[string]token.Position{}
	var walk func(prefix string, v cue.Value)
	walk = func(prefix string, v cue.Value) {
		if p := valuePos(v); prefix != "" && p.IsValid() && p.Filename() == file {
			out[prefix] = p.Position()
		}
		switch v.IncompleteKind() {
		case cue.StructKind:
			it, err := v.Fields()
			if err != nil {
				return
			}
			for it.Next() {
				walk(keypath.Child(prefix, it.Selector().Unquoted()), it.Value())
			}
		case cue.ListKind:
			it, err := v.List()
			if err != nil {
				return
			}
			for i := 0; it.Next(); i++ {
				walk(fmt.Sprintf("%s[%d]", prefix, i), it.Value())
			}
		}
	}
	walk("", v)
	return out
}
