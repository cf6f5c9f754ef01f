package resolver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
	yaml "go.yaml.in/yaml/v3"

	"github.com/styrmin/styrmin/gitsource"
)

// The trailers of the commits `styrminctl env clone --commit` and `env
// delete --commit` make: the environment written or removed.
const (
	CloneTrailer             = "Styrmin-Clone"
	EnvironmentDeleteTrailer = "Styrmin-Delete-Environment"
)

// LatestBackup is the --from-backup value that names the newest backup
// of the source: the caller (which can ask the cluster) resolves it to
// an ID before PlanClone.
const LatestBackup = "latest"

var commitRE = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// CloneRequest is one `env clone`: a copy of environment Source of
// Cluster, named Target, in TargetCluster ("": the same cluster).
type CloneRequest struct {
	Cluster, Source string
	Target          string
	TargetCluster   string
	// FromBackup is the ID of the source's backup the clone's deployments
	// restore in their setup hook ("": none, the clone starts empty).
	FromBackup string
	// NamespacePrefix of the clone ("": the clone's name).
	NamespacePrefix string
	// BackupHolds is what FromBackup's record (the source cluster's
	// StyrminBackup, when the caller read it) says of each deployment's
	// part: true when it succeeded, false when it did not (yet); a
	// deployment the backup has no part of is absent. Nil: not known,
	// and every cloned deployment is listed to restore (the agent checks
	// each create against the record where it holds it).
	BackupHolds map[string]bool
}

// ClonePlan is what a clone writes. It is checked: the clone's
// deployments resolve, in namespaces of their own.
type ClonePlan struct {
	Request CloneRequest
	// Dir is the clone's folder, clusters/<cluster>/environments/<target>.
	Dir string
	// EnvironmentFile is the clone's environment file (rewritten; every
	// other file is a byte-for-byte copy).
	EnvironmentFile string
	// ClonedFrom is what the clone records in clonedFrom.
	ClonedFrom CloneSource
	// BackupLocation is the clone's own location ("": none).
	BackupLocation string
	// DroppedSchedule is true when the source's backups.schedule or keep
	// were left out: a clone takes no scheduled backups of its own.
	DroppedSchedule bool
	// NotInBackup are the cloned deployments the backup has no part of
	// (Request.BackupHolds said so), sorted: clonedFrom.deployments
	// leaves them out, so they start empty.
	NotInBackup []string
	// NotCopied are the files of the source's folder Styrmin does not
	// read (web.cue.bak, README.md, _templates/…), relative to it and
	// sorted: the clone copies only its environment and deployment
	// files, whose sensitive values it checks; an unread file may hold
	// one in clear (an editor's backup of a deployment file).
	NotCopied   []string
	Deployments []ID // sorted
	// Warnings are the plan and lock warnings (SharedDomains) the clone
	// adds to the repository's: a clone into another cluster of the same
	// domain, under the name of one of its environments, renders that
	// environment's external hosts.
	Warnings []string
	files    map[string][]byte
}

// Files maps each file the clone writes to its content.
func (p *ClonePlan) Files() map[string][]byte { return p.files }

// Subject is the subject line of the clone's commit.
func (p *ClonePlan) Subject() string {
	s := fmt.Sprintf("styrmin: env clone %s/%s → %s/%s", p.Request.Cluster, p.Request.Source, p.targetCluster(), p.Request.Target)
	if p.ClonedFrom.Backup != "" {
		s += " from backup " + p.ClonedFrom.Backup
	}
	return s
}

// Trailers are the Styrmin-Clone trailer of the clone's commit.
func (p *ClonePlan) Trailers() []gitsource.Trailer {
	return []gitsource.Trailer{{Key: CloneTrailer, Value: p.targetCluster() + "/" + p.Request.Target}}
}

func (p *ClonePlan) targetCluster() string { return cmp.Or(p.Request.TargetCluster, p.Request.Cluster) }

// PlanClone computes the files of a clone and checks them; bad input is
// an error naming the environment (its file) and what was expected, and
// nothing is to be written:
//
//   - the target must be a new environment name (a DNS label of at most
//     40) of the target cluster, the source an existing environment;
//   - the namespace prefix (default: the target's name) must give every
//     cloned deployment a namespace no deployment of the target cluster
//     has;
//   - a clone from a backup needs an s3:// backupLocation on the source
//     (a pvc:// claim lives in one namespace, which the clone's
//     deployments cannot read), and, when the caller read the backup's
//     record (BackupHolds), a part that succeeded of at least one cloned
//     deployment and no part that did not;
//   - the clone's derived backupLocation must be no environment's of the
//     configuration (cloneLocations).
//   - a deployment to restore the backup must have a driver that restores
//     it (a restoreBackup step in its setup hook) when it can back up.
//
// The clone's environment file is the source's with namespacePrefix set,
// backupLocation derived for the clone (cloneLocations), backups.schedule
// and keep dropped, and clonedFrom set; deployment files
// are copied byte for byte, and no other file (NotCopied). The source
// commit recorded is the
// workspace's SourceCommit (the commit HEAD names), so the working tree's
// configuration must be committed.
func (w *Workspace) PlanClone(req CloneRequest) (*ClonePlan, error) {
	if w.fsys == nil {
		return nil, errors.New("env clone: the workspace has no files to copy")
	}
	src, err := w.upgradeEnvironment(UpgradeTarget{Cluster: req.Cluster, Environment: req.Source})
	if err != nil {
		return nil, err
	}
	srcCluster := w.cluster(req.Cluster)
	tc := cmp.Or(req.TargetCluster, req.Cluster)
	dstCluster := w.cluster(tc)
	dir := path.Join("clusters", tc, "environments", req.Target)
	dstFile := path.Join(dir, path.Base(src.File))
	refuse := func(format string, args ...any) error {
		return &ConfigError{File: dstFile, Msg: fmt.Sprintf("env clone %s/%s → %s/%s refused, nothing written: ", req.Cluster, req.Source, tc, req.Target) + fmt.Sprintf(format, args...)}
	}
	switch {
	case dstCluster == nil:
		return nil, &ConfigError{File: path.Join("clusters", tc, "cluster.cue"), Msg: fmt.Sprintf("no cluster %q to clone into (the repository has: %s)", tc, strings.Join(w.clusterNames(), ", "))}
	case !nameRE.MatchString(req.Target) || len(req.Target) > 40:
		return nil, refuse("the new environment's name %q must be a lowercase DNS label of at most 40 characters", req.Target)
	case slices.ContainsFunc(dstCluster.Environments, func(e *Environment) bool { return e.Name == req.Target }):
		return nil, refuse("environment %s/%s exists already: choose a new name, or delete it first (styrminctl env delete %s/%s)", tc, req.Target, tc, req.Target)
	}
	prefix := cmp.Or(req.NamespacePrefix, req.Target)
	if !nameRE.MatchString(prefix) || len(prefix) > 40 {
		return nil, refuse("namespace prefix %q must be a lowercase DNS label of at most 40 characters", prefix)
	}
	if err := cloneNamespaceCollisions(dstCluster, src, prefix); err != nil {
		return nil, refuse("%v", err)
	}
	commit := w.opts.SourceCommit
	if !commitRE.MatchString(commit) {
		return nil, refuse("the clone records the commit of %s/%s it copies, and the working tree's configuration is no commit: commit it first", req.Cluster, req.Source)
	}
	srcLoc := backupLocationOf(srcCluster, src)
	cf := CloneSource{Cluster: req.Cluster, Environment: req.Source, Commit: commit}
	if req.FromBackup != "" {
		switch {
		case req.FromBackup == LatestBackup:
			return nil, refuse("--from-backup latest must be resolved to a backup ID first (the cluster knows the backups)")
		case !isDNSLabel(req.FromBackup):
			return nil, refuse("backup %q: expected a backup ID (a DNS-1123 label)", req.FromBackup)
		case srcLoc == "":
			return nil, refuse("%s/%s has no backupLocation (%s), so it has no backups to clone from", req.Cluster, req.Source, src.File)
		case strings.HasPrefix(srcLoc, SchemePVC+"://"):
			return nil, refuse("%s/%s backs up to %s, a PersistentVolumeClaim in one namespace, which the clone's deployments cannot read: use an s3:// backupLocation to clone from a backup", req.Cluster, req.Source, srcLoc)
		}
		cf.Backup, cf.Location = req.FromBackup, srcLoc
	}
	// Only the deployments the backup holds restore it: one added to the
	// clone later has nothing there, nor has one the backup (as its
	// record says) did not take. A part that did not succeed is refused:
	// its restore would read a missing or truncated artefact.
	var notHeld, failed []string
	if cf.Backup != "" {
		for _, d := range src.Deployments {
			n := d.ID.Name
			switch succeeded, held := req.BackupHolds[n]; {
			case req.BackupHolds == nil || succeeded:
				cf.Deployments = append(cf.Deployments, n)
			case held:
				failed = append(failed, n)
			default:
				notHeld = append(notHeld, n)
			}
		}
		slices.Sort(cf.Deployments)
		slices.Sort(failed)
		slices.Sort(notHeld)
	}
	switch {
	case len(failed) > 0:
		return nil, refuse("backup %s's part of %s did not succeed: there is nothing to restore; clone from a backup that holds them (styrminctl backup list %s/%s)", cf.Backup, strings.Join(failed, ", "), req.Cluster, req.Source)
	case cf.Backup != "" && len(cf.Deployments) == 0:
		return nil, refuse("backup %s holds none of the deployments of %s/%s (%s): clone from a backup that holds them (styrminctl backup list %s/%s)", cf.Backup, req.Cluster, req.Source, strings.Join(notHeld, ", "), req.Cluster, req.Source)
	}
	dstLoc := ""
	if srcLoc != "" {
		l, err := ParseBackupLocation(srcLoc)
		if err != nil {
			return nil, refuse("%v", err)
		}
		used := w.backupLocationsInUse()
		var users []string
		for _, c := range cloneLocations(l, req.Cluster, req.Source, tc, req.Target) {
			if u, ok := used[c.String()]; ok {
				users = append(users, fmt.Sprintf("%s is the backupLocation of %s", c, u))
				continue
			}
			dstLoc = c.String()
			break
		}
		if dstLoc == "" {
			return nil, &ConfigError{File: dstFile, Field: "backupLocation", Msg: fmt.Sprintf("env clone %s/%s → %s/%s refused, nothing written: no backup location of its own can be derived from %s (%s): a clone never shares one, or the two environments' backups would overwrite and delete each other's; choose another name for the clone, or move those environments' backupLocation",
				req.Cluster, req.Source, tc, req.Target, srcLoc, strings.Join(users, "; "))}
		}
	}

	plan := &ClonePlan{Request: req, Dir: dir, EnvironmentFile: dstFile, ClonedFrom: cf, BackupLocation: dstLoc, NotInBackup: notHeld, files: map[string][]byte{}}
	srcDir := path.Dir(src.File)
	read := map[string]bool{src.File: true}
	for _, d := range src.Deployments {
		read[d.File] = true
	}
	err = fs.WalkDir(w.fsys, srcDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(p, srcDir+"/")
		if !read[p] {
			plan.NotCopied = append(plan.NotCopied, rel)
			return nil
		}
		data, err := readLimited(w.fsys, p, NewLoader(w.opts.MaxFileSize).maxFileSize)
		if err != nil {
			return err
		}
		if p == src.File {
			data, plan.DroppedSchedule, err = cloneEnvironmentFile(p, data, prefix, dstLoc, cf)
			if err != nil {
				return err
			}
		}
		plan.files[path.Join(dir, rel)] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range src.Deployments {
		plan.Deployments = append(plan.Deployments, ID{Cluster: tc, Environment: req.Target, Name: d.ID.Name})
	}
	res, err := w.checkClone(plan)
	if err != nil {
		return nil, err
	}
	before := SharedDomains(w.Repo)
	for _, warning := range res.Warnings {
		if !slices.Contains(before, warning) {
			plan.Warnings = append(plan.Warnings, warning)
		}
	}
	if err := w.sensitiveCopies(res, dstCluster.File, src, plan.Dir); err != nil {
		return nil, err
	}
	if empty := w.restoringNothing(res, cf.Deployments); len(empty) > 0 {
		return nil, refuse("%s: clonedFrom.deployments lists them to restore backup %s, and their create would set them up empty; use a driver version whose setup restores, or clone without --from-backup", strings.Join(empty, "; "), cf.Backup)
	}
	return plan, nil
}

// sensitiveCopies refuses a clone that would copy a sensitive value set
// in clear in the source's folder (a deployment file, or the environment
// file's parameters) into the clone's: a value is in clear only in the
// file its author wrote, and the copy would put it in a new file, and in
// a commit with --commit. Each error names the file and the parameter,
// never the value, and every one is named at once (sorted by file and
// line), so a user fixes them in one go rather than one per run. A
// #SecretRef is a reference, copied as such; a value set in the target
// cluster's file (clusterFile) is not copied (the clone reads it there).
// A deployment whose driver the catalog lacks is refused, as the clone's
// resolution refuses it: which of its parameters are sensitive is
// unknown, so its files cannot be copied safely.
func (w *Workspace) sensitiveCopies(res *Result, clusterFile string, src *Environment, dir string) error {
	byName, inAny, errs := w.sensitiveByDeployment(res, src)
	srcDir := path.Dir(src.File)
	check := func(file string, settings map[string]any, pos map[string]token.Position, sensitive map[string]bool) {
		params, _ := settings["parameters"].(map[string]any)
		for _, name := range slices.Sorted(maps.Keys(params)) {
			if !sensitive[name] {
				continue
			}
			to := path.Join(dir, strings.TrimPrefix(file, srcDir+"/"))
			errs = append(errs, placed(&ConfigError{File: file, Field: "parameters." + name, Msg: fmt.Sprintf("env clone refused, nothing written: sensitive parameter %s is set here in clear, and the clone would copy its value into %s (a sensitive value is in clear only in the file its author wrote): give it as a Secret reference (a driver version whose parameter is a #SecretRef, the value in a Secret), or set it in %s, which the clone reads without a copy, and clone again", name, to, clusterFile)}, pos))
		}
	}
	check(src.File, src.Settings, src.pos, inAny)
	for _, d := range src.Deployments {
		if names, ok := byName[d.ID.Name]; ok {
			check(d.File, d.Settings, d.pos, names)
		}
	}
	return joinConfigErrors(errs)
}

// sensitiveByDeployment maps each deployment of src to the names of its
// driver's sensitive parameters set in clear (not #SecretRef), inAny
// being their union (the environment file's parameters reach every
// deployment); a deployment whose driver is not loaded is an error each.
func (w *Workspace) sensitiveByDeployment(res *Result, src *Environment) (byName map[string]map[string]bool, inAny map[string]bool, errs []*ConfigError) {
	byName, inAny = map[string]map[string]bool{}, map[string]bool{}
	driverOf := map[string]string{}
	for _, r := range res.Resolved {
		driverOf[r.Instance.ID.Name] = r.Instance.Driver.Name + "@" + r.Instance.Driver.Version
		if w.Catalog == nil {
			continue
		}
		d, ok := w.Catalog.Get(r.Instance.Driver.Name, r.Instance.Driver.Version)
		if !ok {
			continue
		}
		names := map[string]bool{}
		for _, p := range d.Parameters {
			if p.Sensitive && !p.Secret {
				names[p.Name], inAny[p.Name] = true, true
			}
		}
		byName[r.Instance.ID.Name] = names
	}
	for _, d := range src.Deployments {
		if _, ok := byName[d.ID.Name]; !ok {
			errs = append(errs, placed(&ConfigError{File: d.File, Field: "driver", Msg: fmt.Sprintf("env clone refused, nothing written: driver %s of deployment %s is not loaded, so which of its parameters are sensitive is unknown and its files could copy a sensitive value set in clear: load that driver version (drivers/, or a driver source in styrmin.cue) and clone again",
				cmp.Or(driverOf[d.ID.Name], d.Driver), d.ID)}, d.pos))
		}
	}
	return byName, inAny, errs
}

// restoringNothing names the deployments of listed (those that restore
// the clone's backup) whose resolved driver can back up but has no
// restoreBackup step in its setup hook: the restore runs only there, so
// their create would come up empty (the agent refuses it).
func (w *Workspace) restoringNothing(res *Result, listed []string) []string {
	var out []string
	for _, r := range res.Resolved {
		in := r.Instance
		if !slices.Contains(listed, in.ID.Name) || w.Catalog == nil {
			continue
		}
		d, ok := w.Catalog.Get(in.Driver.Name, in.Driver.Version)
		if ok && d.CanBackup() && !d.RestoresInSetup() {
			out = append(out, fmt.Sprintf("driver %s@%s of %s has no restoreBackup step in its setup hook", d.Name, d.Version, in.ID.Name))
		}
	}
	return out
}

// checkClone loads the repository with the clone's files and resolves
// the clone's deployments, returning the resolution: whatever fails
// there (a driver the target cluster lacks, a policy) fails the clone.
func (w *Workspace) checkClone(plan *ClonePlan) (*Result, error) {
	repo, err := NewLoader(w.opts.MaxFileSize).WithSandbox(w.opts.ConfigSandbox).Load(newFolderOverlay(w.fsys, plan.files, ""))
	if err != nil {
		return nil, fmt.Errorf("env clone refused, nothing written: %w", err)
	}
	// A location derived for the clone is no environment's, but one it
	// takes from its cluster may be an environment's of its name in
	// another cluster (Load leaves that to plan and lock). Only the
	// clone's: one the repository shares already is the lock's to refuse.
	_, byEnv := sharedBackupLocations(repo.Clusters)
	if err := byEnv[cmp.Or(plan.Request.TargetCluster, plan.Request.Cluster)+"/"+plan.Request.Target]; err != nil {
		return nil, fmt.Errorf("env clone refused, nothing written: %w", err)
	}
	only := map[ID]bool{}
	for _, id := range plan.Deployments {
		only[id] = true
	}
	res := Resolve(repo, Options{Catalog: w.Catalog, Locks: w.Locks, SourceCommit: w.opts.SourceCommit, Only: only, DriverOrigins: w.origins})
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("env clone refused, nothing written: %w", err)
	}
	return res, nil
}

func (w *Workspace) cluster(name string) *Cluster {
	for _, c := range w.Repo.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (w *Workspace) clusterNames() []string {
	var out []string
	for _, c := range w.Repo.Clusters {
		out = append(out, c.Name)
	}
	return out
}

// cloneNamespaceCollisions refuses a prefix under which a cloned
// deployment would take a namespace of the target cluster (another
// environment's deployment, or an ingress controller's).
func cloneNamespaceCollisions(c *Cluster, src *Environment, prefix string) error {
	taken := map[string]string{}
	for _, e := range c.Environments {
		for _, d := range e.Deployments {
			taken[NamespaceOf(e, d)] = fmt.Sprintf("%s (%s)", d.ID, d.File)
		}
	}
	for _, ic := range ingressControllers(c) {
		taken[ic.namespace] = fmt.Sprintf("the ingress controller %s (%s)", ic.id, c.File)
	}
	for _, d := range src.Deployments {
		ns := prefix + "-" + d.ID.Name
		if other, ok := taken[ns]; ok {
			return fmt.Errorf("namespace prefix %q gives deployment %s the namespace %q of %s: pass another --namespace-prefix", prefix, d.ID.Name, ns, other)
		}
		if reserved(ns) {
			return fmt.Errorf("namespace prefix %q gives deployment %s the reserved namespace %q: pass another --namespace-prefix", prefix, d.ID.Name, ns)
		}
		if len(ns) > 63 {
			return fmt.Errorf("namespace prefix %q gives deployment %s the namespace %q, longer than 63 characters: pass a shorter --namespace-prefix", prefix, d.ID.Name, ns)
		}
	}
	return nil
}

// cloneLocations are the backup locations the clone of environment src
// of cluster srcCluster, named dst in cluster dstCluster, may take, in
// order of preference: the source's bucket or claim, with the path's last
// element dst where it was src, else dst appended, and for a clone into
// another cluster the element before it dstCluster where it was
// srcCluster (the <cluster>/<environment> layout); then the same with the
// last element <dstCluster>-<dst>. The caller takes the first no
// environment uses: a clone into another cluster under the same name
// would otherwise keep its source's location, and two clusters' agents,
// whose backup IDs are each their own (a schedule's dev-YYYYMMDD-HHMM in
// both), would write, and retention delete, the same artefacts.
func cloneLocations(l BackupLocation, srcCluster, src, dstCluster, dst string) []BackupLocation {
	segs := []string{}
	if l.Path != "" {
		segs = strings.Split(l.Path, "/")
	}
	if n := len(segs); n > 0 && segs[n-1] == src {
		segs[n-1] = dst
		if n > 1 && dstCluster != srcCluster && segs[n-2] == srcCluster {
			segs[n-2] = dstCluster
		}
	} else {
		segs = append(segs, dst)
	}
	first := l
	first.Path = strings.Join(segs, "/")
	segs[len(segs)-1] = dstCluster + "-" + dst
	second := l
	second.Path = strings.Join(segs, "/")
	return []BackupLocation{first, second}
}

// backupLocationsInUse maps each backup location an environment of the
// configuration uses (its own, or its cluster's) to the first such
// environment and its file.
func (w *Workspace) backupLocationsInUse() map[string]string {
	out := map[string]string{}
	for loc, us := range backupLocationUsers(w.Repo.Clusters) {
		out[loc] = fmt.Sprintf("%s/%s (%s)", us[0].cluster.Name, us[0].env.Name, us[0].env.File)
	}
	return out
}

// cloneEnvironmentFile rewrites a source environment file for its clone,
// keeping its format and comments. It reports whether a backup schedule
// or retention was dropped.
func cloneEnvironmentFile(file string, data []byte, prefix, location string, cf CloneSource) ([]byte, bool, error) {
	if path.Ext(file) == ".cue" {
		return cloneCUEEnvironment(file, data, prefix, location, cf)
	}
	return cloneYAMLEnvironment(file, data, prefix, location, cf)
}

func cloneCUEEnvironment(file string, data []byte, prefix, location string, cf CloneSource) ([]byte, bool, error) {
	f, err := parser.ParseFile(file, data, parser.ParseComments)
	if err != nil {
		return nil, false, cueSyntaxError(file, err)
	}
	set := func(name string, v ast.Expr) error {
		fd, n := oneField(f.Decls, name)
		switch n {
		case 0:
			f.Decls = append(f.Decls, &ast.Field{Label: ast.NewIdent(name), Value: v})
		case 1:
			fd.Value = v
		default:
			return &ConfigError{File: file, Field: name, Msg: fmt.Sprintf("the file defines %s %d times, so env clone does not rewrite it: define it once", name, n)}
		}
		return nil
	}
	if err := set("namespacePrefix", ast.NewString(prefix)); err != nil {
		return nil, false, err
	}
	if location != "" {
		if err := set("backupLocation", ast.NewString(location)); err != nil {
			return nil, false, err
		}
	}
	dropped := false
	if fd, n := oneField(f.Decls, "backups"); n > 1 {
		return nil, false, &ConfigError{File: file, Field: "backups", Msg: fmt.Sprintf("the file defines backups %d times, so env clone does not rewrite it: define it once", n)}
	} else if n == 1 {
		st, ok := fd.Value.(*ast.StructLit)
		if !ok {
			return nil, false, &ConfigError{File: file, Field: "backups", Msg: "is not a struct literal, so env clone does not rewrite it"}
		}
		kept := st.Elts[:0:0]
		for _, el := range st.Elts {
			if ef, ok := el.(*ast.Field); ok {
				if l, _, err := ast.LabelName(ef.Label); err == nil && (l == "schedule" || l == "keep") {
					dropped = true
					continue
				}
			}
			kept = append(kept, el)
		}
		st.Elts = kept
		if len(kept) == 0 {
			f.Decls = slices.DeleteFunc(f.Decls, func(d ast.Decl) bool { return d == ast.Decl(fd) })
		} else if !st.Lbrace.IsValid() && len(kept) > 0 {
			// backups: schedule: "…" written without braces: keep it valid.
			st.Lbrace, st.Rbrace = fd.Pos(), fd.Pos()
		}
	}
	elts := []any{ast.NewIdent("cluster"), ast.NewString(cf.Cluster), ast.NewIdent("environment"), ast.NewString(cf.Environment), ast.NewIdent("commit"), ast.NewString(cf.Commit)}
	if cf.Backup != "" {
		elts = append(elts, ast.NewIdent("backup"), ast.NewString(cf.Backup), ast.NewIdent("location"), ast.NewString(cf.Location))
		names := make([]ast.Expr, len(cf.Deployments))
		for i, n := range cf.Deployments {
			names[i] = ast.NewString(n)
		}
		elts = append(elts, ast.NewIdent("deployments"), ast.NewList(names...))
	}
	cfv := ast.NewStruct(elts...)
	if err := set("clonedFrom", cfv); err != nil {
		return nil, false, err
	}
	out, err := format.Node(f)
	if err != nil {
		return nil, false, &ConfigError{File: file, Msg: "env clone could not write the environment file: " + err.Error()}
	}
	return out, dropped, nil
}

func cloneYAMLEnvironment(file string, data []byte, prefix, location string, cf CloneSource) ([]byte, bool, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, false, &ConfigError{File: file, Msg: err.Error()}
	}
	if len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, false, &ConfigError{File: file, Msg: "the file is not one YAML mapping, so env clone does not rewrite it"}
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	set := func(name string, v *yaml.Node) error {
		old, n := yamlValue(root, name)
		switch n {
		case 0:
			root.Content = append(root.Content, str(name), v)
		case 1:
			v.LineComment = old.LineComment
			*old = *v
		default:
			return &ConfigError{File: file, Field: name, Msg: fmt.Sprintf("%s is defined %d times, so env clone does not rewrite it", name, n)}
		}
		return nil
	}
	if err := set("namespacePrefix", str(prefix)); err != nil {
		return nil, false, err
	}
	if location != "" {
		if err := set("backupLocation", str(location)); err != nil {
			return nil, false, err
		}
	}
	dropped := false
	if b, n := yamlValue(root, "backups"); n == 1 && b.Kind == yaml.MappingNode {
		var kept []*yaml.Node
		for i := 0; i+1 < len(b.Content); i += 2 {
			if k := b.Content[i].Value; k == "schedule" || k == "keep" {
				dropped = true
				continue
			}
			kept = append(kept, b.Content[i], b.Content[i+1])
		}
		b.Content = kept
		if len(kept) == 0 {
			for i := 0; i+1 < len(root.Content); i += 2 {
				if root.Content[i].Value == "backups" {
					root.Content = append(root.Content[:i], root.Content[i+2:]...)
					break
				}
			}
		}
	} else if n > 0 {
		return nil, false, &ConfigError{File: file, Field: "backups", Msg: "is not one mapping, so env clone does not rewrite it"}
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, kv := range [][2]string{{"cluster", cf.Cluster}, {"environment", cf.Environment}, {"commit", cf.Commit}, {"backup", cf.Backup}, {"location", cf.Location}} {
		if kv[1] != "" {
			m.Content = append(m.Content, str(kv[0]), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: kv[1]})
		}
	}
	if cf.Backup != "" {
		names := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, n := range cf.Deployments {
			names.Content = append(names.Content, str(n))
		}
		m.Content = append(m.Content, str("deployments"), names)
	}
	if err := set("clonedFrom", m); err != nil {
		return nil, false, err
	}
	out, err := encodeYAML(file, &doc)
	return out, dropped, err
}

// EnvironmentDeleteRequest is one `env delete`.
type EnvironmentDeleteRequest struct {
	Cluster, Environment string
}

// EnvironmentDeletePlan is what an environment's deletion removes: its
// folder. The next lock tombstones its deployments, under the deletion
// threshold (Deletions says whether it needs an allowance).
type EnvironmentDeletePlan struct {
	Request EnvironmentDeleteRequest
	Dir     string
	// Deployments the next lock deletes, sorted.
	Deployments []ID
	// Deletions is the deletion rule for those deployments alone: when
	// Refused, the lock needs --allow-deletions Count.
	Deletions Deletions
	files     map[string][]byte
}

// Files maps each removed file to nil (gitsource.Change's deletion).
func (p *EnvironmentDeletePlan) Files() map[string][]byte { return p.files }

// Subject is the subject line of the deletion's commit.
func (p *EnvironmentDeletePlan) Subject() string {
	return fmt.Sprintf("styrmin: env delete %s/%s (%d deployments)", p.Request.Cluster, p.Request.Environment, len(p.Deployments))
}

// Trailers are the Styrmin-Delete-Environment trailer of the commit.
func (p *EnvironmentDeletePlan) Trailers() []gitsource.Trailer {
	return []gitsource.Trailer{{Key: EnvironmentDeleteTrailer, Value: p.Request.Cluster + "/" + p.Request.Environment}}
}

// PlanEnvironmentDelete lists the files of an environment's folder to
// remove. An environment that does not exist is an error naming it. The
// last environment of a cluster may go too: an empty cluster is valid
// configuration, and the lock's deletion threshold is the guard against
// deleting more than meant.
func (w *Workspace) PlanEnvironmentDelete(req EnvironmentDeleteRequest) (*EnvironmentDeletePlan, error) {
	if w.fsys == nil {
		return nil, errors.New("env delete: the workspace has no files to remove")
	}
	e, err := w.upgradeEnvironment(UpgradeTarget{Cluster: req.Cluster, Environment: req.Environment})
	if err != nil {
		return nil, err
	}
	dir := path.Dir(e.File)
	plan := &EnvironmentDeletePlan{Request: req, Dir: dir, files: map[string][]byte{}}
	err = fs.WalkDir(w.fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			plan.files[p] = nil
		}
		return nil
	})
	if err != nil {
		return nil, &ConfigError{File: dir, Msg: err.Error()}
	}
	for _, d := range e.Deployments {
		if l := w.Locks[d.ID]; l == nil || !l.Tombstone() {
			plan.Deployments = append(plan.Deployments, d.ID)
		}
	}
	sort.Slice(plan.Deployments, func(i, j int) bool { return plan.Deployments[i].String() < plan.Deployments[j].String() })
	locked := 0
	for _, id := range plan.Deployments {
		if w.Locks[id] != nil {
			locked++
		}
	}
	plan.Deletions = DeletionRule(w.Repo.Settings, nil, 0, locked)
	// The repository must still load without the folder (a rollout order
	// naming the environment, say).
	if _, err := NewLoader(w.opts.MaxFileSize).WithSandbox(w.opts.ConfigSandbox).Load(newFolderOverlay(w.fsys, nil, dir)); err != nil {
		return nil, fmt.Errorf("env delete %s/%s refused, nothing removed: %w", req.Cluster, req.Environment, err)
	}
	return plan, nil
}

// EnvironmentCommit reports what CommitClone or CommitEnvironmentDelete
// committed.
type EnvironmentCommit struct {
	gitsource.CommitResult
	Clone  *ClonePlan             // set by CommitClone
	Delete *EnvironmentDeletePlan // set by CommitEnvironmentDelete
}

// CommitClone plans the clone on the head of the writer's branch (its
// commit is the one clonedFrom records) and commits its files in one
// commit, compare-and-swap like CommitUpgrade.
func CommitClone(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, req CloneRequest, co CommitOptions) (EnvironmentCommit, error) {
	var out EnvironmentCommit
	res, err := commitWorkspaceEdit(ctx, w, opts, co, func(ws *Workspace) (gitsource.Change, error) {
		plan, err := ws.PlanClone(req)
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Clone = plan
		return gitsource.Change{Files: plan.Files(), Subject: plan.Subject(), Trailers: plan.Trailers()}, nil
	})
	out.CommitResult = res
	return out, err
}

// CommitEnvironmentDelete removes the environment's folder in one commit
// on the head of the writer's branch.
func CommitEnvironmentDelete(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, req EnvironmentDeleteRequest, co CommitOptions) (EnvironmentCommit, error) {
	var out EnvironmentCommit
	res, err := commitWorkspaceEdit(ctx, w, opts, co, func(ws *Workspace) (gitsource.Change, error) {
		plan, err := ws.PlanEnvironmentDelete(req)
		if err != nil {
			return gitsource.Change{}, err
		}
		out.Delete = plan
		return gitsource.Change{Files: plan.Files(), Subject: plan.Subject(), Trailers: plan.Trailers()}, nil
	})
	out.CommitResult = res
	return out, err
}

// commitWorkspaceEdit commits the change edit computes on a workspace of
// the branch's head, planning again on every attempt.
func commitWorkspaceEdit(ctx context.Context, w gitsource.Writer, opts WorkspaceOptions, co CommitOptions, edit func(*Workspace) (gitsource.Change, error)) (gitsource.CommitResult, error) {
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
		return edit(ws)
	}
	return w.CommitLocks(ctx, co.request(build, nil))
}
