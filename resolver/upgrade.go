package resolver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
)

// UpgradeTrailer is the trailer of a commit made by `styrminctl upgrade
// --commit`: one per edited deployment, its value the deployment's key.
const UpgradeTrailer = "Styrmin-Upgrade"

// UpgradeTarget names what an upgrade edits: one deployment, or every
// deployment of an environment (Name "").
type UpgradeTarget struct {
	Cluster, Environment, Name string
}

// ParseUpgradeTarget parses "cluster/env" or "cluster/env/name".
func ParseUpgradeTarget(s string) (UpgradeTarget, error) {
	parts := strings.Split(s, "/")
	if (len(parts) != 2 && len(parts) != 3) || slices.Contains(parts, "") {
		return UpgradeTarget{}, fmt.Errorf("upgrade %q: expected CLUSTER/ENVIRONMENT or CLUSTER/ENVIRONMENT/NAME", s)
	}
	t := UpgradeTarget{Cluster: parts[0], Environment: parts[1]}
	if len(parts) == 3 {
		t.Name = parts[2]
	}
	return t, nil
}

func (t UpgradeTarget) String() string {
	s := t.Cluster + "/" + t.Environment
	if t.Name != "" {
		s += "/" + t.Name
	}
	return s
}

// UpgradeRequest is one upgrade operation: what it edits and how.
type UpgradeRequest struct {
	Target UpgradeTarget
	// AppVersion sets the application version ("": unchanged).
	AppVersion string
	// DriverVersion pins the driver version ("": unchanged).
	DriverVersion string
	// Now dates the upgrade request token written when neither version is
	// given (the caller's clock: the resolver keeps none).
	Now time.Time
	// BackupFirst sets backupBeforeUpgrade: true in every deployment file
	// the upgrade edits, so the upgrade backs each up before its pre steps
	// (the deployment's driver must declare backup and restore hooks, and
	// its environment have a backupLocation).
	BackupFirst bool
}

// UpgradeEdit is one deployment file an upgrade rewrites.
type UpgradeEdit struct {
	ID   ID
	File string
	// Data is the file's new content.
	Data []byte
	// Changes says what changed, one "field: old → new" each.
	Changes []string
	// From is the driver ("name@version") of the deployment's current
	// lock ("" when it has none), To the one the next lock selects.
	From, To string
}

// UpgradeSkip is a deployment of an environment-wide upgrade left as it
// is, and why.
type UpgradeSkip struct {
	ID     ID
	Reason string
}

// UpgradePlan is what an upgrade writes. It is checked: every edited
// deployment resolves with its new content.
type UpgradePlan struct {
	Request UpgradeRequest
	// Token is the upgrade request written ("" when a version was given).
	Token   string
	Edits   []UpgradeEdit // sorted by deployment
	Skipped []UpgradeSkip
}

// Files maps each edited file to its new content.
func (p *UpgradePlan) Files() map[string][]byte {
	out := make(map[string][]byte, len(p.Edits))
	for _, e := range p.Edits {
		out[e.File] = e.Data
	}
	return out
}

// Subject is the subject line of the upgrade's commit.
func (p *UpgradePlan) Subject() string {
	var what []string
	if p.Request.AppVersion != "" {
		what = append(what, "appVersion "+p.Request.AppVersion)
	}
	if p.Request.DriverVersion != "" {
		what = append(what, "driver version "+p.Request.DriverVersion)
	}
	if p.Token != "" {
		what = append(what, "newest driver build (request "+p.Token+")")
	}
	if p.Request.BackupFirst {
		what = append(what, "backup first")
	}
	return fmt.Sprintf("styrmin: upgrade %s: %s", p.Request.Target, strings.Join(what, ", "))
}

// Trailers are the Styrmin-Upgrade trailers of the upgrade's commit.
func (p *UpgradePlan) Trailers() []gitsource.Trailer {
	out := make([]gitsource.Trailer, 0, len(p.Edits))
	for _, e := range p.Edits {
		out = append(out, gitsource.Trailer{Key: UpgradeTrailer, Value: e.ID.String()})
	}
	return out
}

// PlanUpgrade computes the edits of an upgrade operation on the
// workspace's deployment files, and checks them: an unknown deployment, a
// driver version that is not loaded, an application version no driver
// version supports, or an edit after which the deployment does not
// resolve is an error naming the file and the field, and nothing is to be
// written. An upgrade asks for one of three things:
//
//   - AppVersion: set appVersion (the lock re-selects the driver version);
//   - DriverVersion: pin driver.version;
//   - neither: write a new driver.upgrade request token, so the next lock
//     takes the newest driver build for the current application version,
//     once. A deployment that pins a version is refused (a pin wins), or
//     skipped by an environment-wide upgrade.
//
// A plan may have no edits: every deployment already is as asked.
func (w *Workspace) PlanUpgrade(req UpgradeRequest) (*UpgradePlan, error) {
	if w.fsys == nil {
		return nil, errors.New("upgrade: the workspace has no files to edit")
	}
	env, err := w.upgradeEnvironment(req.Target)
	if err != nil {
		return nil, err
	}
	targets := env.Deployments
	if req.Target.Name != "" {
		i := slices.IndexFunc(env.Deployments, func(d *Deployment) bool { return d.ID.Name == req.Target.Name })
		if i < 0 {
			return nil, &ConfigError{File: path.Join(path.Dir(env.File), "deployments", req.Target.Name+".cue"), Msg: fmt.Sprintf("no deployment %q in environment %s/%s (it has: %s)", req.Target.Name, req.Target.Cluster, req.Target.Environment, strings.Join(deploymentNames(env), ", "))}
		}
		targets = env.Deployments[i : i+1]
	}
	if len(targets) == 0 {
		return nil, &ConfigError{File: path.Join(path.Dir(env.File), "deployments"), Msg: fmt.Sprintf("environment %s/%s has no deployments to upgrade", req.Target.Cluster, req.Target.Environment)}
	}

	plan := &UpgradePlan{Request: req}
	newest := req.AppVersion == "" && req.DriverVersion == ""
	sets := map[ID][]fieldSet{}
	var wantToken []*Deployment
	for _, d := range targets {
		var s []fieldSet
		if req.AppVersion != "" && req.AppVersion != d.AppVersion {
			s = append(s, fieldSet{field: "appVersion", value: req.AppVersion})
		}
		if req.DriverVersion != "" {
			if _, ok := w.Catalog.Get(d.Driver, req.DriverVersion); !ok {
				return nil, &ConfigError{File: d.File, Field: "driver.version", Msg: fmt.Sprintf("driver %s has no version %s loaded (loaded: %s)", d.Driver, req.DriverVersion, loadedVersions(w.Catalog, d.Driver))}
			}
			if req.DriverVersion != d.DriverVersion {
				s = append(s, fieldSet{under: "driver", field: "version", value: req.DriverVersion})
			}
		}
		if newest && d.DriverVersion != "" {
			why := fmt.Sprintf("pins driver %s %s, and a pin wins over an upgrade request", d.Driver, d.DriverVersion)
			if req.Target.Name != "" {
				return nil, &ConfigError{File: d.File, Field: "driver.version", Msg: why + ": pass --driver-version to move the pin, or remove the pin first"}
			}
			plan.Skipped = append(plan.Skipped, UpgradeSkip{ID: d.ID, Reason: why})
			continue
		}
		if newest {
			wantToken = append(wantToken, d)
		}
		sets[d.ID] = s
	}
	if newest {
		if len(wantToken) == 0 {
			return nil, fmt.Errorf("upgrade %s: every deployment pins its driver version: nothing to upgrade to the newest build (pass --driver-version)", req.Target)
		}
		plan.Token = w.newUpgradeToken(req.Now, wantToken)
		for _, d := range wantToken {
			sets[d.ID] = append(sets[d.ID], fieldSet{under: "driver", field: "upgrade", value: plan.Token})
		}
	}

	loader := NewLoader(w.opts.MaxFileSize).WithSandbox(w.opts.ConfigSandbox)
	edited := map[ID]*Deployment{}
	for _, d := range targets {
		s := sets[d.ID]
		if len(s) == 0 {
			continue
		}
		if req.BackupFirst && d.Settings["backupBeforeUpgrade"] != true {
			s = append(s, fieldSet{field: "backupBeforeUpgrade", value: "true", boolean: true})
		}
		data, err := readLimited(w.fsys, d.File, loader.maxFileSize)
		if err != nil {
			return nil, err
		}
		out, err := setFields(d.File, data, s)
		if err != nil {
			return nil, err
		}
		nd, err := loader.parseDeployment(d.File, out, d.ID)
		if err != nil {
			return nil, fmt.Errorf("upgrade %s refused, no file changed: %w", d.ID, err)
		}
		if err := sameButFor(d, nd, s); err != nil {
			return nil, err
		}
		edited[d.ID] = nd
		plan.Edits = append(plan.Edits, UpgradeEdit{ID: d.ID, File: d.File, Data: out, Changes: describeSets(d, s)})
	}
	if len(edited) == 0 {
		return plan, nil
	}
	if err := w.checkUpgrade(env, edited, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// upgradeEnvironment finds the environment an upgrade targets.
func (w *Workspace) upgradeEnvironment(t UpgradeTarget) (*Environment, error) {
	var clusters []string
	for _, c := range w.Repo.Clusters {
		clusters = append(clusters, c.Name)
		if c.Name != t.Cluster {
			continue
		}
		var envs []string
		for _, e := range c.Environments {
			if e.Name == t.Environment {
				return e, nil
			}
			envs = append(envs, e.Name)
		}
		return nil, &ConfigError{File: path.Join("clusters", t.Cluster, "environments", t.Environment, "environment.cue"), Msg: fmt.Sprintf("no environment %q in cluster %s (it has: %s)", t.Environment, t.Cluster, strings.Join(envs, ", "))}
	}
	return nil, &ConfigError{File: path.Join("clusters", t.Cluster, "cluster.cue"), Msg: fmt.Sprintf("no cluster %q (the repository has: %s)", t.Cluster, strings.Join(clusters, ", "))}
}

// newUpgradeToken returns "YYYY-MM-DD-N" with the smallest N that no
// deployment of ds has in its file or its lock, so the request is new to
// each of them. One token for the whole operation: one commit, one word
// to find it by.
func (w *Workspace) newUpgradeToken(now time.Time, ds []*Deployment) string {
	taken := map[string]bool{}
	for _, d := range ds {
		taken[d.UpgradeRequest] = true
		if l := w.Locks[d.ID]; l != nil {
			taken[l.Driver.UpgradeRequest] = true
		}
	}
	day := now.UTC().Format(time.DateOnly)
	for n := 1; ; n++ {
		if t := fmt.Sprintf("%s-%d", day, n); !taken[t] {
			return t
		}
	}
}

// sameButFor checks that an edit changed exactly the fields asked for:
// the edits are textual, so this is what makes them safe.
func sameButFor(old, nd *Deployment, sets []fieldSet) error {
	want := *old
	for _, s := range sets {
		switch s.path() {
		case "appVersion":
			want.AppVersion = s.value
		case "driver.version":
			want.DriverVersion = s.value
		case "driver.upgrade":
			want.UpgradeRequest = s.value
		default:
			if s.boolean {
				want.Settings = maps.Clone(want.Settings)
				if want.Settings == nil {
					want.Settings = map[string]any{}
				}
				want.Settings[s.field] = s.value == "true"
			}
		}
	}
	want.pos = nd.pos // where fields were written moves with an edit; only values count
	if !reflect.DeepEqual(&want, nd) {
		return &ConfigError{File: old.File, Msg: "the upgrade's edit would change more than the fields it sets (a bug in the editor, or a layout it does not know): edit the file by hand"}
	}
	return nil
}

// describeSets says what each set changes.
func describeSets(d *Deployment, sets []fieldSet) []string {
	var out []string
	for _, s := range sets {
		old := ""
		switch s.path() {
		case "appVersion":
			old = d.AppVersion
		case "driver.version":
			old = d.DriverVersion
		case "driver.upgrade":
			old = d.UpgradeRequest
		default:
			if v, ok := d.Settings[s.field].(bool); ok {
				old = fmt.Sprint(v)
			}
		}
		if old == "" {
			old = "(unset)"
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", s.path(), old, s.value))
	}
	return out
}

// checkUpgrade resolves the edited deployments (with their siblings as
// they are) against the current locks, and fills in the driver each next
// lock selects. A failure is the deployment's error: the upgrade writes
// nothing.
func (w *Workspace) checkUpgrade(env *Environment, edited map[ID]*Deployment, plan *UpgradePlan) error {
	repo := &Repository{Settings: w.Repo.Settings}
	for _, c := range w.Repo.Clusters {
		cc := c
		for i, e := range c.Environments {
			if e != env {
				continue
			}
			ne := *e
			ne.Deployments = slices.Clone(e.Deployments)
			for j, d := range ne.Deployments {
				if nd, ok := edited[d.ID]; ok {
					ne.Deployments[j] = nd
				}
			}
			copied := *c
			copied.Environments = slices.Clone(c.Environments)
			copied.Environments[i] = &ne
			cc = &copied
		}
		repo.Clusters = append(repo.Clusters, cc)
	}
	only := map[ID]bool{}
	for id := range edited {
		only[id] = true
	}
	res := Resolve(repo, Options{Catalog: w.Catalog, Locks: w.Locks, SourceCommit: w.opts.SourceCommit, Only: only})
	if err := res.Err(); err != nil {
		return fmt.Errorf("upgrade %s refused, no file changed: %w", plan.Request.Target, err)
	}
	for i := range plan.Edits {
		e := &plan.Edits[i]
		if r, ok := res.Get(e.ID); ok {
			e.To = r.Instance.Driver.Name + "@" + r.Instance.Driver.Version
		}
		if l := w.Locks[e.ID]; l != nil && !l.Tombstone() {
			e.From = l.Driver.Name + "@" + l.Driver.Version
		}
	}
	return nil
}

func loadedVersions(c *drivers.Catalog, name string) string {
	var vs []string
	for _, d := range c.Versions(name) {
		vs = append(vs, d.Version)
	}
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// UpgradeCommit reports what CommitUpgrade committed.
type UpgradeCommit struct {
	gitsource.CommitResult
	// Plan is the upgrade of the attempt that landed.
	Plan *UpgradePlan
}

// CommitUpgrade plans the upgrade on the head of the writer's branch and
// commits every edited file in one commit (an environment-wide upgrade is
// one commit), with a Styrmin-Upgrade trailer per deployment. Like a lock
// commit it is compare-and-swap: each attempt plans again on the newest
// head. A checked-out worktree is updated, and a file to edit with
// uncommitted changes is refused (gitsource.ErrDirtyWorktree). A plan
// without edits makes no commit.
func CommitUpgrade(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, req UpgradeRequest, co CommitOptions) (UpgradeCommit, error) {
	var out UpgradeCommit
	build := func(ctx context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		if err := co.checkHead(headFS); err != nil {
			return gitsource.Change{}, err
		}
		o := opts
		if !head.IsZero() {
			o.SourceCommit = head.String()
		}
		ws, err := LoadWorkspace(headFS, o)
		if err != nil {
			return gitsource.Change{}, err
		}
		plan, err := ws.PlanUpgrade(req)
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Plan = plan
		return gitsource.Change{Files: plan.Files(), Subject: plan.Subject(), Trailers: plan.Trailers()}, nil
	}
	res, err := w.CommitLocks(ctx, co.request(build, nil))
	out.CommitResult = res
	return out, err
}
