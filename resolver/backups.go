package resolver

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/bits"
	"path"
	"regexp"
	"slices"
	"strings"

	"cuelang.org/go/cue/token"
	"github.com/robfig/cron/v3"

	"github.com/styrmin/styrmin/drivers"
)

// The backup location schemes.
const (
	SchemeS3  = "s3"
	SchemePVC = "pvc"
)

// backupLocationForms is what a location may look like, for messages.
const backupLocationForms = "s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH]"

var (
	// bucketRE is an S3 bucket name: 3–63 lowercase letters, digits, dots
	// and hyphens, starting and ending with a letter or a digit.
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	// dnsSubdomainRE is a DNS-1123 subdomain (a Secret's name).
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// pathSegmentRE is one element of a location's prefix or path: safe
	// in an object key and a file name alike.
	pathSegmentRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

// isDNSLabel reports whether s is a DNS-1123 label (a claim's name, a
// backup ID).
func isDNSLabel(s string) bool { return len(s) <= 63 && nameRE.MatchString(s) }

// BackupLocation is a parsed backupLocation URL.
type BackupLocation struct {
	// Scheme is SchemeS3 or SchemePVC.
	Scheme string
	// Target is the bucket (s3) or the PersistentVolumeClaim (pvc).
	Target string
	// Path is the prefix inside the bucket or the path inside the claim,
	// without leading or trailing slashes ("" when none).
	Path string
}

// String is the location as a URL, the form ParseBackupLocation reads.
func (l BackupLocation) String() string {
	s := l.Scheme + "://" + l.Target
	if l.Path != "" {
		s += "/" + l.Path
	}
	return s
}

// ParseBackupLocation splits a location URL, s3://BUCKET[/PREFIX] or
// pvc://CLAIM[/PATH], into its scheme, bucket or claim, and prefix or
// path. The error says what was expected (the caller adds the file and
// the field).
func ParseBackupLocation(s string) (BackupLocation, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != SchemeS3 && scheme != SchemePVC) {
		return BackupLocation{}, fmt.Errorf("%q is no backup location: expected %s", s, backupLocationForms)
	}
	target, p, _ := strings.Cut(rest, "/")
	switch scheme {
	case SchemeS3:
		if !bucketRE.MatchString(target) || strings.Contains(target, "..") {
			return BackupLocation{}, fmt.Errorf("%q: bucket %q is no S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit): expected %s", s, target, backupLocationForms)
		}
	case SchemePVC:
		if !isDNSLabel(target) {
			return BackupLocation{}, fmt.Errorf("%q: claim %q is no PersistentVolumeClaim name (a DNS-1123 label: at most 63 lowercase letters, digits and '-'): expected %s", s, target, backupLocationForms)
		}
	}
	if p != "" || strings.HasSuffix(rest, "/") {
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." || !pathSegmentRE.MatchString(seg) {
				return BackupLocation{}, fmt.Errorf("%q: path %q must be non-empty elements of letters, digits, '.', '_' and '-' separated by single slashes (no \".\" or \"..\", no trailing slash): expected %s", s, p, backupLocationForms)
			}
		}
	}
	return BackupLocation{Scheme: scheme, Target: target, Path: p}, nil
}

// ArtifactURL is where a deployment's artefact of a backup lives:
// <location>/<backupID>/<deployment>.
func ArtifactURL(location, backupID, deployment string) string {
	return strings.TrimRight(location, "/") + "/" + backupID + "/" + deployment
}

// Backups is the backups block of cluster.cue (the default) or
// environment.cue, checked.
type Backups struct {
	// Secret names a Secret in the agent's namespace holding the
	// location's credentials ("": none).
	Secret string `json:"secret,omitempty"`
	// Schedule is a five-field cron expression ("": no scheduled backups).
	Schedule string `json:"schedule,omitempty"`
	// Keep is how many scheduled backups are kept (nil: unset).
	Keep *int `json:"keep,omitempty"`
}

// CloneSource is where a cloned environment came from (environment.cue's
// clonedFrom); the drivers see it as context.environment.clonedFrom.
type CloneSource = drivers.CloneSource

// EnvironmentBackups is an environment's backup settings as git declares them.
type EnvironmentBackups struct {
	Cluster, Environment string
	Location             string // "" when none
	Secret               string // "" when none
	Schedule             string // "" when none
	Keep                 int    // 0 when unset
	// ClonedFrom is nil unless the environment is a clone.
	ClonedFrom *CloneSource
	// Err is why the settings cannot be read: the environment's file or
	// its cluster's is invalid (a *ConfigError naming the file and the
	// field), or could not be evaluated. Only Cluster and Environment are
	// set then; Environment is "" when the error is the cluster's and no
	// environment of it could be named.
	Err error `json:"-"`
	// LocationErr is set when an environment of this one's name in
	// another cluster backs up to Location too (sharedBackupLocations: a
	// *ConfigError naming the file that set it and the field): the two
	// agents would give the same backup IDs, so a new backup or restore of
	// the environment is refused. The settings are read all the same, and
	// nothing else waits for it: the deletions of its existing backups and
	// their retention, its backups before upgrades (named after their
	// cluster), and every other environment.
	LocationErr error `json:"-"`
}

// BackupSettings reads every environment's backup settings from a
// repository tree (the same fs.FS the resolver loads), sorted by cluster
// then environment. It reads the cluster and environment files alone:
// the agent calls it on every sync, and no driver or deployment changes
// what it returns.
//
// A file that cannot be read hides only the environments it layers: each
// of them is in the list with its Err, and the error returned joins those
// (the others are read all the same, so one broken file stops no other
// environment's backups). With no list, the clusters folder itself could
// not be read. An s3:// backupLocation environments of one name in two
// clusters share is no such error: each of them is read with its
// LocationErr, which the error returned does not join (plan and lock
// refuse it, where a person can fix it; the agent, which reads a
// repository that may have been locked before that check, refuses only
// those environments' backups and restores).
func BackupSettings(fsys fs.FS) ([]EnvironmentBackups, error) {
	return NewLoader(0).BackupSettings(fsys)
}

// BackupSettings is BackupSettings with this Loader (and its sandbox).
func (l *Loader) BackupSettings(fsys fs.FS) ([]EnvironmentBackups, error) {
	clusters, err := subdirs(fsys, "clusters")
	if err != nil {
		return nil, err
	}
	var out []EnvironmentBackups
	var errs []error
	var read []*Cluster // with the environments read, for sharedBackupLocations
	for _, cn := range clusters {
		envs, err := subdirs(fsys, path.Join("clusters", cn, "environments"))
		if err != nil {
			errs = append(errs, err)
			out = append(out, EnvironmentBackups{Cluster: cn, Err: err})
			continue
		}
		c, err := l.loadClusterFile(fsys, cn)
		if err != nil {
			// Each environment is listed with the cluster file's error
			// (the cluster alone when it has none).
			errs = append(errs, err)
			if len(envs) == 0 {
				out = append(out, EnvironmentBackups{Cluster: cn, Err: err})
			}
			for _, en := range envs {
				out = append(out, EnvironmentBackups{Cluster: cn, Environment: en, Err: err})
			}
			continue
		}
		for _, en := range envs {
			e, err := l.loadEnvironmentFile(fsys, c, en)
			if err != nil {
				errs = append(errs, err)
				out = append(out, EnvironmentBackups{Cluster: cn, Environment: en, Err: err})
				continue
			}
			c.Environments = append(c.Environments, e)
			out = append(out, EffectiveBackups(c, e))
		}
		read = append(read, c)
	}
	_, byEnv := sharedBackupLocations(read)
	for i, b := range out {
		if b.Err == nil {
			out[i].LocationErr = byEnv[b.Cluster+"/"+b.Environment]
		}
	}
	return out, errors.Join(errs...)
}

// EffectiveBackups is the backup settings of environment e of cluster c:
// each field the environment sets, else the cluster's.
func EffectiveBackups(c *Cluster, e *Environment) EnvironmentBackups {
	b := EnvironmentBackups{Cluster: c.Name, Environment: e.Name, Location: backupLocationOf(c, e)}
	for _, s := range []*Backups{c.Backups, e.Backups} {
		if s == nil {
			continue
		}
		b.Secret = cmp.Or(s.Secret, b.Secret)
		b.Schedule = cmp.Or(s.Schedule, b.Schedule)
		if s.Keep != nil {
			b.Keep = *s.Keep
		}
	}
	b.ClonedFrom = cloneSourceOf(e)
	return b
}

// backupLocationOf is the environment's backupLocation, else the cluster's.
func backupLocationOf(c *Cluster, e *Environment) string {
	if s, ok := e.Settings["backupLocation"].(string); ok {
		return s
	}
	s, _ := c.Settings["backupLocation"].(string)
	return s
}

// backupLocationLayer is the layer whose backupLocation environment e of
// cluster c takes: its own file, else its cluster's.
func backupLocationLayer(c *Cluster, e *Environment) layer {
	if _, ok := e.Settings["backupLocation"].(string); ok {
		return e.layer()
	}
	return c.layer()
}

// backupLocationUser is an environment that backs up to a location.
type backupLocationUser struct {
	cluster *Cluster
	env     *Environment
}

// backupLocationUsers maps each backup location the environments of
// clusters use (their own, or their cluster's) to those environments, in
// the order of the clusters and of their environments. A location is
// keyed as ParseBackupLocation reads it and String prints it, so one
// location is one key; one that does not parse is left out (the check of
// its file says why).
func backupLocationUsers(clusters []*Cluster) map[string][]backupLocationUser {
	out := map[string][]backupLocationUser{}
	for _, c := range clusters {
		for _, e := range c.Environments {
			l, err := ParseBackupLocation(backupLocationOf(c, e))
			if err != nil {
				continue
			}
			out[l.String()] = append(out[l.String()], backupLocationUser{c, e})
		}
	}
	return out
}

// CheckSharedBackupLocations refuses an s3:// backupLocation that
// environments of the same name in two clusters share
// (sharedBackupLocations), with an error for each file that set it, naming
// the field. Plan and lock run it, where a person changes the repository,
// and an env clone for the environment it adds. Load does not: the agent
// loads the repository to reveal sensitive values, and a repository locked
// before the check would stall every deployment with one; its backups and
// restores of those environments are refused instead (BackupSettings,
// EnvironmentBackups.LocationErr).
func CheckSharedBackupLocations(repo *Repository) error {
	errs, _ := sharedBackupLocations(repo.Clusters)
	return errors.Join(errs...)
}

// sharedBackupLocations refuses an s3:// backup location that
// environments of one name in different clusters use. An artefact is
// <location>/<backup ID>/<deployment>, and the backup IDs each cluster's
// agent gives begin with the environment's name: a schedule's
// <env>-YYYYMMDD-HHMM, alike in two clusters at the same time, and a
// backup by hand's default <env>-YYYYMMDD-HHMMSS; a backup before an
// upgrade ends in a hash of its cluster. So two such environments would
// overwrite each other's artefacts, each one's retention would delete the
// other's, and a restore could read the other cluster's data, while
// environments of other names never take each other's IDs. (A name given
// by hand, backup create --name, is the operator's to keep apart.)
//
// Environments of one cluster may share a location: their backup IDs are
// the names of StyrminBackups in the one namespace of that cluster's
// agent, so no two are alike while both exist. Neither is a pvc:// location
// refused: its claim is the one of that name in the deployment's namespace
// of its own Kubernetes cluster, so two clusters naming one claim write to
// two volumes.
//
// There is one error for each file that set a shared location, naming its
// environments that share it and those of the same names in other
// clusters with the files that set theirs; byEnv gives each such
// environment ("cluster/environment") the error of the file its location
// comes from.
func sharedBackupLocations(clusters []*Cluster) (errs []error, byEnv map[string]error) {
	users := backupLocationUsers(clusters)
	byEnv = map[string]error{}
	for _, loc := range slices.Sorted(maps.Keys(users)) {
		if !strings.HasPrefix(loc, SchemeS3+"://") {
			continue
		}
		all := users[loc]
		clash := func(u backupLocationUser) bool {
			return slices.ContainsFunc(all, func(o backupLocationUser) bool { return o.env.Name == u.env.Name && o.cluster != u.cluster })
		}
		// The environments of each file that set the location and share
		// it with one of their name, in order.
		type setter struct {
			l       layer
			cluster *Cluster
			envs    []*Environment
		}
		var setters []*setter
		for _, u := range all {
			if !clash(u) {
				continue
			}
			l := backupLocationLayer(u.cluster, u.env)
			i := slices.IndexFunc(setters, func(s *setter) bool { return s.l.file == l.file })
			if i < 0 {
				setters = append(setters, &setter{l: l, cluster: u.cluster})
				i = len(setters) - 1
			}
			setters[i].envs = append(setters[i].envs, u.env)
		}
		for _, s := range setters {
			var mine, others []string
			for _, e := range s.envs {
				mine = append(mine, s.cluster.Name+"/"+e.Name)
			}
			for _, o := range setters {
				if o.cluster == s.cluster {
					continue
				}
				var alike []string
				for _, e := range o.envs {
					if slices.ContainsFunc(s.envs, func(m *Environment) bool { return m.Name == e.Name }) {
						alike = append(alike, o.cluster.Name+"/"+e.Name)
					}
				}
				if len(alike) > 0 {
					p := placeOf(o.l.pos, "backupLocation")
					others = append(others, fmt.Sprintf("%s (set in %s:%d)", strings.Join(alike, ", "), o.l.file, max(p.Line, 1)))
				}
			}
			err := placed(&ConfigError{File: s.l.file, Field: "backupLocation", Msg: fmt.Sprintf("%q, the backup location of %s, is also that of %s: environments of the same name in two clusters cannot share a backup location, since the two clusters' agents give their backups the same IDs (a schedule's <env>-YYYYMMDD-HHMM, backup create's default <env>-YYYYMMDD-HHMMSS) and write <location>/<backup ID>/<deployment>, so each would overwrite the other's artefacts and delete them by its retention, and a restore could read the other cluster's data; expected a location of each cluster's own (with the cluster's name in its path, for example), or environments of other names (those may share one)",
				loc, strings.Join(mine, ", "), strings.Join(others, "; "))}, s.l.pos)
			errs = append(errs, err)
			for _, env := range mine {
				byEnv[env] = err
			}
		}
	}
	return errs, byEnv
}

// checkDomain checks a layer's own domain: a DNS-1123 subdomain, which
// every host a driver makes of it extends. The schema lets through what
// DNS refuses ("a..b", "x.", "-x"), and the Ingress of each deployment
// was then refused at the agent's apply, after the merge, not here.
func checkDomain(file string, settings map[string]any, pos map[string]token.Position) error {
	d, ok := settings["domain"].(string)
	if !ok || (len(d) <= 253 && dnsSubdomainRE.MatchString(d)) {
		return nil
	}
	return placed(&ConfigError{File: file, Field: "domain", Msg: fmt.Sprintf("%q is no domain: expected a DNS-1123 subdomain (labels of lowercase letters, digits and '-', each starting and ending with a letter or digit, joined by '.', at most 253)", d)}, pos)
}

// checkBackupLocation checks a layer's own backupLocation.
func checkBackupLocation(file string, settings map[string]any, pos map[string]token.Position) error {
	s, ok := settings["backupLocation"].(string)
	if !ok {
		return nil
	}
	if _, err := ParseBackupLocation(s); err != nil {
		return placed(&ConfigError{File: file, Field: "backupLocation", Msg: err.Error()}, pos)
	}
	return nil
}

// takeBackups moves the backups block out of a layer's settings (no
// driver sees it, and a change of schedule redeploys nothing) and checks
// its values.
func takeBackups(file string, settings map[string]any, pos map[string]token.Position) (*Backups, error) {
	b, err := takeBlock[Backups](file, settings, "backups", pos)
	if err != nil || b == nil {
		return b, err
	}
	at := func(field, format string, args ...any) error {
		return placed(&ConfigError{File: file, Field: "backups." + field, Msg: fmt.Sprintf(format, args...)}, pos)
	}
	if b.Secret != "" && (len(b.Secret) > 253 || !dnsSubdomainRE.MatchString(b.Secret)) {
		return nil, at("secret", "%q is no Secret name: expected a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253)", b.Secret)
	}
	if b.Schedule != "" {
		if err := CheckBackupSchedule(b.Schedule); err != nil {
			return nil, at("schedule", "%v", err)
		}
	}
	if b.Keep != nil && *b.Keep < 1 {
		return nil, at("keep", "is %d: keep at least 1 backup (or remove the field)", *b.Keep)
	}
	return b, nil
}

// checkBackupsNeedLocation refuses a schedule or a retention with no
// location to write to, in the file that set it.
func checkBackupsNeedLocation(c *Cluster, e *Environment) error {
	if backupLocationOf(c, e) != "" {
		return nil
	}
	for _, l := range []struct {
		file string
		b    *Backups
		pos  map[string]token.Position
	}{{e.File, e.Backups, e.pos}, {c.File, c.Backups, c.pos}} {
		if l.b == nil {
			continue
		}
		field := ""
		switch {
		case l.b.Schedule != "":
			field = "backups.schedule"
		case l.b.Keep != nil:
			field = "backups.keep"
		default:
			continue
		}
		return placed(&ConfigError{File: l.file, Field: field, Msg: fmt.Sprintf("environment %s/%s has no backupLocation to back up to: set backupLocation (%s) in %s or %s, or remove the field", c.Name, e.Name, backupLocationForms, e.File, c.File)}, l.pos)
	}
	return nil
}

// takeClonedFrom moves clonedFrom out of the environment's settings and
// checks what the schema cannot.
func takeClonedFrom(file string, settings map[string]any, pos map[string]token.Position) (*CloneSource, error) {
	cf, err := takeBlock[CloneSource](file, settings, "clonedFrom", pos)
	if err != nil || cf == nil {
		return cf, err
	}
	if cf.Backup != "" && !isDNSLabel(cf.Backup) {
		return nil, placed(&ConfigError{File: file, Field: "clonedFrom.backup", Msg: fmt.Sprintf("%q is no backup ID: expected a DNS-1123 label", cf.Backup)}, pos)
	}
	if cf.Location != "" {
		if _, err := ParseBackupLocation(cf.Location); err != nil {
			return nil, placed(&ConfigError{File: file, Field: "clonedFrom.location", Msg: err.Error()}, pos)
		}
	}
	if cf.Backup != "" && cf.Location == "" {
		return nil, placed(&ConfigError{File: file, Field: "clonedFrom.location", Msg: "missing: a clone from a backup names the location the backup is read from"}, pos)
	}
	return cf, nil
}

// cloneSourceOf is a copy of the environment's clone source (nil: no
// clone): instances never share it.
func cloneSourceOf(e *Environment) *CloneSource {
	if e.ClonedFrom == nil {
		return nil
	}
	cf := *e.ClonedFrom
	cf.Deployments = slices.Clone(cf.Deployments)
	return &cf
}

// cloneSourceFor is the clone source in deployment name's context: nil
// when the environment is no clone, or a clone from a backup that does
// not hold the deployment (added to the clone later: it starts empty,
// its restoreBackup step skipped). Without the list it carries.
func cloneSourceFor(e *Environment, name string) *CloneSource {
	cf := e.ClonedFrom
	// A list given, even empty, says which restore; only a clone written
	// before the list existed (none) restores every deployment.
	if cf == nil || (cf.Backup != "" && cf.Deployments != nil && !slices.Contains(cf.Deployments, name)) {
		return nil
	}
	c := *cf
	c.Deployments = nil
	return &c
}

// backupFirstOf is the merged backupBeforeUpgrade setting of a
// deployment. Set for a driver that cannot be backed up, or in an
// environment with no backupLocation, it is an error in the file that set
// it: an upgrade that was asked to back up first must not go ahead
// without one, and without a location the backup would fail at the
// upgrade's first step, and so would every later upgrade's.
func backupFirstOf(c *Cluster, e *Environment, d *Deployment, merged map[string]any, prov Provenance, drv *drivers.Driver) (bool, error) {
	if merged["backupBeforeUpgrade"] != true {
		return false, nil
	}
	l := d.layer()
	if o, ok := prov["backupBeforeUpgrade"]; ok {
		for _, cand := range []layer{c.layer(), e.layer(), d.layer()} {
			if cand.file == o.File {
				l = cand
			}
		}
	}
	if !drv.CanBackup() {
		return false, placed(&ConfigError{File: l.file, Field: "backupBeforeUpgrade", Msg: fmt.Sprintf("deployment %s: driver %s@%s declares no backup and restore hooks, so its upgrades cannot back up first: remove the field (or set it false for this deployment), or use a driver version that declares actions.backup and actions.restore", d.ID, drv.Name, drv.Version)}, l.pos)
	}
	if backupLocationOf(c, e) == "" {
		return false, placed(&ConfigError{File: l.file, Field: "backupBeforeUpgrade", Msg: fmt.Sprintf("deployment %s: environment %s/%s has no backupLocation, so its upgrades have nowhere to back up to first: set backupLocation (%s) in %s or %s, or remove the field (or set it false for this deployment)", d.ID, c.Name, e.Name, backupLocationForms, e.File, c.File)}, l.pos)
	}
	return true, nil
}

// scheduleForms is what a backup schedule may look like, for messages.
const scheduleForms = `expected five fields, minute hour day-of-month month day-of-week, for example "0 3 * * *", or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly`

// CheckBackupSchedule checks a backups.schedule: five cron fields or a
// descriptor (@daily, …) that runs at least once every 366 days and at
// most once an hour. The agent makes a backup at every run, superseding
// the one before that has not ended: a schedule of a minute (@every 1m,
// "* * * * *") would start one a minute and let none finish, and one that
// never runs ("0 3 31 2 *") would silently make none. The error is the
// message for the field (the caller names the file and the field).
func CheckBackupSchedule(schedule string) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%q "+format, append([]any{schedule}, args...)...)
	}
	// The parser takes these before the expression; the agent's times are
	// in its own zone, and a zone the CLI's machine knows the agent's image
	// may not.
	if strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ=") {
		return refuse("has a time zone prefix, which is not read: %s", scheduleForms)
	}
	if strings.HasPrefix(schedule, "@every") {
		return refuse("is refused: @every runs at an interval from the agent's last backup, and a short one starts a backup before the previous one ends; %s (every 6 hours: \"0 */6 * * *\")", scheduleForms)
	}
	parsed, err := cron.ParseStandard(schedule)
	if err != nil {
		return refuse("is no cron expression (%v): %s", err, scheduleForms)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok { // no other kind is parsed once @every is refused
		return refuse("is no cron expression: %s", scheduleForms)
	}
	// Runs at one minute of the hour are an hour apart at least; any two
	// minutes are less than an hour apart.
	if n := bits.OnesCount64(spec.Minute &^ cronStarBit); n > 1 {
		return refuse("runs at %d minutes of the hour: expected one minute, as backups are at least an hour apart (each supersedes the one before that has not ended), for example \"0 * * * *\" for every hour or \"0 3 * * *\" for 3:00 every day", n)
	}
	switch freq, why := cronYearly(spec); freq {
	case cronNever:
		return refuse("never runs (%s): expected a schedule that runs at least once a year, for example \"0 3 1 * *\"", why)
	case cronLeapYears:
		return refuse("runs only on 29 February, once every four years: expected a schedule that runs at least once a year, for example \"0 3 28 2 *\"")
	}
	return nil
}

// cronStarBit is robfig/cron's mark of a field written * or ? (bit 63 of
// a SpecSchedule field): that field matches every value and, for the day
// of the month or of the week, the other day field alone decides.
const cronStarBit = 1 << 63

type cronFrequency int

const (
	cronEveryYear cronFrequency = iota
	cronLeapYears
	cronNever
)

// cronYearly tells whether spec runs every year. The parser lets a field
// match nothing (",": empty parts), so each is checked. robfig/cron takes
// a day when both its day of the month and of the week match if either
// field is *, and when either matches otherwise (crontab's rule). A day
// of the week that decides alone runs every week of the allowed months,
// so only a day of the month can miss: when no allowed month has an
// allowed day (31 February), or only 29 February. Decided from the
// fields, not by asking Next from now, so a schedule is accepted or
// refused the same whatever the date.
// why says, for a schedule that never runs, which fields miss.
func cronYearly(spec *cron.SpecSchedule) (freq cronFrequency, why string) {
	const (
		minutes = 1<<60 - 1
		hours   = 1<<24 - 1
		months  = 1<<13 - 2 // 1–12
		days    = 1<<32 - 2 // 1–31
		weekday = 1<<7 - 1  // 0–6
	)
	for _, f := range []struct {
		name string
		bits uint64
	}{{"minute", spec.Minute & minutes}, {"hour", spec.Hour & hours}, {"month", spec.Month & months}} {
		if f.bits == 0 {
			return cronNever, "its " + f.name + " field matches none"
		}
	}
	both := spec.Dom&cronStarBit != 0 || spec.Dow&cronStarBit != 0 // else either
	anyWeekday := spec.Dow&weekday != 0
	switch {
	case both && spec.Dom&cronStarBit != 0:
		// Every day of the month: the days of the week decide.
		if anyWeekday {
			return cronEveryYear, ""
		}
		return cronNever, "its day-of-week field matches none"
	case !both && anyWeekday:
		return cronEveryYear, ""
	}
	// The day of the month decides (the day of the week is *, or matches
	// none under crontab's "either").
	// The days of each month in a common year.
	length := [13]uint{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	leap := false
	for m := uint(1); m <= 12; m++ {
		if spec.Month&(1<<m) == 0 {
			continue
		}
		for d := uint(1); d <= 31; d++ {
			if spec.Dom&(1<<d) == 0 {
				continue
			}
			if d <= length[m] {
				return cronEveryYear, ""
			}
			if m == 2 && d == 29 {
				leap = true
			}
		}
	}
	if leap {
		return cronLeapYears, ""
	}
	return cronNever, "no month it allows has a day of the month it allows"
}
