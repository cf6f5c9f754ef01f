package planner

import (
	"fmt"
	"strings"

	"github.com/styrmin/styrmin/resolver"
)

// SchemaVersion identifies the JSON encoding of a Plan. It changes only
// when a field is removed or its meaning changes; new optional fields keep
// the version. docs/plan-json.md documents it; plan.schema.json is its
// JSON Schema.
const SchemaVersion = "styrmin.io/plan/v1"

// Workflow is what a task will run for one deployment.
type Workflow string

// The workflows, as the agent names them.
const (
	WorkflowCreate  Workflow = "create"  // no previous instance (or a tombstone): hook setup
	WorkflowUpdate  Workflow = "update"  // configuration only: the core step only
	WorkflowUpgrade Workflow = "upgrade" // driver or application version changed: hook upgrade
	WorkflowDelete  Workflow = "delete"  // the deployment is gone: a tombstone uninstalls it
	// WorkflowBackup and WorkflowRestore are operations, not changes: the
	// driver's backup or restore hook against the running instance (no
	// plan selects them).
	WorkflowBackup       Workflow = "backup"
	WorkflowRestore      Workflow = "restore"
	WorkflowDeleteBackup Workflow = "deleteBackup"
)

// workflowOrder orders workflows in summaries.
var workflowOrder = []Workflow{WorkflowCreate, WorkflowUpdate, WorkflowUpgrade, WorkflowDelete}

// Plan is the structured difference between the locked instances at a base
// and the instances the head configuration resolves to. It is computed by
// Compute and printed by the renderers; it holds no secret values and no
// value of a parameter marked sensitive.
type Plan struct {
	// SchemaVersion is always SchemaVersion.
	SchemaVersion string `json:"schemaVersion"`
	// StyrminVersion is the version of the tool that computed the plan,
	// as Terraform's terraform_version; the caller sets it (styrminctl:
	// version.Get().Short()), "" leaves it out.
	StyrminVersion string `json:"styrmin_version,omitempty"`
	// Base describes the lockfiles compared against (a commit, or "" for
	// none).
	Base string `json:"base"`
	// Head describes the configuration planned ("working tree" or a
	// commit).
	Head string `json:"head"`
	// Summary counts the deployments by outcome.
	Summary Summary `json:"summary"`
	// Deployments are the deployments that get a new instance, sorted by
	// cluster, environment, name. Unchanged deployments are only counted.
	Deployments []*Deployment `json:"deployments"`
	// BlastRadius has one entry per environment with at least one change,
	// sorted by cluster and environment.
	BlastRadius []EnvironmentImpact `json:"blastRadius"`
	// LeftOut are deployments a changed cluster or environment value
	// reaches but that are not redeployed because a more specific layer
	// sets the value itself, sorted by deployment and path.
	LeftOut []LeftOut `json:"leftOut"`
	// Errors are deployments that failed to resolve; they are neither
	// planned nor deleted.
	Errors []DeploymentError `json:"errors"`
	// Held are deployments on hold (a hold: line in their file): they keep
	// their lock whatever the configuration says, sorted by deployment.
	Held []Held `json:"held"`
	// Deletions is the deletion safety rail.
	Deletions Deletions `json:"deletions"`
	// Waves are the waves the fan-outs run in (styrmin.cue rollout:),
	// sorted by cluster, group and wave; empty without one.
	Waves []Wave `json:"waves,omitempty"`
	// UnlockedCommits counts the commits that changed the configuration's
	// folder since the last lock when there are more than one (0
	// otherwise; the caller sets it, styrminctl from the head's history):
	// `lock --commit` locks each that changes an instance as its own
	// instance, and the agent runs each change in turn (an upgrade's hooks
	// included), where the plan shows their sum.
	UnlockedCommits int `json:"unlockedCommits,omitempty"`
	// LockCommits are the lock commits `lock --commit` makes of those
	// commits, one per commit that changes an instance, oldest first,
	// when the caller worked them out (styrminctl: with UnlockedCommits,
	// for a working tree holding HEAD's configuration). Commits whose sum
	// changes nothing (an upgrade and its revert) still lock, and the
	// agent runs each: the plan's Deployments are only their sum.
	LockCommits []LockCommit `json:"lockCommits,omitempty"`
	// Warnings are what the configuration may not mean, though nothing
	// refuses it (resolver.Result.Warnings: clusters rendering the same
	// external hosts), each naming its files.
	Warnings []string `json:"warnings,omitempty"`
}

// Summary counts deployments by outcome.
type Summary struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Upgrade   int `json:"upgrade"`
	Delete    int `json:"delete"`
	Unchanged int `json:"unchanged"`
	Errors    int `json:"errors"`
}

// Changes is the number of deployments that get a new instance.
func (s Summary) Changes() int { return s.Create + s.Update + s.Upgrade + s.Delete }

// count returns the counter of one workflow.
func (s Summary) count(w Workflow) int {
	switch w {
	case WorkflowCreate:
		return s.Create
	case WorkflowUpdate:
		return s.Update
	case WorkflowUpgrade:
		return s.Upgrade
	case WorkflowDelete:
		return s.Delete
	}
	return 0
}

// HasChanges reports whether locking this plan would write any lockfile.
func (p *Plan) HasChanges() bool { return p.Summary.Changes() > 0 }

// WouldLock reports whether a lock would write any lockfile: the plan's
// changes, or lock --commit's lock commits of configuration commits whose
// sum changes nothing.
func (p *Plan) WouldLock() bool { return p.HasChanges() || len(p.LockCommits) > 0 }

// LockCommit is one lock commit `lock --commit` makes: the configuration
// commit it locks and the instances it locks.
type LockCommit struct {
	// Commit is the configuration commit's hash; Subject its subject line.
	Commit  string `json:"commit"`
	Subject string `json:"subject"`
	// Deployments are the instances it locks, sorted by deployment.
	Deployments []LockedInstance `json:"deployments"`
}

// LockedInstance is one instance of a lock commit and the workflow the
// agent runs to it from the instance the lock commit before left.
type LockedInstance struct {
	ID           string       `json:"id"`
	Workflow     Workflow     `json:"workflow"`
	FromSequence int64        `json:"fromSequence"`
	ToSequence   int64        `json:"toSequence"`
	From         *InstanceRef `json:"from,omitempty"`
	To           *InstanceRef `json:"to,omitempty"`
}

// NewLockCommit describes the lock commit of configuration commit commit
// (its subject line subject) locking changes, each from the instance the
// chain ran before it (LockChange.Previous).
func NewLockCommit(commit, subject string, changes []resolver.LockChange) LockCommit {
	lc := LockCommit{Commit: commit, Subject: subject, Deployments: []LockedInstance{}}
	for _, c := range changes {
		li := LockedInstance{ID: c.ID.String(), Workflow: SelectWorkflow(c.Previous, c.Next), ToSequence: c.Next.Sequence}
		if li.Workflow == "" {
			li.Workflow = WorkflowUpdate // locked again at the same content: a retry
		}
		if c.Previous != nil {
			li.FromSequence = c.Previous.Sequence
			if !c.Previous.Tombstone() {
				li.From = refOfInstance(c.Previous)
			}
		}
		if !c.Next.Tombstone() {
			li.To = refOfInstance(c.Next)
		}
		lc.Deployments = append(lc.Deployments, li)
	}
	return lc
}

// Deletions is the state of the deletion safety rail: a plan deleting more
// deployments than Threshold is refused unless Allowed covers them.
type Deletions struct {
	Count     int  `json:"count"`
	Threshold int  `json:"threshold"`
	Allowed   int  `json:"allowed"`
	Refused   bool `json:"refused"`
}

// Deployment is the plan of one deployment.
type Deployment struct {
	// ID is "cluster/environment/name".
	ID          string `json:"id"`
	Cluster     string `json:"cluster"`
	Environment string `json:"environment"`
	Name        string `json:"name"`
	// Namespace is the deployment's namespace (of the new instance, or the
	// old one for a deletion).
	Namespace string   `json:"namespace"`
	Workflow  Workflow `json:"workflow"`
	// FromSequence is the sequence of the locked instance (0: none);
	// ToSequence the one locking this plan assigns.
	FromSequence int64 `json:"fromSequence"`
	ToSequence   int64 `json:"toSequence"`
	// From and To describe the two instances; From is absent for a
	// create, To for a delete.
	From *InstanceRef `json:"from,omitempty"`
	To   *InstanceRef `json:"to,omitempty"`
	// Causes say which layer's change makes the deployment redeploy,
	// sorted by kind and file.
	Causes []Cause `json:"causes"`
	// Changes is the path-level difference of context and values, sorted
	// by path.
	Changes []Change `json:"changes"`
	// Actions are the steps the workflow runs, in order.
	Actions []Action `json:"actions"`
	// Manifests is the rendered-manifest difference.
	Manifests ManifestDiff `json:"manifests"`
	// After are the instances (ID@SEQ) that must have run, and their
	// deployments be Ready, before this one's task starts: the waves of
	// the rollout (a new deployment waits for what it connects to).
	After []string `json:"after,omitempty"`
	// Internal marks a deployment Styrmin adds itself (the service it
	// provides: "ingress", a cluster's or an environment's ingress
	// controller); absent for applications.
	Internal string `json:"internal,omitempty"`
	// Wave is the deployment's place in a health-gated fan-out (nil:
	// none); Plan.Waves lists the waves.
	Wave *WaveRef `json:"wave,omitempty"`
	// Restoring is the restore in progress in the cluster that the
	// deployment's change waits for, as the caller read it (plan
	// --restores); "" when none or not read. The change is applied after
	// the restore succeeds.
	Restoring string `json:"restoring,omitempty"`

	rawPaths [][]pathSegment // the unformatted path of each change
	// otherAfter is After less the wave before, which Wave says.
	otherAfter []string
}

// WaveRef places a deployment in wave Wave of Waves of its cluster's
// fan-out (Group: "" for the cluster's chain, else the environment with
// a rollout of its own). Pause is waited after the wave before is Ready.
type WaveRef struct {
	Wave  int    `json:"wave"`
	Waves int    `json:"waves"`
	Group string `json:"group,omitempty"`
	Pause string `json:"pause,omitempty"`
}

// Wave is one wave of a fan-out: the deployments that start together
// once every deployment of the wave before succeeded and is Ready.
type Wave struct {
	Cluster     string   `json:"cluster"`
	Group       string   `json:"group,omitempty"`
	Wave        int      `json:"wave"`
	Waves       int      `json:"waves"`
	Pause       string   `json:"pause,omitempty"`
	Deployments []string `json:"deployments"`
}

// InstanceRef identifies one instance.
type InstanceRef struct {
	Sequence      int64  `json:"sequence"`
	Digest        string `json:"digest"`
	Driver        string `json:"driver"`
	DriverVersion string `json:"driverVersion"`
	DriverDigest  string `json:"driverDigest"`
	AppVersion    string `json:"appVersion"`
}

// CauseKind is the layer whose change makes a deployment redeploy.
type CauseKind string

// The causes.
const (
	// CauseDeployment: the deployment's own file (added, changed, removed).
	CauseDeployment CauseKind = "deployment"
	// CauseEnvironment: an environment config fan-out.
	CauseEnvironment CauseKind = "environment"
	// CauseCluster: a cluster config fan-out.
	CauseCluster CauseKind = "cluster"
	// CauseDriver: the driver changed (another version or content).
	CauseDriver CauseKind = "driver"
	// CauseService: a service of a sibling deployment it connects to
	// changed.
	CauseService CauseKind = "service"
)

// causeRank orders cause kinds from the most to the least specific.
var causeRank = map[CauseKind]int{CauseDeployment: 0, CauseDriver: 1, CauseService: 2, CauseEnvironment: 3, CauseCluster: 4}

// Cause is one reason a deployment redeploys.
type Cause struct {
	Kind CauseKind `json:"kind"`
	// File is the file whose change is the cause (for a driver, the
	// driver's source folder; for a service, the sibling's ID).
	File string `json:"file,omitempty"`
	// Paths are the settings paths that changed there, sorted.
	Paths []string `json:"paths,omitempty"`
}

// ChangeOp says how a path differs.
type ChangeOp string

// The change operations.
const (
	OpAdded   ChangeOp = "added"
	OpRemoved ChangeOp = "removed"
	OpChanged ChangeOp = "changed"
)

// Masked is what a plan shows instead of a value of a parameter marked
// sensitive.
const Masked = "(sensitive)"

// MaskedChanged is what the new side of a plan shows instead of a
// sensitive value that replaced another one.
const MaskedChanged = "(sensitive, changed)"

// Change is one path that differs between the two instances.
type Change struct {
	// Path is "context.<...>" or "values.<...>"; map keys that are not
	// identifiers are written ["key"], list indices [i].
	Path string   `json:"path"`
	Op   ChangeOp `json:"op"`
	// Old and New are the JSON values (absent when added or removed).
	Old any `json:"old,omitempty"`
	New any `json:"new,omitempty"`
	// Sensitive marks a masked value: Old and New hold Masked instead.
	Sensitive bool `json:"sensitive,omitempty"`
	// SecretRef marks a secret parameter: the values are references
	// ({name, key}) to a Kubernetes Secret, never its content.
	SecretRef bool `json:"secretRef,omitempty"`
}

// Action is one step the workflow runs.
type Action struct {
	// Name identifies the step as the task will ("upgrade/pre/1:stopComponents").
	Name string `json:"name"`
	// Hook is setup or upgrade; "" for update and delete.
	Hook string `json:"hook,omitempty"`
	// Mode is pre, core or post.
	Mode   string `json:"mode"`
	Action string `json:"action"`
	// Description says in words what the step does.
	Description string            `json:"description"`
	Components  []string          `json:"components,omitempty"`
	Component   string            `json:"component,omitempty"`
	Job         string            `json:"job,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Timeout     string            `json:"timeout,omitempty"`
	Args        map[string]string `json:"args,omitempty"`
}

// ManifestDiff is the difference of the rendered manifests.
type ManifestDiff struct {
	Added     int `json:"added"`
	Removed   int `json:"removed"`
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
	// Objects are the added, removed and changed objects, sorted by kind,
	// namespace, name and API version.
	Objects []ObjectDiff `json:"objects"`
	// Error is set when a side could not be rendered (for example its
	// driver version is not available); the counts are then empty.
	Error string `json:"error,omitempty"`
}

// ObjectDiff is one rendered object that differs.
type ObjectDiff struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Name       string   `json:"name"`
	Component  string   `json:"component,omitempty"`
	Op         ChangeOp `json:"op"`
	// Fields counts the leaf fields that differ (for added and removed
	// objects, the object's leaf fields).
	Fields int `json:"fields"`
	// Diff is a unified diff of the object's YAML.
	Diff string `json:"diff"`
}

// Ref is "Kind/namespace/name" ("Kind/name" for cluster-scoped objects).
func (o ObjectDiff) Ref() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Summary is the one-line summary of the object's change, for example
// "Deployment/ns/name changed: 2 fields".
func (o ObjectDiff) Summary() string {
	return fmt.Sprintf("%s %s: %s", o.Ref(), o.Op, plural(o.Fields, "field"))
}

// EnvironmentImpact is the blast radius of the plan in one environment.
type EnvironmentImpact struct {
	Cluster     string `json:"cluster"`
	Environment string `json:"environment"`
	// Deployments counts the environment's deployments (present at the
	// head or deleted by this plan).
	Deployments int `json:"deployments"`
	// Redeploy counts those that get a new instance.
	Redeploy int `json:"redeploy"`
	// ByWorkflow counts the redeployments by workflow.
	ByWorkflow map[Workflow]int `json:"byWorkflow"`
	// LeftOut counts deployments reached by a changed value that override
	// it.
	LeftOut int `json:"leftOut"`
}

// String is the blast radius sentence: "environment local/dev: 37 of 40
// deployments redeploy".
func (e EnvironmentImpact) String() string {
	return fmt.Sprintf("environment %s/%s: %d of %s redeploy", e.Cluster, e.Environment, e.Redeploy, plural(e.Deployments, "deployment"))
}

// LeftOut is a deployment that a changed cluster or environment value
// reaches but that keeps its own value.
type LeftOut struct {
	ID string `json:"id"`
	// Path is the settings path that changed ("config.logLevel").
	Path string `json:"path"`
	// ChangedIn is the file whose change did not reach the deployment.
	ChangedIn string `json:"changedIn"`
	// OverriddenBy is the layer and file that set the value the
	// deployment keeps.
	OverriddenBy Origin `json:"overriddenBy"`
}

// Held is a deployment on hold.
type Held struct {
	ID string `json:"id"`
	// Reason is the hold's text.
	Reason string `json:"reason"`
	// Waiting is true when the configuration gives it an instance its lock
	// does not have yet (a new deployment, or a change): it is applied when
	// the hold is lifted.
	Waiting bool `json:"waiting"`
}

// Origin is a layer and the file of that layer.
type Origin struct {
	Layer string `json:"layer"`
	File  string `json:"file"`
}

// DeploymentError is a deployment that failed to resolve.
type DeploymentError struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// splitID splits "cluster/environment/name".
func splitID(id string) (cluster, env, name string) {
	parts := strings.SplitN(id, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return parts[0], parts[1], parts[2]
}
