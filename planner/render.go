package planner

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/jsonform"
	"github.com/styrmin/styrmin/resolver"
	"sigs.k8s.io/yaml"
)

// Format is a plan output format.
type Format string

// The output formats.
const (
	FormatText     Format = "text"
	FormatMarkdown Format = "markdown"
	FormatJSON     Format = "json"
	// FormatYAML is the JSON encoding written as YAML (the same fields).
	FormatYAML Format = "yaml"
)

// Formats lists the output formats, for flag help.
func Formats() []Format { return []Format{FormatText, FormatMarkdown, FormatJSON, FormatYAML} }

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	var names []string
	for _, f := range Formats() {
		if string(f) == s {
			return f, nil
		}
		names = append(names, string(f))
	}
	return "", fmt.Errorf("unknown output format %q (accepted: %s)", s, strings.Join(names, ", "))
}

// RenderOptions tune the renderers.
type RenderOptions struct {
	// Color adds ANSI colours to the text output (for terminals).
	Color bool
	// Full shows everything: the content of added and removed objects and
	// of every change, as `styrminctl diff` does.
	Full bool
	// MaxBytes bounds the markdown output (a pull-request comment has a
	// size limit); per-deployment details beyond it are left out with a
	// note. 0 means DefaultMarkdownBytes.
	MaxBytes int
}

// DefaultMarkdownBytes keeps a markdown plan under the size limit of a
// pull-request comment on the common forges.
const DefaultMarkdownBytes = 60000

// Render writes the plan in format f.
func Render(w io.Writer, p *Plan, f Format, o RenderOptions) error {
	switch f {
	case FormatText:
		return RenderText(w, p, o)
	case FormatMarkdown:
		return RenderMarkdown(w, p, o)
	case FormatJSON:
		return RenderJSON(w, p)
	case FormatYAML:
		return RenderYAML(w, p)
	case FormatHTML:
		return RenderHTML(w, p, o)
	}
	return fmt.Errorf("planner: unknown format %q", f)
}

// RenderJSON writes the plan as JSON (SchemaVersion; see
// docs/plan-json.md), indented, with a final newline.
func RenderJSON(w io.Writer, p *Plan) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(p)
}

// RenderYAML writes the plan's JSON encoding as YAML.
func RenderYAML(w io.Writer, p *Plan) error {
	var buf bytes.Buffer
	if err := RenderJSON(&buf, p); err != nil {
		return err
	}
	b, err := yaml.JSONToYAML(buf.Bytes())
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// summaryLine is "1 to create, 2 to update, 0 to upgrade, 0 to delete".
func summaryLine(s Summary) string {
	parts := make([]string, 0, 4)
	for _, w := range workflowOrder {
		parts = append(parts, fmt.Sprintf("%d to %s", s.count(w), w))
	}
	return strings.Join(parts, ", ")
}

// symbol marks a workflow in lists.
func symbol(w Workflow) string {
	switch w {
	case WorkflowCreate:
		return "+"
	case WorkflowUpdate:
		return "~"
	case WorkflowUpgrade:
		return "^"
	case WorkflowDelete:
		return "-"
	}
	return " "
}

// versions describes driver and application versions: "webapp 1.1.0, app
// 1.25.0" or, when they change, "graphhub 1.0.0 → 2.0.0, app 1.4.0 → 1.5.0".
func versions(d *Deployment) string {
	switch {
	case d.From == nil && d.To == nil:
		return ""
	case d.From == nil:
		return fmt.Sprintf("%s %s, app %s", d.To.Driver, d.To.DriverVersion, d.To.AppVersion)
	case d.To == nil:
		return fmt.Sprintf("%s %s, app %s", d.From.Driver, d.From.DriverVersion, d.From.AppVersion)
	}
	drv := fmt.Sprintf("%s %s", d.To.Driver, d.To.DriverVersion)
	switch {
	case d.From.Driver != d.To.Driver:
		drv = fmt.Sprintf("%s %s → %s %s", d.From.Driver, d.From.DriverVersion, d.To.Driver, d.To.DriverVersion)
	case d.From.DriverVersion != d.To.DriverVersion:
		drv = fmt.Sprintf("%s %s → %s", d.To.Driver, d.From.DriverVersion, d.To.DriverVersion)
	case d.From.DriverDigest != d.To.DriverDigest:
		drv = fmt.Sprintf("%s %s (content changed)", d.To.Driver, d.To.DriverVersion)
	}
	app := "app " + d.To.AppVersion
	if d.From.AppVersion != d.To.AppVersion {
		app = fmt.Sprintf("app %s → %s", d.From.AppVersion, d.To.AppVersion)
	}
	return drv + ", " + app
}

// causeKinds lists the cause kinds of a deployment: "environment, driver".
func causeKinds(d *Deployment) string {
	var kinds []string
	seen := map[CauseKind]bool{}
	for _, c := range d.Causes {
		if !seen[c.Kind] {
			seen[c.Kind] = true
			kinds = append(kinds, string(c.Kind))
		}
	}
	return strings.Join(kinds, ", ")
}

// describeCause is one cause in words.
func describeCause(c Cause) string {
	var s string
	switch c.Kind {
	case CauseService:
		s = "service of " + c.File
	case CauseDriver:
		s = "driver"
		if c.File != "" {
			s += " " + c.File
		}
	default:
		s = string(c.Kind) + " " + c.File
	}
	if len(c.Paths) > 0 {
		s += ": " + strings.Join(c.Paths, ", ")
	}
	return s
}

// manifestCounts is "1 added, 2 changed, 1 removed, 3 unchanged".
func manifestCounts(m ManifestDiff) string {
	if m.Error != "" {
		return "not rendered"
	}
	var parts []string
	if m.Added > 0 {
		parts = append(parts, fmt.Sprintf("%d added", m.Added))
	}
	if m.Changed > 0 {
		parts = append(parts, fmt.Sprintf("%d changed", m.Changed))
	}
	if m.Removed > 0 {
		parts = append(parts, fmt.Sprintf("%d removed", m.Removed))
	}
	if m.Unchanged > 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", m.Unchanged))
	}
	return strings.Join(parts, ", ")
}

// changeValue formats one side of a change.
func changeValue(c Change, v any) string {
	if c.Sensitive {
		if s, ok := v.(string); ok && (s == Masked || s == MaskedChanged) {
			return s
		}
	}
	if c.SecretRef {
		if m, ok := v.(map[string]any); ok {
			name, _ := m["name"].(string)
			key, _ := m["key"].(string)
			return "secret " + name + "/" + key
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// describeChange is "path: old → new", "path: new (added)" or "path:
// old (removed)".
func describeChange(c Change) string {
	switch c.Op {
	case OpAdded:
		return fmt.Sprintf("%s: %s", c.Path, changeValue(c, c.New))
	case OpRemoved:
		return fmt.Sprintf("%s: %s", c.Path, changeValue(c, c.Old))
	default:
		return fmt.Sprintf("%s: %s → %s", c.Path, changeValue(c, c.Old), changeValue(c, c.New))
	}
}

func changeSymbol(op ChangeOp) string {
	switch op {
	case OpAdded:
		return "+"
	case OpRemoved:
		return "-"
	}
	return "~"
}

// sequence is "1 → 2".
func sequence(d *Deployment) string {
	return fmt.Sprintf("%d → %d", d.FromSequence, d.ToSequence)
}

// groupedLeftOut groups left-out deployments by the value they keep and
// where it is set, so an environment overriding a cluster value is one
// line, not one per deployment.
type leftOutGroup struct {
	Path, ChangedIn string
	OverriddenBy    Origin
	IDs             []string
}

func groupLeftOut(ls []LeftOut) []leftOutGroup {
	var out []leftOutGroup
	index := map[[4]string]int{}
	for _, l := range ls {
		k := [4]string{l.Path, l.ChangedIn, l.OverriddenBy.Layer, l.OverriddenBy.File}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, leftOutGroup{Path: l.Path, ChangedIn: l.ChangedIn, OverriddenBy: l.OverriddenBy})
		}
		out[i].IDs = append(out[i].IDs, l.ID)
	}
	return out
}

// idList shows up to max IDs and how many more.
func idList(ids []string, max int, quote func(string) string) string {
	var parts []string
	for i, id := range ids {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-max))
			break
		}
		parts = append(parts, quote(id))
	}
	return strings.Join(parts, ", ")
}

func keeps(n int) string {
	if n == 1 {
		return "keeps"
	}
	return "keep"
}

//go:embed plan.schema.json
var jsonSchema []byte

// JSONSchema returns the JSON Schema (draft 2020-12) of the JSON output,
// SchemaVersion.
func JSONSchema() []byte { return bytes.Clone(jsonSchema) }

// heldWaiting says whether a held deployment has a change waiting.
// unlockedNote says, when the plan sums several configuration commits,
// that each is locked and run as its own change ("" otherwise).
func unlockedNote(p *Plan) string {
	if p.UnlockedCommits < 2 || !p.WouldLock() {
		return ""
	}
	return fmt.Sprintf("Note: this plan sums the %d commits made since the last lock. `styrminctl lock --commit` locks each one that changes an instance as its own instance (their sequences follow one another), and the agent runs each change in turn: an upgrade one of them makes runs its hooks even when a later one reverts it.", p.UnlockedCommits)
}

// noChanges is the plan's line when it has no change ("" when it has):
// commits since the last lock whose sum changes nothing still lock, and
// the agent runs each of their changes, so the plan does not say "No
// changes" then.
func noChanges(p *Plan) string {
	switch {
	case p.HasChanges() || len(p.Errors) > 0:
		return ""
	case len(p.LockCommits) > 0:
		return fmt.Sprintf("No net change: the %d commits since the last lock sum to no change, but `styrminctl lock --commit` makes %s, and the agent runs each in turn.",
			p.UnlockedCommits, plural(len(p.LockCommits), "lock commit"))
	}
	return "No changes: every deployment matches its lockfile."
}

// showLockCommits says whether the plan lists lock --commit's lock
// commits: when they are not its one change, shown already.
func showLockCommits(p *Plan) bool {
	return len(p.LockCommits) > 1 || (len(p.LockCommits) == 1 && !p.HasChanges())
}

// lockCommitsTitle heads the list of lock --commit's lock commits.
const lockCommitsTitle = "Lock commits `styrminctl lock --commit` makes (one per configuration commit; the agent runs each in turn, an upgrade's hooks included):"

// lockedLine describes one instance of a lock commit: its workflow, its
// sequences, its versions.
func lockedLine(li LockedInstance) string {
	return fmt.Sprintf("%s %s %s, %d → %d, %s", symbol(li.Workflow), li.ID, li.Workflow, li.FromSequence, li.ToSequence,
		versions(&Deployment{From: li.From, To: li.To}))
}

// shortCommit is a commit hash as the plan shows it.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func heldWaiting(h Held) string {
	if h.Waiting {
		return " (a change waits)"
	}
	return ""
}

// waveSummary is one line of the plan's waves: which, how many, the
// first deployments.
func waveSummary(w Wave) string {
	s := fmt.Sprintf("%s wave %d of %d", w.Cluster, w.Wave, w.Waves)
	if w.Group != "" {
		s += " (environment " + w.Group + ")"
	}
	s += fmt.Sprintf(": %d %s", len(w.Deployments), map[bool]string{true: "deployment", false: "deployments"}[len(w.Deployments) == 1])
	if w.Wave > 1 && w.Pause != "" {
		s += ", " + w.Pause + " after the wave before"
	}
	return s + ": " + idList(w.Deployments, 5, func(s string) string { return s })
}

// waveLine says when a wave starts, for the renderers.
// restoringLine says what a change waiting for a restore does.
func restoringLine(r string) string {
	return "waits for a restore in progress (" + r + "): applied after it succeeds"
}

func waveLine(w *WaveRef) string {
	s := fmt.Sprintf("wave %d of %d", w.Wave, w.Waves)
	if w.Group != "" {
		s += " of environment " + w.Group
	}
	if w.Wave == 1 {
		return s + ": starts at once"
	}
	s += fmt.Sprintf(": starts when every deployment of wave %d succeeded and is Ready", w.Wave-1)
	if w.Pause != "" {
		s += ", then " + w.Pause + " later"
	}
	return s
}

// parallel runs f(0..n-1) on up to p goroutines (p <= 0: GOMAXPROCS).
func parallel(n, p int, f func(int)) {
	if p <= 0 {
		p = runtime.GOMAXPROCS(0)
	}
	if p > n {
		p = n
	}
	if p <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < p; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// deletionRail applies resolver.DeletionRule, the rule lock applies too.
func deletionRail(in Input, opts Options, count int) Deletions {
	var settings resolver.RepoSettings
	if in.Repo != nil {
		settings = in.Repo.Settings
	}
	r := resolver.DeletionRule(settings, opts.DeletionThreshold, opts.AllowDeletions, count)
	return Deletions{Count: r.Count, Threshold: r.Threshold, Allowed: r.Allowed, Refused: r.Refused}
}

// planOne plans one lock change: workflow, refs, path diff, actions and
// the manifest diff. Causes are filled in later (attribution reads files
// and is cheap; this part renders charts and runs in parallel).
func planOne(in Input, opts Options, c resolver.LockChange) (*Deployment, error) {
	prev, next := c.Previous, c.Next
	if prev != nil && prev.Tombstone() {
		prev = nil
	}
	if next != nil && next.Tombstone() {
		next = nil
	}
	w := SelectWorkflow(prev, next)
	if w == "" && prev != nil && next != nil && (prev.Sequence < in.Used[c.ID] && c.Next.Sequence > in.Used[c.ID] || in.Reused.Reuses(c.ID, c.Previous)) {
		// The lockfile is behind a sequence the branch used (a revert), or
		// at one it used for another instance too (two merged locks):
		// the same content locked again is a change for the cluster, which
		// runs that later instance, as the lock and the agent see it.
		w = WorkflowUpdate
	}
	d := &Deployment{
		ID:           c.ID.String(),
		Cluster:      c.ID.Cluster,
		Environment:  c.ID.Environment,
		Name:         c.ID.Name,
		Workflow:     w,
		ToSequence:   c.Next.Sequence,
		Causes:       []Cause{},
		Changes:      []Change{},
		Actions:      []Action{},
		Manifests:    ManifestDiff{Objects: []ObjectDiff{}},
		FromSequence: 0,
		After:        c.Next.After,
		Internal:     c.Next.Internal,
	}
	if r := c.Next.Rollout; r != nil {
		d.Wave = &WaveRef{Wave: r.Wave, Waves: r.Waves, Group: r.Group, Pause: r.Pause}
	}
	if c.Previous != nil {
		d.FromSequence = c.Previous.Sequence
	}
	var missing []string
	// side describes one instance in d and finds its driver.
	side := func(i *resolver.Instance, which string) (*InstanceRef, *drivers.Driver) {
		if i == nil {
			return nil, nil
		}
		d.Namespace = namespaceOf(i)
		drv, ok := in.Drivers.Driver(i.Driver)
		if !ok {
			missing = append(missing, fmt.Sprintf("driver %s@%s (%s)%s is not available", i.Driver.Name, i.Driver.Version, i.Driver.Digest, which))
		}
		return refOfInstance(i), drv
	}
	var oldDrv, newDrv *drivers.Driver
	d.From, oldDrv = side(prev, " of the locked instance")
	d.To, newDrv = side(next, "")

	// Both sides hold placeholders where sensitive values were (a lock
	// from before placeholders holds them in clear: it is shown from a
	// copy with placeholders), so nothing rendered below can hold a value
	// in any form. The maskers then only hide the placeholders.
	hidden := sensitiveParams(oldDrv, newDrv)
	prev, err := resolver.WithPlaceholders(prev, oldDrv, hidden)
	if err != nil {
		return nil, err
	}
	if next, err = resolver.WithPlaceholders(next, newDrv, hidden); err != nil {
		return nil, err
	}
	// What the agent renders comes from the lockfile, so both sides are
	// taken through the JSON form a lockfile holds.
	oldSide, err := sideOf(prev)
	if err != nil {
		return nil, err
	}
	newSide, err := sideOf(next)
	if err != nil {
		return nil, err
	}
	masks := newMaskers(sensitiveParams(oldDrv, newDrv), oldSide.params(), newSide.params())
	if w != WorkflowDelete {
		secret := secretParams(oldDrv, newDrv)
		sensitive := sensitiveParams(oldDrv, newDrv)
		td := &treeDiff{masks: masks, rule: func(segs []pathSegment) (bool, bool, bool) {
			if len(segs) == 3 && segs[0].key == "context" && segs[1].key == "parameters" && !segs[2].isIdx {
				n := segs[2].key
				return secret[n] || sensitive[n], sensitive[n], secret[n]
			}
			return false, false, false
		}}
		td.diff(nil, oldSide.tree, newSide.tree, prev != nil, next != nil)
		d.Changes = td.out
		d.rawPaths = td.segs
	}

	actionDriver := newDrv
	if w == WorkflowDelete {
		actionDriver = oldDrv
	}
	d.Actions = ActionsForInstance(w, actionDriver, oldDrv, next)
	if d.Actions == nil {
		d.Actions = []Action{}
	}

	if opts.SkipManifests {
		return d, nil
	}
	if len(missing) > 0 {
		d.Manifests.Error = strings.Join(missing, "; ")
		return d, nil
	}
	render := (*drivers.Driver).Render
	if opts.RenderInProcess {
		render = func(d *drivers.Driver, c drivers.Context, values map[string]any) (*drivers.Manifests, error) {
			return d.RenderInProcess(context.Background(), c, values)
		}
	}
	var oldM, newM *drivers.Manifests
	if prev != nil {
		if oldM, err = render(oldDrv, oldSide.ctx, oldSide.values); err != nil {
			d.Manifests.Error = "rendering the locked instance: " + err.Error()
			return d, nil
		}
	}
	if next != nil {
		if newM, err = render(newDrv, newSide.ctx, newSide.values); err != nil {
			d.Manifests.Error = "rendering the new instance: " + err.Error()
			return d, nil
		}
	}
	md, err := diffManifests(oldM, newM, masks)
	if err != nil {
		d.Manifests.Error = err.Error()
		return d, nil
	}
	if md.Objects == nil {
		md.Objects = []ObjectDiff{}
	}
	d.Manifests = md
	return d, nil
}

func refOfInstance(in *resolver.Instance) *InstanceRef {
	return &InstanceRef{
		Sequence:      in.Sequence,
		Digest:        in.Digest,
		Driver:        in.Driver.Name,
		DriverVersion: in.Driver.Version,
		DriverDigest:  in.Driver.Digest,
		AppVersion:    in.AppVersion,
	}
}

func namespaceOf(in *resolver.Instance) string {
	if in.Context == nil {
		return ""
	}
	return in.Context.Deployment.Namespace
}

// side is one instance as the agent would read it from its lockfile: the
// context and values for rendering, and the normalized tree for diffing.
type side struct {
	ctx    drivers.Context
	values map[string]any
	tree   any // {"context": …, "values": …}
}

func (s side) params() map[string]any { return s.ctx.Parameters }

func sideOf(in *resolver.Instance) (side, error) {
	if in == nil {
		return side{}, nil
	}
	if s, ok := sideOfData(in); ok {
		return s, nil
	}
	return sideByText(in)
}

// sideOfData is sideByText without writing the values as text: the values
// are JSON data (a lockfile's, or CUE's), whose round trip jsonform
// gives; only the context, a struct, goes through JSON. ok is false for
// values jsonform leaves to encoding/json.
func sideOfData(in *resolver.Instance) (side, bool) {
	var s side
	values, ok := jsonform.RoundTripMap(in.Values)
	if !ok {
		return s, false
	}
	valuesTree, ok := jsonform.RoundTripNumbers(in.Values)
	if !ok {
		return s, false
	}
	tree := map[string]any{}
	if in.Context != nil {
		b, err := json.Marshal(in.Context)
		if err != nil {
			return s, false
		}
		if err := json.Unmarshal(b, &s.ctx); err != nil {
			return s, false
		}
		ct, err := decodeNumbers(b)
		if err != nil {
			return s, false
		}
		tree["context"] = ct
	}
	// As the document's omitempty fields.
	if len(in.Values) > 0 {
		s.values = values
		tree["values"] = valuesTree
	}
	if in.BackupFirst {
		tree["backupFirst"] = true
	}
	s.tree = tree
	return s, true
}

// sideByText takes the instance through the JSON text a lockfile holds.
func sideByText(in *resolver.Instance) (side, error) {
	var s side
	// The lockfile is YAML read into JSON types: numbers become float64.
	type doc struct {
		Context *drivers.Context `json:"context,omitempty"`
		Values  map[string]any   `json:"values,omitempty"`
		// BackupFirst changes what an upgrade runs, so a plan shows it
		// changing (absent when false: other plans are unchanged).
		BackupFirst bool `json:"backupFirst,omitempty"`
	}
	var lock doc
	b, err := json.Marshal(doc{in.Context, in.Values, in.BackupFirst})
	if err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	if lock.Context != nil {
		s.ctx = *lock.Context
	}
	s.values = lock.Values
	// The same bytes, with exact numbers, for diffing.
	tree, err := decodeNumbers(b)
	if err != nil {
		return s, fmt.Errorf("planner: %s: %w", in.ID, err)
	}
	s.tree = tree
	return s, nil
}

// decodeNumbers reads JSON text with every number a json.Number.
func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	err := dec.Decode(&tree)
	return tree, err
}

// upperFirst capitalises the first letter of s (ASCII).
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
