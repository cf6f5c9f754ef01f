package resolver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/styrmin/styrmin/drivers"
)

// APIVersion is the version of the lockfile and instance format.
const APIVersion = "styrmin.io/v1alpha1"

// Kind values of a lockfile.
const (
	KindInstance  = "Instance"
	KindTombstone = "Tombstone"
)

// ID names one deployment: cluster/environment/name.
type ID struct {
	Cluster     string `json:"cluster"`
	Environment string `json:"environment"`
	Name        string `json:"name"`
}

// String returns "cluster/environment/name", the key used in commit trailers.
func (id ID) String() string { return id.Cluster + "/" + id.Environment + "/" + id.Name }

// LockPath is the lockfile's path in the repository.
func (id ID) LockPath() string {
	return ClusterLocksDir(id.Cluster) + "/" + id.Environment + "/" + id.Name + ".lock.yaml"
}

// ParseID parses "cluster/environment/name".
func ParseID(s string) (ID, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return ID{}, fmt.Errorf("deployment %q: expected CLUSTER/ENVIRONMENT/NAME", s)
	}
	return ID{Cluster: parts[0], Environment: parts[1], Name: parts[2]}, nil
}

// DriverRef pins the exact driver an instance was resolved with.
type DriverRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
	// UpgradeRequest is the last upgrade request token (driver.upgrade of
	// the deployment file) the deployment honoured, kept from lock to lock:
	// a token that differs from it is a new request. It does not change
	// what runs, so the digest leaves it out (a StyrminDeployment does not
	// carry it); the lock still writes a new instance when only it changed
	// (see NextInstances), so a request is spent even when no newer driver
	// version exists. Empty, and absent from the lockfile, for deployments
	// that never asked for an upgrade.
	UpgradeRequest string `json:"upgradeRequest,omitempty"`
	// Source is where a driver kept in another git repository was
	// fetched from; nil for a driver of the repository's drivers/ folder
	// (so their lockfiles are unchanged by its existence).
	Source *DriverOrigin `json:"source,omitempty"`
}

// String returns "name@version".
func (d DriverRef) String() string { return d.Name + "@" + d.Version }

// DriverOrigin records where a driver version kept in another git
// repository comes from: the styrmin.cue entry it was listed by and the
// commit its ref resolved to when it was locked. The agent fetches exactly
// that commit, so a ref that moves on later changes nothing an instance
// runs. URL never holds credentials.
type DriverOrigin struct {
	URL    string `json:"url"`
	Ref    string `json:"ref"`
	Path   string `json:"path"`
	Commit string `json:"commit"`
}

// Instance is the immutable, fully resolved snapshot of one deployment at
// one point of its history. Its lockfile is its canonical encoding.
type Instance struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	ID         ID     `json:"deployment"`
	// Sequence is per deployment, +1 for every new instance, never reused.
	Sequence int64 `json:"sequence"`
	// SourceCommit is the commit of the configuration the instance was
	// resolved from ("" for an uncommitted working tree).
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Digest covers everything that determines what runs (driver, app
	// version, context, values), not the sequence or the commit: equal
	// digests mean nothing to do.
	Digest     string           `json:"digest"`
	Driver     DriverRef        `json:"driver,omitzero"`
	AppVersion string           `json:"appVersion,omitempty"`
	Context    *drivers.Context `json:"context,omitempty"`
	Values     map[string]any   `json:"values,omitempty"`
	// After names the instances (ID@SEQ, see ParseAfter) whose tasks must
	// have succeeded and whose deployments must be Ready before this
	// instance's task starts: a new deployment waits for what it connects
	// to. It orders a rollout and does not change what runs, so the
	// digest leaves it out.
	After []string `json:"after,omitempty"`
	// Rollout places the instance in a wave of a health-gated fan-out
	// (styrmin.cue rollout:); nil outside one. Like After it orders, and
	// does not change what runs.
	Rollout *Rollout `json:"rollout,omitempty"`
	// Internal names the cluster service an internal deployment provides
	// (InternalIngress: an ingress controller, see ingressControllers):
	// the resolver adds those deployments itself from cluster.cue's
	// ingress:, and application fan-outs never redeploy them. Empty for
	// applications. The digest covers it (omitted when empty, so
	// applications' digests are unchanged): the StyrminDeployment carries
	// it, and a spec edited to pass an application off as internal (or
	// back) no longer matches its digest.
	Internal string `json:"internal,omitempty"`
	// BackupFirst makes an upgrade of the deployment take a backup (its
	// driver's backup hook) before the upgrade hook's pre steps: the
	// merged backupBeforeUpgrade setting, for a driver that can be backed
	// up. It changes what an upgrade runs, so the digest covers it
	// (omitted when false, so other digests are unchanged).
	BackupFirst bool `json:"backupFirst,omitempty"`
}

// Rollout is an instance's place in a wave of a fan-out: wave Wave of
// Waves, whose task waits (After) until every instance of the wave
// before succeeded and is Ready, and then Pause longer.
type Rollout struct {
	Wave  int    `json:"wave"`
	Waves int    `json:"waves"`
	Pause string `json:"pause,omitempty"`
	// Group names the chain of waves: "" for the cluster's, an
	// environment's name for one with a rollout of its own.
	Group string `json:"group,omitempty"`
}

// AfterRef is "ID@SEQ": the instance of a deployment at a sequence.
func AfterRef(id ID, seq int64) string { return fmt.Sprintf("%s@%d", id, seq) }

// ParseAfter parses an entry of Instance.After.
func ParseAfter(s string) (ID, int64, error) {
	idPart, seqPart, ok := strings.Cut(s, "@")
	if !ok {
		return ID{}, 0, fmt.Errorf("%q: expected CLUSTER/ENVIRONMENT/NAME@SEQUENCE", s)
	}
	id, err := ParseID(idPart)
	if err != nil {
		return ID{}, 0, fmt.Errorf("%q: %w", s, err)
	}
	seq, err := strconv.ParseInt(seqPart, 10, 64)
	if err != nil || seq < 1 {
		return ID{}, 0, fmt.Errorf("%q: expected a positive sequence after @", s)
	}
	return id, seq, nil
}

// Tombstone reports whether the instance records a deleted deployment.
func (in *Instance) Tombstone() bool { return in.Kind == KindTombstone }

// digestInput is what the digest covers, in a fixed shape.
type digestInput struct {
	Kind        string           `json:"kind"`
	ID          ID               `json:"deployment"`
	Driver      DriverRef        `json:"driver"`
	AppVersion  string           `json:"appVersion"`
	Context     *drivers.Context `json:"context"`
	Values      map[string]any   `json:"values"`
	Internal    string           `json:"internal,omitempty"`
	BackupFirst bool             `json:"backupFirst,omitempty"`
	// DriverRepo is where the agent fetches an external driver from. The
	// ref and the commit are left out: the driver's digest pins its
	// content, so a ref that moves on with the same content is no change.
	DriverRepo *driverRepo `json:"driverRepo,omitempty"`
}

// driverRepo is the part of a DriverOrigin the digest covers.
type driverRepo struct {
	URL  string `json:"url"`
	Path string `json:"path"`
}

// ComputeDigest returns the digest of what determines what runs. JSON
// encoding sorts map keys, so the result is canonical.
func (in *Instance) ComputeDigest() (string, error) {
	drv := in.Driver
	drv.UpgradeRequest = "" // a record of the request, not of what runs
	input := digestInput{
		Kind: in.Kind, ID: in.ID, Driver: drv, AppVersion: in.AppVersion,
		Context: in.Context, Values: in.Values, Internal: in.Internal,
		BackupFirst: in.BackupFirst,
	}
	if o := in.Driver.Source; o != nil {
		input.Driver.Source = nil
		input.DriverRepo = &driverRepo{URL: o.URL, Path: o.Path}
	}
	b, err := json.Marshal(input)
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", in.ID, err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
