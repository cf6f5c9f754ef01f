package resolver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/blockyaml"
)

// lockHeader is the first line of every lockfile.
const lockHeader = "# Written by styrmin lock. Do not edit: the checksum detects hand edits.\n"

// maxLockSize bounds what DecodeLock accepts, and so what EncodeLock
// writes.
const maxLockSize = 4 << 20

// MaxSequence is the highest sequence an instance may have: 2^53-1, the
// largest integer every JSON reader (a browser's too) holds exactly. A
// number above it comes only from a hand edit or a hostile trailer, and
// would overflow on its way up.
const MaxSequence = 1<<53 - 1

// lockDocument is the on-disk shape: the instance plus a checksum of its
// canonical encoding.
type lockDocument struct {
	Instance
	Checksum string `json:"checksum"`
}

// decodeLockDocument reads a lockfile's YAML into doc as
// sigs.k8s.io/yaml's UnmarshalStrict does. With fast, a lockfile inside
// the block YAML the lock writes (every lockfile it wrote, in practice)
// is read without the general YAML parser and without a JSON form
// (lockSchema), most of a lockfile's decoding time; anything else, or
// anything the schema declines, is read by UnmarshalStrict, whose error
// is the one reported.
func decodeLockDocument(data []byte, doc *lockDocument, fast bool) error {
	if fast {
		if lockSchema.Unmarshal(data, doc) {
			return nil
		}
		*doc = lockDocument{}
	}
	return yaml.UnmarshalStrict(data, doc)
}

// lockSchema fills a lockDocument from the block YAML of a lockfile.
var lockSchema = blockyaml.SchemaOf(&lockDocument{})

// HandEditError reports a lockfile whose content no longer matches its
// checksum: someone edited it by hand.
type HandEditError struct {
	Path     string
	Want     string
	Computed string
}

func (e *HandEditError) Error() string {
	return fmt.Sprintf("%s: lockfile was edited by hand (checksum %s, content hashes to %s); lockfiles are written only by `styrminctl lock`: restore it from git and run lock again", e.Path, e.Want, e.Computed)
}

// canonical encodes v as YAML with sorted keys. JSON first, so map keys sort
// and numbers have one spelling.
func canonical(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonToYAML(j)
}

func checksumOf(in *Instance) (string, error) {
	b, err := canonical(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalChecksum reports whether data is a lockfile exactly as
// EncodeLock writes it for checksum: the header, then the instance's
// canonical encoding with the checksum line among its sorted top-level
// keys. Then the bytes without that line are what the checksum covers,
// and hashing them spares re-encoding the instance (most of a lockfile's
// decoding time). Anything else (a file reformatted by hand, say) takes
// the full check.
func canonicalChecksum(data []byte, checksum string) bool {
	body, ok := bytes.CutPrefix(data, []byte(lockHeader))
	if !ok {
		return false
	}
	line := []byte("\nchecksum: " + checksum + "\n")
	i := bytes.Index(body, line)
	if i < 0 {
		return false
	}
	h := sha256.New()
	h.Write(body[:i+1])
	h.Write(body[i+len(line):])
	return "sha256:"+hex.EncodeToString(h.Sum(nil)) == checksum
}

// EncodeLock returns the canonical lockfile of an instance: same instance,
// same bytes.
func EncodeLock(in *Instance) ([]byte, error) {
	if in.Sequence < 1 || in.Sequence > MaxSequence {
		return nil, fmt.Errorf("encode lock %s: sequence %d: expected an integer from 1 to %d", in.ID, in.Sequence, int64(MaxSequence))
	}
	b, err := canonical(in)
	if err != nil {
		return nil, fmt.Errorf("encode lock %s: %w", in.ID, err)
	}
	h := sha256.Sum256(b)
	line := "checksum: sha256:" + hex.EncodeToString(h[:]) + "\n"
	// The document is the instance with its checksum among the sorted
	// top-level keys: insert the line rather than encode it all again.
	at := checksumPosition(b)
	out := make([]byte, 0, len(lockHeader)+len(b)+len(line))
	out = append(out, lockHeader...)
	out = append(out, b[:at]...)
	out = append(out, line...)
	out = append(out, b[at:]...)
	// Written, it could never be read again (by the next lock, the plan
	// or the agent), and reverting the configuration would not help: the
	// lockfiles are read before anything resolves.
	if len(out) > maxLockSize {
		return nil, fmt.Errorf("%s: the lockfile of %s would be %d bytes, more than the %d a lockfile may have: its context and values are too large (large parameters or configuration reach both)",
			in.ID.LockPath(), in.ID, len(out), maxLockSize)
	}
	return out, nil
}

// keysBeforeChecksum are the top-level keys of an instance that sort
// before "checksum" (TestEncodeLockIsTheCanonicalDocument keeps the list
// true).
var keysBeforeChecksum = []string{"after:", "apiVersion:", "appVersion:", "backupFirst:"}

// checksumPosition is where the checksum line goes in an instance's
// canonical encoding: before the first top-level key after it.
func checksumPosition(b []byte) int {
	for at := 0; at < len(b); {
		line := b[at:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		top := line[0] != ' ' && line[0] != '-'
		if top && !slices.ContainsFunc(keysBeforeChecksum, func(k string) bool { return bytes.HasPrefix(line, []byte(k)) }) {
			return at
		}
		at += len(line)
	}
	return len(b)
}

// ReservedPolicyNamespace is an error naming the first namespace of in's
// recorded policy that is reserved for the cluster or the agent (kube-*,
// default, styrmin-system), nil when none is. The agent applies what a
// lockfile's policy allows, so it refuses such a lockfile; reading one is
// no error (a lock written before the resolver refused such a policy must
// not stop the lock that replaces it).
func ReservedPolicyNamespace(path string, in *Instance) error {
	if c := in.Context; c != nil && c.Environment.Policy != nil {
		for i, ns := range c.Environment.Policy.Namespaces {
			if reserved(ns) {
				return fmt.Errorf("%s: field context.environment.policy.namespaces[%d]: %q is reserved for the cluster or the agent (kube-*, default, styrmin-system): no deployment puts objects there; remove it from the environment's (or cluster's) policy.namespaces and lock again", path, i, ns)
			}
		}
	}
	return nil
}

// DecodeLock parses a lockfile and verifies its checksum. path is used in
// errors only.
func DecodeLock(path string, data []byte) (*Instance, error) {
	if len(data) > maxLockSize {
		return nil, fmt.Errorf("%s: lockfile is %d bytes, more than the %d allowed", path, len(data), maxLockSize)
	}
	var doc lockDocument
	if err := decodeLockDocument(data, &doc, true); err != nil {
		return nil, fmt.Errorf("%s: not a valid lockfile: %w", path, err)
	}
	in := doc.Instance
	if in.APIVersion != APIVersion {
		return nil, fmt.Errorf("%s: field apiVersion: expected %q, got %q", path, APIVersion, in.APIVersion)
	}
	if in.Kind != KindInstance && in.Kind != KindTombstone {
		return nil, fmt.Errorf("%s: field kind: expected %q or %q, got %q", path, KindInstance, KindTombstone, in.Kind)
	}
	if in.Sequence < 1 || in.Sequence > MaxSequence {
		return nil, fmt.Errorf("%s: field sequence: expected an integer from 1 to %d, got %d", path, int64(MaxSequence), in.Sequence)
	}
	if doc.Checksum == "" {
		return nil, fmt.Errorf("%s: field checksum: missing", path)
	}
	if !canonicalChecksum(data, doc.Checksum) {
		sum, err := checksumOf(&in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if sum != doc.Checksum {
			return nil, &HandEditError{Path: path, Want: doc.Checksum, Computed: sum}
		}
	}
	if want := in.ID.LockPath(); path != "" && !bytes.HasSuffix([]byte(path), []byte(want)) {
		return nil, fmt.Errorf("%s: field deployment: the lockfile names %s, whose lockfile is %s", path, in.ID, want)
	}
	// The deployment's names are in the agent's task name and labels: one
	// the API server refuses would fail every sync that meets this
	// lockfile (its position held for good), so a lockfile naming a
	// deployment the resolver never writes (its folders and file are
	// lowercase DNS labels of at most 40 characters, but for the internal
	// ingress controllers' own names) is refused.
	for _, part := range []struct{ field, name, internal string }{
		{"cluster", in.ID.Cluster, ""}, {"environment", in.ID.Environment, ClusterEnvironment}, {"name", in.ID.Name, IngressName},
	} {
		if (!nameRE.MatchString(part.name) || len(part.name) > MaxNameLen) && part.name != part.internal {
			return nil, fmt.Errorf("%s: field deployment.%s: %q: expected a lowercase DNS label of at most %d characters", path, part.field, part.name, MaxNameLen)
		}
	}
	// The agent creates the namespace and the task in it: a name the API
	// server refuses would fail every sync that meets this lockfile, so it
	// is refused here like any other bad field.
	if c := in.Context; c != nil && c.Deployment.Namespace != "" && !isNamespaceName(c.Deployment.Namespace) {
		return nil, fmt.Errorf("%s: field context.deployment.namespace: %q: expected a lowercase DNS label of at most 63 characters", path, c.Deployment.Namespace)
	}
	// The resolver never writes a reserved namespace; a lockfile that
	// holds one was written by hand (its checksum is no signature), and
	// the agent would create the deployment's objects there.
	if c := in.Context; c != nil && reserved(c.Deployment.Namespace) {
		return nil, fmt.Errorf("%s: field context.deployment.namespace: %q is reserved for the cluster or the agent (kube-*, default, styrmin-system): no deployment runs there", path, c.Deployment.Namespace)
	}
	if in.Internal != "" && in.Internal != InternalIngress {
		return nil, fmt.Errorf("%s: field internal: expected %q or none, got %q", path, InternalIngress, in.Internal)
	}
	// An ingress controller runs with the platform's policy, not its
	// environment's (no service account is impersonated): only the
	// controllers' own names may claim it, and they nothing else (a
	// tombstone, which applies nothing, may have been written without it).
	isIngress := in.ID.Name == IngressName
	if (in.Internal == InternalIngress && !isIngress) || (isIngress && in.Internal == "" && !in.Tombstone()) || (in.ID.Environment == ClusterEnvironment && !isIngress) {
		return nil, fmt.Errorf("%s: field internal: %q for deployment %s: expected %q exactly for an ingress controller (deployment name %s) and none for any other deployment",
			path, in.Internal, in.ID, InternalIngress, IngressName)
	}
	for i, a := range in.After {
		id, _, err := ParseAfter(a)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: field after[%d]: %w", path, i, err)
		case id == in.ID:
			return nil, fmt.Errorf("%s: field after[%d]: %q: an instance cannot run after its own deployment", path, i, a)
		case id.Cluster != in.ID.Cluster:
			return nil, fmt.Errorf("%s: field after[%d]: %q: expected a deployment of cluster %s (one agent orders only its own cluster)", path, i, a, in.ID.Cluster)
		}
	}
	if r := in.Rollout; r != nil {
		if r.Waves < 2 || r.Waves > MaxWaves || r.Wave < 1 || r.Wave > r.Waves {
			return nil, fmt.Errorf("%s: field rollout: wave %d of %d: expected a wave from 1 to a number of waves from 2 to %d", path, r.Wave, r.Waves, MaxWaves)
		}
		if d, err := time.ParseDuration(r.Pause); r.Pause != "" && (err != nil || d < 0) {
			return nil, fmt.Errorf("%s: field rollout.pause: %q: expected a duration such as \"30s\"", path, r.Pause)
		}
	}
	return &in, nil
}

// isNamespaceName tells whether name is a namespace name the API server
// accepts: a DNS label (RFC 1123) of at most 63 characters.
func isNamespaceName(name string) bool {
	return len(name) <= 63 && nameRE.MatchString(name)
}
