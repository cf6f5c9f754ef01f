package resolver

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/token"
	cueyaml "cuelang.org/go/encoding/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/cuemsg"
)

// DefaultMaxFileSize bounds every configuration file the loader reads.
const DefaultMaxFileSize = 1 << 20

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// MaxNameLen bounds the names of clusters, environments and deployments
// (folders and files): a task's name adds a sequence to a deployment's.
const MaxNameLen = 40

// IsName reports whether s may name a cluster, environment or deployment:
// a lowercase DNS label of at most MaxNameLen characters.
func IsName(s string) bool { return len(s) <= MaxNameLen && nameRE.MatchString(s) }

// upgradeTokenRE is what an upgrade request token may be (styrminctl
// upgrade writes "2026-12-01-1"): one short word, safe in lockfiles,
// plans and commit messages.
var upgradeTokenRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$`)

// Layer kinds, from the least to the most specific.
const (
	LayerCluster     = "cluster"
	LayerEnvironment = "environment"
	LayerDeployment  = "deployment"
)

// Repository is the loaded (not yet resolved) desired-state configuration.
type Repository struct {
	Settings RepoSettings
	Clusters []*Cluster // sorted by name
	// rollout is Settings.Rollout, checked.
	rollout *parsedRollout
}

// RepoSettings is styrmin.cue.
type RepoSettings struct {
	Drivers           []DriverSource `json:"drivers,omitempty"`
	DeletionThreshold *int           `json:"deletionThreshold,omitempty"`
	Limits            *DriverLimits  `json:"limits,omitempty"`
	// Rollout splits every cluster's fan-outs into health-gated waves.
	Rollout *RolloutSettings `json:"rollout,omitempty"`
}

// DriverLimits is the limits block of styrmin.cue: the bounds every
// driver of the repository is loaded and rendered under.
type DriverLimits struct {
	Timeout       string `json:"timeout,omitempty"`
	Memory        int64  `json:"memory,omitempty"`
	RenderedBytes int64  `json:"renderedBytes,omitempty"`
	ChartBytes    int64  `json:"chartBytes,omitempty"`
}

// DriverLimits returns the limits styrmin.cue sets (zero for those it
// leaves unset: the defaults, or a command's flags, apply).
func (s RepoSettings) DriverLimits() (drivers.Limits, error) {
	var l drivers.Limits
	if s.Limits == nil {
		return l, nil
	}
	if t := s.Limits.Timeout; t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return l, fmt.Errorf("styrmin.cue: limits.timeout: %q is not a positive duration (for example \"30s\")", t)
		}
		l.Timeout = d
	}
	l.Memory, l.RenderedBytes, l.ChartBytes = s.Limits.Memory, s.Limits.RenderedBytes, s.Limits.ChartBytes
	return l, nil
}

// DriverSource is a driver version kept in another git repository.
type DriverSource struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	URL     string `json:"url"`
	Ref     string `json:"ref"`
	Path    string `json:"path"`
}

// Cluster is one cluster layer and its environments.
type Cluster struct {
	Name         string
	File         string
	Settings     map[string]any
	Environments []*Environment // sorted by name
	// Policy is the cluster's default environment policy (nil: none).
	Policy *drivers.Policy
	// Ingress names the driver of the cluster's ingress controller (nil:
	// none): the resolver adds it as internal deployments (see
	// InternalIngress).
	Ingress *IngressSpec
	// Backups is the default backups block of the cluster's
	// environments (nil: none).
	Backups *Backups
	// DefaultIngressClass is cluster.cue's defaultIngressClass: the
	// cluster's default IngressClass, on which the host check takes an
	// Ingress naming no class ("": not said; classes compared as
	// written).
	DefaultIngressClass string
	// SharedDomain is cluster.cue's sharedDomain: the cluster serves its
	// domains with other clusters on purpose (SharedDomains).
	SharedDomain bool
	// pos locates the fields of File, for errors found after loading.
	pos map[string]token.Position
}

// Environment is one environment layer and its deployments.
type Environment struct {
	Name            string
	File            string
	NamespacePrefix string
	// Policy is the environment's own policy (nil: none); see
	// EffectivePolicy for the one its deployments get.
	Policy      *drivers.Policy
	Settings    map[string]any
	Deployments []*Deployment // sorted by name
	// Backups is the environment's own backups block (nil: none); see
	// EffectiveBackups for the settings that apply.
	Backups *Backups
	// ClonedFrom is what the environment is a clone of (nil: no clone).
	ClonedFrom *CloneSource
	pos        map[string]token.Position
	// rollout is the environment's own rollout block, checked (nil: the
	// repository's applies).
	rollout *parsedRollout
}

// Deployment is one deployment file.
type Deployment struct {
	ID            ID
	File          string
	Driver        string
	DriverVersion string // pinned; "" when not pinned
	// UpgradeRequest is the token of driver.upgrade ("" when unset): an
	// upgrade request the deployment's current lock has not recorded
	// re-selects the newest supporting driver version, once.
	UpgradeRequest string
	AppVersion     string
	Connects       []string
	// Hold, when set, keeps the deployment at its current lock.
	Hold     string
	Settings map[string]any
	pos      map[string]token.Position
}

// Loader parses configuration files against the repository schemas. It
// holds a CUE context, so it is not safe for concurrent use.
type Loader struct {
	ctx         *cue.Context
	schema      cue.Value
	maxFileSize int64
	// sandbox, when set, evaluates each file in a child first.
	sandbox *ConfigSandbox
	// forks are Loaders like this one that parse deployments on the
	// other cores.
	forks sync.Pool
	// memo is shared with the forks.
	memo *parseMemo
}

// WithSandbox makes l evaluate each file in a sandbox child before it
// evaluates it itself (see ConfigSandbox); nil: in-process only. It
// returns l.
func (l *Loader) WithSandbox(c *ConfigSandbox) *Loader {
	l.sandbox = c
	return l
}

// fork returns a Loader like l for another goroutine, reusing one when
// it can.
func (l *Loader) fork() *Loader {
	if f, ok := l.forks.Get().(*Loader); ok {
		return f
	}
	f := NewLoader(l.maxFileSize).WithSandbox(l.sandbox)
	f.memo = l.memo
	return f
}

// NewLoader compiles the schemas. maxFileSize <= 0 means DefaultMaxFileSize.
func NewLoader(maxFileSize int64) *Loader {
	if maxFileSize <= 0 {
		maxFileSize = DefaultMaxFileSize
	}
	ctx := cuecontext.New()
	schema := ctx.CompileString(schemaSource, cue.Filename("styrmin-schema.cue"))
	if schema.Err() != nil {
		// The schema is a constant of this package: a failure is a bug.
		panic(fmt.Sprintf("resolver schema: %v", schema.Err()))
	}
	return &Loader{ctx: ctx, schema: schema, maxFileSize: maxFileSize, memo: &parseMemo{}}
}

// LoadFile parses one file (CUE or YAML, by extension) and validates it
// against the definition def (#Cluster, #Environment, #Deployment, #Repo).
// It decodes into out.
func (l *Loader) LoadFile(fsys fs.FS, file, def string, out any) error {
	_, err := l.loadFile(fsys, file, def, out)
	return err
}

// loadFile is LoadFile that also returns where each field was written.
func (l *Loader) loadFile(fsys fs.FS, file, def string, out any) (map[string]token.Position, error) {
	data, err := readLimited(fsys, file, l.maxFileSize)
	if err != nil {
		return nil, err
	}
	return l.parse(file, data, def, out)
}

// parse checks one file against def. Every error names the file, the line
// and column the user wrote, and the field, worded from the schema (see
// explainer): CUE's own messages speak of its evaluator.
func (l *Loader) parse(file string, data []byte, def string, out any) (map[string]token.Position, error) {
	m, isMap := out.(*map[string]any)
	key := parseKey{def: def, ext: path.Ext(file)}
	if isMap {
		key.sum = sha256.Sum256(data)
		if v, pos, ok := l.memo.get(key, file); ok {
			*m = v
			return pos, nil
		}
	}
	if l.sandbox != nil {
		if err := l.sandbox.check(file, data, def); err != nil {
			return nil, err
		}
	}
	pos, err := l.eval(file, data, def, out)
	if err == nil && isMap && *m != nil {
		l.memo.put(key, *m, pos)
	}
	return pos, err
}

// eval is parse in this process.
func (l *Loader) eval(file string, data []byte, def string, out any) (map[string]token.Position, error) {
	var v cue.Value
	switch path.Ext(file) {
	case ".cue":
		v = l.ctx.CompileBytes(data, cue.Filename(file))
	case ".yaml", ".yml":
		f, err := cueyaml.Extract(file, data)
		if err != nil {
			return nil, fromYAML(file, data, err)
		}
		v = l.ctx.BuildFile(f)
	default:
		return nil, &ConfigError{File: file, Msg: "expected a .cue or .yaml file"}
	}
	if err := v.Err(); err != nil {
		return nil, (&explainer{file: file, raw: v}).explain(err)
	}
	if k := v.IncompleteKind(); k != cue.StructKind && k != cue.TopKind {
		ce := &ConfigError{File: file, Line: 1, Column: 1, Msg: fmt.Sprintf("expected a struct at the top level, got %s", cuemsg.Kind(k))}
		if p := v.Pos(); p.IsValid() {
			ce.at(p.Position())
		}
		return nil, ce
	}
	schema := l.schema.LookupPath(cue.ParsePath(def))
	x := &explainer{file: file, raw: v, schema: schema, scope: l.schema}
	u := schema.Unify(v)
	if err := u.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return nil, x.explain(err)
	}
	if err := u.Decode(out); err != nil {
		return nil, x.explain(err)
	}
	return positions(file, v), nil
}

// readLimited reads a regular file, refusing symlinks (they could escape
// the repository) and files over the limit.
func readLimited(fsys fs.FS, file string, limit int64) ([]byte, error) {
	if !fs.ValidPath(file) {
		return nil, &ConfigError{File: file, Msg: "path escapes the repository"}
	}
	fi, err := lstat(fsys, file)
	if err != nil {
		return nil, unreadable(file, err)
	}
	return readLimitedInfo(fsys, file, limit, fi)
}

// readLimitedInfo is readLimited of a file whose lstat is fi.
func readLimitedInfo(fsys fs.FS, file string, limit int64, fi fs.FileInfo) ([]byte, error) {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, &ConfigError{File: file, Msg: "is a symbolic link; configuration files must be regular files inside the repository"}
	}
	if !fi.Mode().IsRegular() {
		return nil, &ConfigError{File: file, Msg: "not a regular file"}
	}
	if up, ok := fsys.(gitsource.ReadFileUpToFS); ok {
		// Sized as it is read, not described first.
		data, size, err := up.ReadFileUpTo(file, limit)
		if err != nil {
			return nil, unreadable(file, err)
		}
		if data == nil && size > limit {
			return nil, &ConfigError{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d allowed", size, limit)}
		}
		return data, nil
	}
	if fi.Size() > limit {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d allowed", fi.Size(), limit)}
	}
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, unreadable(file, err)
	}
	if int64(len(data)) > limit {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d allowed", len(data), limit)}
	}
	return data, nil
}

// ErrUnreadable is wrapped by the error of a file that could not be read
// (the storage failed: a missing object in a clone, too many open files),
// as opposed to one whose content was refused: reading it again may work.
var ErrUnreadable = errors.New("could not be read")

// unreadable is the ConfigError of a file whose read failed with err. A
// missing file is only that, as it always was: no storage failed.
func unreadable(file string, err error) *ConfigError {
	if errors.Is(err, fs.ErrNotExist) {
		return &ConfigError{File: file, Msg: err.Error()}
	}
	return &ConfigError{File: file, Msg: err.Error(), Err: fmt.Errorf("%w: %w", ErrUnreadable, err)}
}

// lstat reports a symlink as a symlink where the file system can tell:
// directory listings carry the type even when Stat follows links.
func lstat(fsys fs.FS, file string) (fs.FileInfo, error) {
	// Reading the folder for every file of it is quadratic (a folder of
	// lockfiles holds hundreds): a tree that can lstat is asked directly,
	// the folder read only for the error of a file it cannot describe.
	if rl, ok := fsys.(fs.ReadLinkFS); ok {
		if fi, err := rl.Lstat(file); err == nil {
			return fi, nil
		}
	}
	entries, err := fs.ReadDir(fsys, path.Dir(file))
	if err != nil {
		return nil, err
	}
	base := path.Base(file)
	for _, e := range entries {
		if e.Name() == base {
			return e.Info()
		}
	}
	return nil, fs.ErrNotExist
}

// unreadDeploymentEntry refuses what, in a deployments folder, looks like
// a deployment the loader would not read: a folder, or a file whose
// extension is a configuration format's but not one it reads (web.json,
// web.CUE, web.Yaml). Skipped silently, such a file would make the lock
// delete the deployment it held, or never create it. Hidden entries and
// those starting with "_" (.gitkeep, _templates/) and other files
// (README.md, web.cue.bak) are left alone: nil.
func unreadDeploymentEntry(dir string, ent fs.DirEntry) error {
	name := ent.Name()
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return nil
	}
	file := path.Join(dir, name)
	if ent.IsDir() {
		return &ConfigError{File: file, Msg: "a folder inside deployments/ is not read: each deployment is a file directly in deployments/ (NAME.cue or NAME.yaml); move its files up, or name the folder with a leading _ to keep it unread"}
	}
	switch ext := path.Ext(name); strings.ToLower(ext) {
	case ".cue", ".yaml", ".yml":
		return &ConfigError{File: file, Msg: fmt.Sprintf("extension %q is not read: a deployment file ends in .cue, .yaml or .yml, in lowercase (a file that is no deployment, name it with a leading _ to keep it unread)", ext)}
	case ".json":
		return &ConfigError{File: file, Msg: "extension \".json\" is not read: a deployment file ends in .cue, .yaml or .yml (JSON is valid YAML: rename it NAME.yaml; a file that is no deployment, name it with a leading _ to keep it unread)"}
	}
	return nil
}

// errConfigFileMissing is the error (inside the ConfigError configFile
// returns) of a layer with none of its files. It is the one error a caller
// of an optional layer (styrmin.cue) may ignore: any other, a duplicate
// above all, must stop the load, or the layer's settings would silently
// vanish. A private sentinel rather than fs.ErrNotExist, so callers that
// read fs.ErrNotExist as "the clone lost a file, try again" keep telling a
// missing cluster.cue, which is the repository's mistake, from that.
var errConfigFileMissing = errors.New("config file missing")

// configFile finds dir/base.cue or dir/base.yaml; both at once is an error.
// None at all is a ConfigError wrapping errConfigFileMissing.
func configFile(fsys fs.FS, dir, base string) (string, error) {
	var found []string
	for _, ext := range []string{".cue", ".yaml", ".yml"} {
		p := path.Join(dir, base+ext)
		if _, err := fs.Stat(fsys, p); err == nil {
			found = append(found, p)
		} else if _, err := lstat(fsys, p); err == nil {
			found = append(found, p) // a dangling or escaping symlink: readLimited refuses it
		}
	}
	switch len(found) {
	case 0:
		return "", &ConfigError{File: path.Join(dir, base+".cue"), Msg: "missing (expected " + base + ".cue or " + base + ".yaml)", Err: errConfigFileMissing}
	case 1:
		return found[0], nil
	default:
		return "", &ConfigError{File: found[1], Msg: fmt.Sprintf("duplicate of %s: keep one file per %s", found[0], base)}
	}
}

// ErrSymlinkedFolder is the error (inside a ConfigError naming the path) of
// a symbolic link where the loader reads a folder.
var ErrSymlinkedFolder = errors.New("is a symbolic link; symbolic links are refused: the repository's folders must be real folders inside it")

// refuseSymlinkedFolder refuses dir when it is a symbolic link. A folder
// listing reports a link as no folder, so a linked cluster or environment
// would silently vanish (and the lock tombstone its deployments), while
// reading through one would read, or write, outside the repository. A
// missing dir is for the caller to handle.
func refuseSymlinkedFolder(fsys fs.FS, dir string) error {
	fi, err := lstat(fsys, dir)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return symlinkedFolder(dir)
	}
	return nil
}

func symlinkedFolder(dir string) error {
	return &ConfigError{File: dir, Msg: ErrSymlinkedFolder.Error(), Err: ErrSymlinkedFolder}
}

// subdirs lists the directories under dir, sorted; a missing dir is empty.
// dir or a folder in it that is a symbolic link is an error.
func subdirs(fsys fs.FS, dir string) ([]string, error) {
	if err := refuseSymlinkedFolder(fsys, dir); err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &ConfigError{File: dir, Msg: err.Error(), Err: err}
	}
	var out []string
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			// Only folders are listed here; a linked file is no layer
			// either, and is refused the same way rather than ignored.
			return nil, symlinkedFolder(path.Join(dir, e.Name()))
		}
		if e.IsDir() {
			if !nameRE.MatchString(e.Name()) || len(e.Name()) > MaxNameLen {
				return nil, &ConfigError{File: path.Join(dir, e.Name()), Msg: "folder name must be a lowercase DNS label of at most 40 characters"}
			}
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// LoadSettings reads the repository settings (styrmin.cue or
// styrmin.yaml) alone; a repository without the file has none. What a
// command needs before the rest loads (the driver limits) reads them here.
func (l *Loader) LoadSettings(fsys fs.FS) (RepoSettings, error) {
	var s RepoSettings
	f, err := findSettingsFile(fsys)
	if err != nil || f == "" {
		return s, err
	}
	err = l.LoadFile(fsys, f, "#Repo", &s)
	return s, err
}

// findSettingsFile finds the repository settings file (styrmin.cue or
// styrmin.yaml): "" when there is none, which is no error (the settings
// are optional). Both at once is a ConfigError: reading neither would
// silently drop every setting (rollout waves, deletion threshold, driver
// limits and sources) where the user wrote some.
func findSettingsFile(fsys fs.FS) (string, error) {
	f, err := configFile(fsys, ".", "styrmin")
	if errors.Is(err, errConfigFileMissing) {
		return "", nil
	}
	return f, err
}

// DriverLimits reads the driver limits of styrmin.cue alone (LoadSettings,
// then RepoSettings.DriverLimits): what a caller needs that loads the
// drivers while it reads the rest of the repository.
func (l *Loader) DriverLimits(fsys fs.FS) (drivers.Limits, error) {
	s, err := l.LoadSettings(fsys)
	if err != nil {
		return drivers.Limits{}, err
	}
	return s.DriverLimits()
}

// Load reads the whole desired-state configuration of a repository.
func (l *Loader) Load(fsys fs.FS) (*Repository, error) {
	repo := &Repository{}
	settingsFile, err := findSettingsFile(fsys)
	if err != nil {
		return nil, err
	}
	if settingsFile != "" {
		if err := l.LoadFile(fsys, settingsFile, "#Repo", &repo.Settings); err != nil {
			return nil, err
		}
	}
	clusters, err := subdirs(fsys, "clusters")
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, cn := range clusters {
		c, err := l.loadCluster(fsys, cn)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		repo.Clusters = append(repo.Clusters, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Whether environments of two clusters share a backupLocation is not
	// checked here but by plan and lock (CheckSharedBackupLocations): the
	// agent loads the repository too, to reveal sensitive values, and a
	// repository locked before that check would stall every deployment
	// with one.
	envs := map[string]bool{}
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			envs[e.Name] = true
		}
	}
	if repo.rollout, err = checkRollout(settingsFile, repo.Settings.Rollout, envs); err != nil {
		return nil, err
	}
	return repo, nil
}

func (l *Loader) loadCluster(fsys fs.FS, name string) (*Cluster, error) {
	c, err := l.loadClusterFile(fsys, name)
	if err != nil {
		return nil, err
	}
	envs, err := subdirs(fsys, path.Join("clusters", name, "environments"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, en := range envs {
		e, err := l.loadEnvironment(fsys, c, en)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.Environments = append(c.Environments, e)
	}
	return c, errors.Join(errs...)
}

// loadClusterFile reads cluster.cue alone (BackupSettings needs no more).
func (l *Loader) loadClusterFile(fsys fs.FS, name string) (*Cluster, error) {
	dir := path.Join("clusters", name)
	f, err := configFile(fsys, dir, "cluster")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, File: f}
	if c.pos, err = l.loadFile(fsys, f, "#Cluster", &c.Settings); err != nil {
		return nil, err
	}
	if c.Policy, err = takePolicy(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	if c.Ingress, err = takeIngress(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	if c.DefaultIngressClass, err = takeDefaultIngressClass(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	// No driver sees it: taken out, so setting it redeploys nothing.
	c.SharedDomain, _ = c.Settings["sharedDomain"].(bool)
	delete(c.Settings, "sharedDomain")
	if err := checkDomain(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	if err := checkBackupLocation(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	if c.Backups, err = takeBackups(f, c.Settings, c.pos); err != nil {
		return nil, err
	}
	return c, nil
}

func (l *Loader) loadEnvironment(fsys fs.FS, c *Cluster, name string) (*Environment, error) {
	e, err := l.loadEnvironmentFile(fsys, c, name)
	if err != nil {
		return nil, err
	}
	cluster := c.Name
	dir := path.Dir(e.File)
	ddir := path.Join(dir, "deployments")
	if err := refuseSymlinkedFolder(fsys, ddir); err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(fsys, ddir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, &ConfigError{File: ddir, Msg: err.Error()}
	}
	seen := map[string]string{}
	var errs []error
	type job struct {
		file string
		id   ID
	}
	var jobs []job
	for _, ent := range entries {
		ext := path.Ext(ent.Name())
		if ext != ".cue" && ext != ".yaml" && ext != ".yml" {
			if err := unreadDeploymentEntry(ddir, ent); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		file := path.Join(ddir, ent.Name())
		dn := strings.TrimSuffix(ent.Name(), ext)
		if !nameRE.MatchString(dn) || len(dn) > MaxNameLen {
			errs = append(errs, &ConfigError{File: file, Msg: "deployment name (the file name) must be a lowercase DNS label of at most 40 characters"})
			continue
		}
		if prev, dup := seen[dn]; dup {
			errs = append(errs, &ConfigError{File: file, Msg: fmt.Sprintf("deployment %q is already defined by %s", dn, prev)})
			continue
		}
		seen[dn] = file
		jobs = append(jobs, job{file: file, id: ID{Cluster: cluster, Environment: name, Name: dn}})
	}
	// Parsed on every core (CUE evaluation is most of a load), each
	// worker with its own Loader: a CUE context is not for concurrent use.
	type result struct {
		d   *Deployment
		err error
	}
	results := make([]result, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wl := l
		if w > 0 {
			wl = l.fork()
		}
		wg.Go(func() {
			if wl != l {
				defer l.forks.Put(wl)
			}
			for i := int(next.Add(1)) - 1; i < len(jobs); i = int(next.Add(1)) - 1 {
				results[i].d, results[i].err = wl.loadDeployment(fsys, jobs[i].file, jobs[i].id)
			}
		})
	}
	wg.Wait()
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		e.Deployments = append(e.Deployments, r.d)
	}
	sort.Slice(e.Deployments, func(i, j int) bool { return e.Deployments[i].ID.Name < e.Deployments[j].ID.Name })
	return e, errors.Join(errs...)
}

// loadEnvironmentFile reads environment.cue alone: its settings, policy,
// rollout, backups and clone source, checked against its cluster's.
func (l *Loader) loadEnvironmentFile(fsys fs.FS, c *Cluster, name string) (*Environment, error) {
	dir := path.Join("clusters", c.Name, "environments", name)
	f, err := configFile(fsys, dir, "environment")
	if err != nil {
		return nil, err
	}
	e := &Environment{Name: name, File: f, NamespacePrefix: name}
	if e.pos, err = l.loadFile(fsys, f, "#Environment", &e.Settings); err != nil {
		return nil, err
	}
	if p, ok := e.Settings["namespacePrefix"].(string); ok {
		e.NamespacePrefix = p
		delete(e.Settings, "namespacePrefix")
	}
	if e.Policy, err = takePolicy(f, e.Settings, e.pos); err != nil {
		return nil, err
	}
	if e.rollout, err = takeRollout(f, e.Settings, nil, e.pos); err != nil {
		return nil, err
	}
	if err := checkDomain(f, e.Settings, e.pos); err != nil {
		return nil, err
	}
	if err := checkBackupLocation(f, e.Settings, e.pos); err != nil {
		return nil, err
	}
	if e.Backups, err = takeBackups(f, e.Settings, e.pos); err != nil {
		return nil, err
	}
	if e.ClonedFrom, err = takeClonedFrom(f, e.Settings, e.pos); err != nil {
		return nil, err
	}
	if err := checkBackupsNeedLocation(c, e); err != nil {
		return nil, err
	}
	return e, nil
}

// takePolicy moves the policy out of a layer's settings: it is no setting
// that merges into deployments (they cannot override it), and drivers see
// it only as context.environment.policy.
func takePolicy(file string, settings map[string]any, pos map[string]token.Position) (*drivers.Policy, error) {
	return takeBlock[drivers.Policy](file, settings, "policy", pos)
}

// takeBlock moves the block field out of a layer's settings into a T
// (nil when absent): a block that is no setting drivers see. It is read
// through JSON, so a number JSON cannot carry as it is (unheldNumber) is
// an error at its field (pos), not another value.
func takeBlock[T any](file string, settings map[string]any, field string, pos map[string]token.Position) (*T, error) {
	raw, ok := settings[field]
	if !ok {
		return nil, nil
	}
	if at, unheld := unheldNumber(raw, field); unheld {
		return nil, placed(&ConfigError{File: file, Field: at, Msg: unreadableNumber}, pos)
	}
	delete(settings, field)
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, &ConfigError{File: file, Field: field, Msg: err.Error()}
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, &ConfigError{File: file, Field: field, Msg: err.Error()}
	}
	return &v, nil
}

// IngressSpec is cluster.cue's ingress: the driver of the cluster's
// ingress controller and what it is given. Only these settings reach the
// internal deployments it becomes.
type IngressSpec struct {
	Driver     string         `json:"driver"`
	Version    string         `json:"version,omitempty"`
	AppVersion string         `json:"appVersion,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

// DeclaredInstancePolicy is DeclaredPolicy for in, and for an internal
// instance it also checks that the configuration in fsys calls for it as
// the lockfile records it: an ingress controller the cluster declares (the
// shared one, or an environment's with dedicatedIngress), in the namespace
// and of the driver the configuration gives it. An ingress controller is
// applied as the agent, with every namespaced kind: a lockfile edited by
// hand must not give that to another deployment, namespace or chart.
func (l *Loader) DeclaredInstancePolicy(fsys fs.FS, in *Instance) (*drivers.Policy, error) {
	if in.Internal != InternalIngress {
		d, err := l.DeclaredEnvironment(fsys, in.ID)
		if err != nil {
			return nil, err
		}
		if err := d.CheckPlacement(in); err != nil {
			return nil, err
		}
		return d.Policy, nil
	}
	c, err := l.loadClusterFile(fsys, in.ID.Cluster)
	if err != nil {
		return nil, err
	}
	ic, err := l.declaredIngress(fsys, c, in.ID)
	if err != nil {
		return nil, err
	}
	if in.Context == nil || in.Context.Deployment.Namespace != ic.namespace {
		got := ""
		if in.Context != nil {
			got = in.Context.Deployment.Namespace
		}
		return nil, &ConfigError{File: c.File, Field: "ingress", Msg: fmt.Sprintf("a lockfile records ingress controller %s in namespace %q; the configuration runs it in %q", in.ID, got, ic.namespace)}
	}
	if in.Driver.Name != c.Ingress.Driver {
		return nil, &ConfigError{File: c.File, Field: "ingress.driver", Msg: fmt.Sprintf("a lockfile records ingress controller %s with driver %q; the configuration declares %q", in.ID, in.Driver.Name, c.Ingress.Driver)}
	}
	return ingressPolicy(), nil
}

// UndeclaredError is an instance whose lockfile records what the
// configuration does not give it (CheckIngressInstance): it was not
// written by a lock of that configuration.
type UndeclaredError struct {
	*ConfigError
}

func (e *UndeclaredError) Unwrap() error { return e.ConfigError }

// CheckIngressInstance returns an *UndeclaredError when in, an ingress
// controller's instance, is not what the configuration in fsys resolves it
// to with drv, the driver version in records (the agent loads it): its
// context, parameters, app version and values as a lock of that
// configuration writes them. An ingress controller applies as the agent,
// with every namespaced kind, so values a lockfile written by hand chose
// (an image, a container more) must not reach the cluster. A
// configuration that does not resolve it is a ConfigError.
func (l *Loader) CheckIngressInstance(fsys fs.FS, in *Instance, drv *drivers.Driver) error {
	c, err := l.loadClusterFile(fsys, in.ID.Cluster)
	if err != nil {
		return err
	}
	ic, err := l.declaredIngress(fsys, c, in.ID)
	if err != nil {
		return err
	}
	ic.class = str(c.Settings["ingressClass"])
	if ic.env != nil {
		ic.class = DedicatedIngressClass(ic.env.Name, environmentClass(c, ic.env))
	}
	cat := drivers.NewCatalog()
	if err := cat.Add(drv); err != nil {
		return err
	}
	r, err := resolveIngress(ic, Options{Catalog: cat, Locks: map[ID]*Instance{in.ID: in}, SourceCommit: in.SourceCommit})
	if err != nil {
		return err
	}
	want := *r.Instance
	want.Driver.Source = in.Driver.Source // the driver loaded is the one recorded
	wantDigest, err := want.ComputeDigest()
	if err != nil {
		return err
	}
	gotDigest, err := in.ComputeDigest()
	if err != nil {
		return err
	}
	if wantDigest == gotDigest {
		return nil
	}
	what := "its values"
	switch {
	case want.Driver.Name != in.Driver.Name || want.Driver.Version != in.Driver.Version || want.Driver.Digest != in.Driver.Digest:
		what = "its driver"
	case want.AppVersion != in.AppVersion:
		what = fmt.Sprintf("app version %q (the configuration gives %q)", in.AppVersion, want.AppVersion)
	case !reflect.DeepEqual(canonicalJSON(want.Context), canonicalJSON(in.Context)):
		what = "its context (parameters, class, names)"
	}
	return &UndeclaredError{&ConfigError{File: c.File, Field: "ingress", Msg: fmt.Sprintf(
		"a lockfile records ingress controller %s with %s other than the configuration and driver %s@%s give it: the lockfile was not written by a lock of this configuration", in.ID, what, drv.Name, drv.Version)}}
}

// canonicalJSON is v as JSON decodes it (numbers as float64), for
// comparing what two instances record.
func canonicalJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// declaredIngress is the ingress controller of id that c's configuration
// calls for (its environment's file read for a dedicated one), or a
// ConfigError saying that it calls for none.
func (l *Loader) declaredIngress(fsys fs.FS, c *Cluster, id ID) (ingressController, error) {
	if c.Ingress == nil {
		return ingressController{}, &ConfigError{File: c.File, Field: "ingress", Msg: "missing: a lockfile records an ingress controller of this cluster, which declares none"}
	}
	switch {
	case id.Name != IngressName:
	case id.Environment == ClusterEnvironment:
		return ingressController{id: id, cluster: c, namespace: sharedIngressPrefix + ingressSuffix}, nil
	default:
		e, err := l.loadEnvironmentFile(fsys, c, id.Environment)
		if err != nil {
			return ingressController{}, err
		}
		if DedicatedIngress(c, e) {
			return ingressController{id: id, cluster: c, env: e, namespace: e.NamespacePrefix + envIngressSuffix}, nil
		}
	}
	return ingressController{}, &ConfigError{File: c.File, Field: "ingress", Msg: fmt.Sprintf(
		"a lockfile records %s as an ingress controller, which this configuration does not call for: its controllers are %s and %s/ENVIRONMENT/%s for each environment with dedicatedIngress: true",
		id, SharedIngressID(c.Name), c.Name, IngressName)}
}

// takeIngress moves ingress: out of the cluster's settings: it is read by
// the internal deployments alone, so no application sees it (or
// redeploys when it changes).
func takeIngress(file string, settings map[string]any, pos map[string]token.Position) (*IngressSpec, error) {
	return takeBlock[IngressSpec](file, settings, "ingress", pos)
}

// takeDefaultIngressClass moves defaultIngressClass out of cluster.cue's
// settings (no driver sees it, so setting it redeploys nothing) and
// checks it is an IngressClass name.
func takeDefaultIngressClass(file string, settings map[string]any, pos map[string]token.Position) (string, error) {
	raw, ok := settings["defaultIngressClass"]
	if !ok {
		return "", nil
	}
	delete(settings, "defaultIngressClass")
	class, _ := raw.(string)
	if len(class) > 253 || !classRE.MatchString(class) {
		return "", placed(&ConfigError{File: file, Field: "defaultIngressClass", Msg: fmt.Sprintf(
			"%q is no IngressClass name: expected the name of the cluster's default IngressClass (the one annotated ingressclass.kubernetes.io/is-default-class: \"true\"), a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253); remove the field when the cluster has no default class", class)}, pos)
	}
	return class, nil
}

// EffectivePolicy is the policy of the environment's deployments: the
// cluster's default with each field the environment sets replacing it
// (nil: the default policy).
func EffectivePolicy(c *Cluster, e *Environment) *drivers.Policy {
	var p drivers.Policy
	if c != nil && c.Policy != nil {
		p = *c.Policy
	}
	if e != nil && e.Policy != nil {
		if e.Policy.Namespaces != nil {
			p.Namespaces = e.Policy.Namespaces
		}
		if e.Policy.Kinds != nil {
			p.Kinds = e.Policy.Kinds
		}
		if e.Policy.ServiceAccountName != "" {
			p.ServiceAccountName = e.Policy.ServiceAccountName
		}
	}
	if p.IsZero() {
		return nil
	}
	p.Namespaces = slices.Clone(p.Namespaces)
	p.Kinds = slices.Clone(p.Kinds)
	return &p
}

func (l *Loader) loadDeployment(fsys fs.FS, file string, id ID) (*Deployment, error) {
	data, err := readLimited(fsys, file, l.maxFileSize)
	if err != nil {
		return nil, err
	}
	return l.parseDeployment(file, data, id)
}

// parseDeployment parses the content of a deployment file (an upgrade
// checks its edits with it before writing them).
func (l *Loader) parseDeployment(file string, data []byte, id ID) (*Deployment, error) {
	if int64(len(data)) > l.maxFileSize {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d allowed", len(data), l.maxFileSize)}
	}
	var raw map[string]any
	pos, err := l.parse(file, data, "#Deployment", &raw)
	if err != nil {
		return nil, err
	}
	d := &Deployment{ID: id, File: file, Settings: raw, pos: pos}
	if err := checkDomain(file, raw, pos); err != nil {
		return nil, err
	}
	if _, set := raw["dedicatedIngress"]; set {
		return nil, d.errorAt("dedicatedIngress", "is a cluster setting (cluster.cue), which an environment may opt in or out of (environment.cue): a deployment cannot choose its environment's ingress controller; remove the field", nil)
	}
	for _, f := range []string{"backupLocation", "backups"} {
		if _, set := raw[f]; set {
			// An environment is backed up, restored and cloned as a
			// whole: one deployment elsewhere would be left behind.
			return nil, d.errorAt(f, f+" is an environment setting (environment.cue, or cluster.cue for every environment): an environment's deployments are backed up and restored together; remove the field", nil)
		}
	}
	switch drv := raw["driver"].(type) {
	case string:
		d.Driver = drv
	case map[string]any:
		d.Driver, _ = drv["name"].(string)
		d.DriverVersion, _ = drv["version"].(string)
		switch u := drv["upgrade"].(type) {
		case bool:
			// A standing flag would move the deployment at every later
			// lock, an unrelated fan-out included: upgrades are
			// operations now, so the old form is refused, not guessed at.
			return nil, &ConfigError{File: file, Field: "driver.upgrade", Msg: fmt.Sprintf("expected an upgrade request token, got the boolean %t: an upgrade is an operation, not a standing flag; run `styrminctl upgrade %s` (it writes a new token, for example upgrade: \"2026-12-01-1\"), or remove the field", u, id)}
		case string:
			if !upgradeTokenRE.MatchString(u) {
				return nil, &ConfigError{File: file, Field: "driver.upgrade", Msg: fmt.Sprintf("upgrade request %q: expected a token of letters, digits and . _ : + - (at most 64, starting with a letter or digit), for example \"2026-12-01-1\"", u)}
			}
			d.UpgradeRequest = u
		}
	}
	d.AppVersion, _ = raw["appVersion"].(string)
	if cs, ok := raw["connects"].([]any); ok {
		for _, c := range cs {
			s, _ := c.(string)
			d.Connects = append(d.Connects, s)
		}
	}
	d.Hold, _ = raw["hold"].(string)
	for _, k := range []string{"driver", "appVersion", "connects", "hold"} {
		delete(raw, k)
	}
	return d, nil
}

// DeclaredPolicy is the policy the configuration in fsys gives an
// instance of deployment id, internal being the instance's Internal: the
// cluster's and environment's (EffectivePolicy), or an ingress
// controller's when the cluster declares one. It is what the instance's
// lockfile must record: the agent, which enforces the recorded policy,
// compares the two at the lock commit, so a lockfile edited by hand
// cannot loosen what the configuration allows. It reads those two files
// alone.
func (l *Loader) DeclaredPolicy(fsys fs.FS, id ID, internal string) (*drivers.Policy, error) {
	if internal == InternalIngress {
		c, err := l.loadClusterFile(fsys, id.Cluster)
		if err != nil {
			return nil, err
		}
		if _, err := l.declaredIngress(fsys, c, id); err != nil {
			return nil, err
		}
		return ingressPolicy(), nil
	}
	d, err := l.DeclaredEnvironment(fsys, id)
	if err != nil {
		return nil, err
	}
	return d.Policy, nil
}

// Declared is what the configuration gives the application instances of
// one environment, which their lockfiles must record: the policy, and
// the namespace each runs in. The agent enforces what a lockfile records
// and creates the namespace it names, so a lockfile written by hand (a
// valid checksum is no proof of a lock) must not place a deployment in a
// namespace the configuration does not give it (another tenant's, an
// operator's): that namespace would become the deployment's own.
type Declared struct {
	// Policy is the cluster's and environment's (EffectivePolicy).
	Policy *drivers.Policy
	// NamespacePrefix is the environment's.
	NamespacePrefix string
	// File is the environment's file, named in errors.
	File string
}

// DeclaredEnvironment is what the configuration in fsys declares for the
// application deployments of id's environment. It reads the cluster and
// environment files alone.
func (l *Loader) DeclaredEnvironment(fsys fs.FS, id ID) (*Declared, error) {
	c, err := l.loadClusterFile(fsys, id.Cluster)
	if err != nil {
		return nil, err
	}
	e, err := l.loadEnvironmentFile(fsys, c, id.Environment)
	if err != nil {
		return nil, err
	}
	return &Declared{Policy: EffectivePolicy(c, e), NamespacePrefix: e.NamespacePrefix, File: e.File}, nil
}

// CheckPlacement returns a ConfigError when in, an application instance
// of d's environment, records another namespace or name than the
// configuration gives its deployment.
func (d *Declared) CheckPlacement(in *Instance) error {
	if in.Context == nil {
		return nil // a tombstone: it places nothing
	}
	want := deploymentNamespace(d.NamespacePrefix, in.ID)
	if got := in.Context.Deployment.Namespace; got != want {
		return &ConfigError{File: d.File, Field: "namespacePrefix", Msg: fmt.Sprintf(
			"a lockfile records deployment %s in namespace %q; the configuration runs it in %q (the environment's namespace prefix and the deployment's name): the lockfile was not written by a lock of this configuration", in.ID, got, want)}
	}
	if got := in.Context.Deployment.Name; got != in.ID.Name {
		return &ConfigError{File: d.File, Field: "deployments", Msg: fmt.Sprintf(
			"a lockfile of deployment %s records the release name %q: the lockfile was not written by a lock of this configuration", in.ID, got)}
	}
	return nil
}
