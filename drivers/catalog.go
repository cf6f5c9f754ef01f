package drivers

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
)

// Catalog holds loaded driver versions by name and version.
type Catalog struct {
	byName map[string][]*Driver // ascending semver
	// broken are the versions a keep-going load could not load
	// (LoadCatalogKeepGoing), by name then version.
	broken map[string]map[string]error
}

// NewCatalog returns an empty catalog.
func NewCatalog() *Catalog {
	return &Catalog{byName: map[string][]*Driver{}}
}

// BrokenDriverError is a driver version folder that does not load, met by
// a selection it could have changed: one that selects it by pin, or would
// have if it loaded (it is above every loaded version the application
// version fits, and may fit it too). Err says why it does not load.
type BrokenDriverError struct {
	Name, Version string
	Err           error
}

func (e *BrokenDriverError) Error() string {
	return fmt.Sprintf("driver %s@%s does not load, so the version this deployment runs cannot be chosen: %v", e.Name, e.Version, e.Err)
}

func (e *BrokenDriverError) Unwrap() error { return e.Err }

// Broken lists the driver versions a keep-going load could not load,
// sorted by name and version, each with why.
func (c *Catalog) Broken() []*BrokenDriverError {
	var out []*BrokenDriverError
	for name, versions := range c.broken {
		for v, err := range versions {
			out = append(out, &BrokenDriverError{Name: name, Version: v, Err: err})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out
}

// BrokenVersion is the *BrokenDriverError of name@version when a
// keep-going load could not load it and no source added it since; nil
// otherwise.
func (c *Catalog) BrokenVersion(name, version string) error {
	if err, ok := c.broken[name][version]; ok {
		return &BrokenDriverError{Name: name, Version: version, Err: err}
	}
	return nil
}

// BrokenAbove is the *BrokenDriverError of the highest version of name
// above version (any, when version is ""; a folder that is no semantic
// version counts as above every version) that a keep-going load could
// not load: one a rule picking the newest might have picked; nil when
// there is none. The same whatever the map's order.
func (c *Catalog) BrokenAbove(name, version string) error {
	v, _ := semver.StrictNewVersion(version) // nil for "": any
	var best *BrokenDriverError
	var bestV *semver.Version
	for bv := range c.broken[name] {
		bsv, err := semver.StrictNewVersion(bv)
		if err != nil {
			bsv = nil
		}
		if bsv != nil && v != nil && !bsv.GreaterThan(v) {
			continue
		}
		if best == nil || versionAbove(bsv, bv, bestV, best.Version) {
			best, bestV = &BrokenDriverError{Name: name, Version: bv, Err: c.broken[name][bv]}, bsv
		}
	}
	if best == nil {
		return nil
	}
	return best
}

// versionAbove orders folder versions: a (named as) above b (named bs); a
// nil version (no semantic version) is above the others, and the names
// decide between equals.
func versionAbove(a *semver.Version, as string, b *semver.Version, bs string) bool {
	switch {
	case a == nil && b == nil:
		return as > bs
	case a == nil || b == nil:
		return a == nil
	case a.Equal(b):
		return as > bs
	}
	return a.GreaterThan(b)
}

// DuplicateError reports a driver version added twice with different
// content.
type DuplicateError struct {
	Name, Version   string
	Existing, Added string // sources
	ExistingDigest  string
	AddedDigest     string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("driver %s@%s from %s differs from the one already loaded from %s (digest %s, was %s)",
		e.Name, e.Version, e.Added, e.Existing, e.AddedDigest, e.ExistingDigest)
}

// Add adds a driver version. Adding the same name@version again is a no-op
// when the digests match and a *DuplicateError otherwise.
func (c *Catalog) Add(d *Driver) error {
	if d == nil {
		return errors.New("drivers: nil driver")
	}
	v, err := semver.StrictNewVersion(d.Version)
	if err != nil {
		return fmt.Errorf("%s: version %q is not a semantic version: %w", d.Source, d.Version, err)
	}
	list := c.byName[d.Name]
	for _, have := range list {
		if have.Version == d.Version {
			if have.Digest == d.Digest {
				return nil
			}
			return &DuplicateError{Name: d.Name, Version: d.Version, Existing: have.Source, Added: d.Source,
				ExistingDigest: have.Digest, AddedDigest: d.Digest}
		}
	}
	i := sort.Search(len(list), func(i int) bool {
		return semver.MustParse(list[i].Version).GreaterThan(v)
	})
	c.byName[d.Name] = slices.Insert(list, i, d)
	delete(c.broken[d.Name], d.Version) // loaded from another source
	return nil
}

// Folder is a driver version folder of a catalog: dir/<Name>/<Version>/.
type Folder struct{ Name, Version string }

// Folders lists the driver version folders under dir of fsys, in
// directory order, reading no file: what LoadCatalog loads, and cheap
// enough for shell completion. A missing dir has none.
func Folders(fsys fs.FS, dir string) ([]Folder, error) {
	if fi, err := fs.Lstat(fsys, dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, symlinkedFolder(dir)
	}
	names, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("drivers: reading %s: %w", dir, err)
	}
	var out []Folder
	for _, n := range names {
		if strings.HasPrefix(n.Name(), ".") {
			continue
		}
		// A listing reports a link as no folder: a linked driver would
		// silently vanish from the catalog (or, followed, be read from
		// outside the repository). Refused, like every link of the
		// repository's folders.
		if n.Type()&fs.ModeSymlink != 0 {
			return nil, symlinkedFolder(path.Join(dir, n.Name()))
		}
		if !n.IsDir() {
			continue
		}
		versions, err := fs.ReadDir(fsys, path.Join(dir, n.Name()))
		if err != nil {
			return nil, fmt.Errorf("drivers: reading %s: %w", path.Join(dir, n.Name()), err)
		}
		for _, v := range versions {
			if strings.HasPrefix(v.Name(), ".") {
				continue
			}
			if v.Type()&fs.ModeSymlink != 0 {
				return nil, symlinkedFolder(path.Join(dir, n.Name(), v.Name()))
			}
			if v.IsDir() {
				out = append(out, Folder{Name: n.Name(), Version: v.Name()})
			}
		}
	}
	return out, nil
}

// ErrSymlinkedFolder is the error (inside a SpecError naming the path) of a
// symbolic link among the driver folders.
var ErrSymlinkedFolder = errors.New("is a symbolic link; symbolic links are refused: driver folders must be real folders inside the repository")

func symlinkedFolder(p string) error {
	return &SpecError{File: p, Msg: ErrSymlinkedFolder.Error(), Err: ErrSymlinkedFolder}
}

// LoadCatalog loads every driver version folder dir/<name>/<version>/ of
// fsys. A missing dir gives an empty catalog. Errors name the folder.
func LoadCatalog(fsys fs.FS, dir string, opts LoadOptions) (*Catalog, error) {
	return loadCatalog(fsys, dir, opts, false)
}

// LoadCatalogKeepGoing is LoadCatalog keeping the versions that load when
// others do not: those are recorded (Broken), and only a selection they
// could change fails, naming them (BrokenDriverError). For the agent's
// lock mode, where one team's broken driver version must not hold back
// every other deployment's change, and a command-line lock that keeps
// going; a plan and a lock's check stay strict, as a check before the
// merge.
func LoadCatalogKeepGoing(fsys fs.FS, dir string, opts LoadOptions) (*Catalog, error) {
	return loadCatalog(fsys, dir, opts, true)
}

func loadCatalog(fsys fs.FS, dir string, opts LoadOptions, keepGoing bool) (*Catalog, error) {
	c := NewCatalog()
	folders, err := Folders(fsys, dir)
	if err != nil {
		return nil, err
	}
	// Each load compiles a spec and renders the chart with its sample
	// parameters. In a sandbox (its children, as many as it allows) they
	// run on every core, and are added in the folders' order, so the
	// first error is the same whatever finished first. In-process, one
	// after the other: there a load's time limit is wall-clock time, and
	// loads at once would take each other's.
	loaded := make([]*Driver, len(folders))
	errs := make([]error, len(folders))
	var wg sync.WaitGroup
	parallel := 1
	if opts.Sandbox != nil {
		parallel = max(1, runtime.GOMAXPROCS(0))
	}
	sem := make(chan struct{}, parallel)
	for i, f := range folders {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			loaded[i], errs[i] = loadCatalogFolder(fsys, dir, f, opts)
		})
	}
	wg.Wait()
	for i, f := range folders {
		if errs[i] != nil && keepGoing {
			if c.broken == nil {
				c.broken = map[string]map[string]error{}
			}
			if c.broken[f.Name] == nil {
				c.broken[f.Name] = map[string]error{}
			}
			c.broken[f.Name][f.Version] = errs[i]
			continue
		}
		if errs[i] != nil {
			return nil, errs[i]
		}
		if err := c.Add(loaded[i]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// PendingCatalog is a catalog StartCatalog is loading.
type PendingCatalog struct {
	done    chan struct{}
	catalog *Catalog
	err     error
}

// StartCatalog is LoadCatalog in the background. With a Sandbox a load
// mostly waits for its children, so the caller reads the rest of a
// repository meanwhile. A caller that returns early waits too (defer
// Wait), so that no evaluation outlives it.
func StartCatalog(fsys fs.FS, dir string, opts LoadOptions) *PendingCatalog {
	return startCatalog(fsys, dir, opts, false)
}

// StartCatalogKeepGoing is LoadCatalogKeepGoing in the background.
func StartCatalogKeepGoing(fsys fs.FS, dir string, opts LoadOptions) *PendingCatalog {
	return startCatalog(fsys, dir, opts, true)
}

func startCatalog(fsys fs.FS, dir string, opts LoadOptions, keepGoing bool) *PendingCatalog {
	p := &PendingCatalog{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.catalog, p.err = loadCatalog(fsys, dir, opts, keepGoing)
	}()
	return p
}

// Wait returns what LoadCatalog returned, once it has; it may be called
// more than once.
func (p *PendingCatalog) Wait() (*Catalog, error) {
	<-p.done
	return p.catalog, p.err
}

// loadCatalogFolder loads the driver version in folder f of dir and
// checks that it is the one the folder names.
func loadCatalogFolder(fsys fs.FS, dir string, f Folder, opts LoadOptions) (*Driver, error) {
	folder := path.Join(dir, f.Name, f.Version)
	sub, err := fs.Sub(fsys, folder)
	if err != nil {
		return nil, fmt.Errorf("drivers: %s: %w", folder, err)
	}
	prefix := opts.Source
	o := opts
	o.Source = folder
	if prefix != "" {
		o.Source = strings.TrimSuffix(prefix, "/") + "/" + folder
	}
	d, err := Load(sub, o)
	if err != nil {
		return nil, err
	}
	if d.Name != f.Name {
		return nil, fmt.Errorf("%s/%s: name: %q does not match the folder name %q", o.Source, d.compiled.specFile, d.Name, f.Name)
	}
	if d.Version != f.Version {
		return nil, fmt.Errorf("%s/%s: version: %q does not match the folder name %q", o.Source, d.compiled.specFile, d.Version, f.Version)
	}
	return d, nil
}

// Names returns the driver names, sorted.
func (c *Catalog) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Versions returns the loaded versions of a driver in ascending semver
// order.
func (c *Catalog) Versions(name string) []*Driver {
	return slices.Clone(c.byName[name])
}

// Get returns one driver version.
func (c *Catalog) Get(name, version string) (*Driver, bool) {
	for _, d := range c.byName[name] {
		if d.Version == version {
			return d, true
		}
	}
	return nil, false
}
