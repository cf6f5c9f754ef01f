package drivers

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cuelang.org/go/cue"
	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// Driver is one loaded, validated driver version. It is immutable after
// Load and safe for concurrent use.
type Driver struct {
	Name        string
	Version     string
	Description string
	// AppVersions is the supported application version range as written,
	// for example ">=1.5.0 <1.7.0".
	AppVersions string
	// Digest is "sha256:<hex>" of the folder's content (paths and bytes,
	// sorted), stable across machines.
	Digest string
	// Source says where the driver was loaded from, for messages.
	Source     string
	Parameters []Parameter // sorted by name
	Components []Component // sorted by name
	Services   []Service   // sorted by name
	Hooks      map[Hook]Modes
	// Provides lists the cluster services the driver declares it provides
	// (its spec's provides:), sorted: ProvidesIngressClass for an
	// ingress controller.
	Provides []string

	compiled *compiled
}

// compiled holds what rendering needs, prepared once at Load.
type compiled struct {
	specFile string    // spec file name inside the folder
	file     string    // spec file as shown to users
	value    cue.Value // the spec unified with #Driver, context open
	raw      cue.Value // the spec alone, to show expressions as written
	// Projections evaluated per call: only what each computation needs.
	valuesProj, servicesProj, renderProj projection
	// Set when the render projection does not use the context.
	staticComponents []Component
	staticPatches    []patchEntry
	isStaticRender   bool
	// Strategic-merge metadata by apiVersion/kind (a nil entry: unknown
	// kind), filled on first use.
	patchMetas sync.Map
	// Parameter sets applied (ApplyParameters) by paramsKey, and how many
	// were stored (at most maxAppliedParams).
	appliedParams sync.Map
	appliedCount  atomic.Int64
	// Components and patches evaluated (renderSpecFor) by the parts of
	// the context they use, and how many were stored (at most
	// maxRenderSpecs).
	renderSpecs     sync.Map
	renderSpecCount atomic.Int64
	chart           *chartv2.Chart
	// The chart's templates parsed once (nil: render through Helm's
	// engine), on first render.
	helmOnce    sync.Once
	helm        *helmTemplates
	chartDir    string
	display     func(string) string // folder path -> path shown to users
	caps        *common.Capabilities
	appRange    *semver.Constraints
	kubeVersion string
	// The folder and options it was loaded with: a sandboxed Render
	// sends them to the child.
	folder *folder
	opts   LoadOptions
	// checked holds, by the hash of an evaluation and its input, an
	// *inputCheck for each input this process evaluates of a driver
	// loaded through a sandbox (evalChecked), and checkedCount how many
	// passed (at most maxCheckedInputs are kept).
	checked      sync.Map
	checkedCount atomic.Int64
	// inputs are the inputs earlier processes' children checked
	// (Sandbox.KeepChecks), found on the first evalChecked.
	inputsOnce sync.Once
	inputs     *inputChecks
	// results are the results kept beside inputs (inputResults).
	results *inputResults
}

// ProvidesIngressClass is what an ingress controller driver declares in
// provides: its chart creates the IngressClass named
// context.cluster.ingressClass and serves it.
const ProvidesIngressClass = "ingressClass"

// Serves reports whether the driver declares it provides service (see
// Provides).
func (d *Driver) Serves(service string) bool { return slices.Contains(d.Provides, service) }

// ChartAppVersion is the appVersion of the driver's Chart.yaml ("" when
// it sets none): the application version an internal deployment runs
// when cluster.cue names none.
func (d *Driver) ChartAppVersion() string {
	if c := d.compiled.chart; c != nil && c.Metadata != nil {
		return c.Metadata.AppVersion
	}
	return ""
}

// Parameter is one user-facing, typed parameter of a driver.
type Parameter struct {
	Name string
	// Type is the parameter's type: int, number, string, bool, list,
	// struct or secret.
	Type       string
	Doc        string
	Default    any
	HasDefault bool
	// Optional is true when the parameter may be left unset (declared with
	// `?`) and has no default.
	Optional bool
	// Sensitive marks a value that should not be shown (attribute
	// @styrmin(sensitive)).
	Sensitive bool
	// Secret is true when the parameter is a SecretRef.
	Secret bool
	// Constraint is the declared constraint, human-readable, for example
	// "int & >=1 & <=10".
	Constraint string
}

// Component is a named part of the application and the workloads of the
// rendered chart that make it up.
type Component struct {
	Name      string
	Workloads []WorkloadSelector
}

// WorkloadSelector selects workloads of the rendered chart: by kind and
// name, or by kind and labels. In Driver.Components Name holds the name
// template as written in the spec (it may depend on the context); use
// Driver.ResolveComponents for concrete names.
type WorkloadSelector struct {
	Kind        string            `json:"kind"`
	Name        string            `json:"name,omitempty"`
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// Service is something the application exposes to other deployments of
// its environment.
type Service struct {
	Name      string
	Component string
	Protocol  string
	Port      int
	Ingress   bool
}

// Hook is a lifecycle hook.
type Hook string

// The hooks a driver may declare actions for.
const (
	HookSetup   Hook = "setup"   // runs on create
	HookUpgrade Hook = "upgrade" // runs on upgrade (driver or app version changed)
	// HookBackup and HookRestore are operations (a StyrminBackup, a
	// StyrminRestore), not workflows: a driver declares both or neither,
	// and one without them cannot be backed up.
	HookBackup  Hook = "backup"
	HookRestore Hook = "restore"
	// HookDeleteBackup (optional, only beside backup and restore) deletes
	// a backup's artefact when its StyrminBackup is deleted (by retention
	// or by hand); without it the artefact is left where it is.
	HookDeleteBackup Hook = "deleteBackup"
)

// LifecycleHooks are the hooks every driver has (a core step by
// default), in the order `drivers show` lists them.
func LifecycleHooks() []Hook { return []Hook{HookSetup, HookUpgrade} }

// OperationHooks are the hooks a driver may declare for operations.
func OperationHooks() []Hook { return []Hook{HookBackup, HookRestore, HookDeleteBackup} }

// CanDeleteBackups reports whether the driver deletes its backups'
// artefacts (the deleteBackup hook).
func (d *Driver) CanDeleteBackups() bool {
	_, ok := d.Hooks[HookDeleteBackup]
	return ok && d.CanBackup()
}

// CanBackup reports whether the driver declares the backup and restore
// hooks: only then can its deployments be backed up.
func (d *Driver) CanBackup() bool {
	_, b := d.Hooks[HookBackup]
	_, r := d.Hooks[HookRestore]
	return b && r
}

// RestoresInSetup reports whether the driver's setup hook has a
// restoreBackup step: only there does a clone's create restore the
// backup it was cloned from (a driver that can back up may still leave
// it out, and its clones then start empty).
func (d *Driver) RestoresInSetup() bool {
	for _, ms := range d.Hooks[HookSetup].Ordered() {
		if slices.ContainsFunc(ms.Steps, func(s Step) bool { return s.Action == ActionRestoreBackup }) {
			return true
		}
	}
	return false
}

// RestoreCompatible refuses restoring a backup taken with driver
// takenName@takenVersion into a deployment running driver name@version: a
// backup's format is its driver's, so the driver must be the same one, of
// the same major version and no older than the one that took it.
func RestoreCompatible(takenName, takenVersion, name, version string) error {
	if takenName != name {
		return fmt.Errorf("the backup was taken with driver %s@%s, the deployment runs driver %s@%s: a backup restores only into the driver that took it", takenName, takenVersion, name, version)
	}
	a, errA := semver.StrictNewVersion(takenVersion)
	b, errB := semver.StrictNewVersion(version)
	if errA != nil || errB != nil {
		return fmt.Errorf("driver versions %s and %s: expected semantic versions", takenVersion, version)
	}
	if a.Major() != b.Major() {
		return fmt.Errorf("the backup was taken with %s@%s, the deployment runs %s@%s: a new major version of a driver may not read its old backups (expected %s@%d.x)", name, takenVersion, name, version, name, a.Major())
	}
	if b.LessThan(a) {
		return fmt.Errorf("the backup was taken with %s@%s, newer than the running %s@%s: upgrade the deployment first", name, takenVersion, name, version)
	}
	return nil
}

// Modes are the ordered steps of one hook. Core always has at least one
// step (upgradeDeploymentVersion by default).
type Modes struct {
	Pre, Core, Post []Step
}

// The modes of a hook, as the spec's keys under actions.<hook> name them.
const (
	ModePre  = "pre"
	ModeCore = "core"
	ModePost = "post"
)

// ModeSteps are the steps of one mode of a hook.
type ModeSteps struct {
	Mode  string
	Steps []Step
}

// Ordered returns the modes in the order they run: pre, core, post. It is
// the one place that order is written; every walk of a hook's steps (the
// plan, the task, `drivers show`) goes through it.
func (m Modes) Ordered() []ModeSteps {
	return []ModeSteps{{ModePre, m.Pre}, {ModeCore, m.Core}, {ModePost, m.Post}}
}

// ModeNames returns the names of the modes in the order they run.
func ModeNames() []string {
	var names []string
	for _, ms := range (Modes{}).Ordered() {
		names = append(names, ms.Mode)
	}
	return names
}

// set sets the steps of the named mode; an unknown name sets nothing.
func (m *Modes) set(mode string, steps []Step) {
	switch mode {
	case ModePre:
		m.Pre = steps
	case ModeCore:
		m.Core = steps
	case ModePost:
		m.Post = steps
	}
}

// ActionKind is a primitive step the agent knows how to run.
type ActionKind string

// The primitive actions.
const (
	ActionStopComponents           ActionKind = "stopComponents"
	ActionStartComponents          ActionKind = "startComponents"
	ActionExec                     ActionKind = "exec"
	ActionRunJob                   ActionKind = "runJob"
	ActionWaitReady                ActionKind = "waitReady"
	ActionUpgradeDeploymentVersion ActionKind = "upgradeDeploymentVersion"
	// ActionBackup takes a backup of the deployment where it stands, as
	// the backup hook declares; it belongs in the upgrade hook's pre mode
	// (a safety net before the upgrade changes anything).
	ActionBackup ActionKind = "backup"
	// ActionRestoreBackup restores, where it stands in the setup hook, the
	// backup a cloned environment was cloned from, as the restore hook
	// declares; in any other environment it is skipped.
	ActionRestoreBackup ActionKind = "restoreBackup"
)

// Step is one declared action with its arguments.
type Step struct {
	Action     ActionKind
	Components []string // stopComponents, startComponents, waitReady
	Command    []string // exec, runJob
	Component  string   // exec, runJob: whose pod (template) to use
	Job        string   // runJob: name of the one-off job
	Timeout    time.Duration
	// Retry, when Attempts > 1, runs a step that failed again.
	Retry RetryPolicy
	Args  map[string]string
}

// RetryPolicy bounds the automatic retries of a step that fails: at most
// Attempts runs in all, the first retry after Backoff, each next one
// after twice the previous delay.
type RetryPolicy struct {
	Attempts int
	Backoff  time.Duration
}

// DefaultRetryBackoff is the delay before a step's first retry when its
// policy names none.
const DefaultRetryBackoff = 10 * time.Second

// Delay is the pause before run number attempt+1 after run number
// attempt (1-based) failed: Backoff, doubling, at most 10 minutes.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := p.Backoff
	if d <= 0 {
		d = DefaultRetryBackoff
	}
	for i := 1; i < attempt && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}
