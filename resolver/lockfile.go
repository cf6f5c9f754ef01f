package resolver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// lockHeader is the first line of every lockfile.
const lockHeader = "# Written by styrmin lock. Do not edit: the checksum detects hand edits.\n"

// maxLockSize bounds what DecodeLock accepts.
const maxLockSize = 4 << 20

// lockDocument is the on-disk shape: the instance plus a checksum of its
// canonical encoding.
type lockDocument struct {
	Instance
	Checksum string `json:"checksum"`
}

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
	return yaml.JSONToYAML(j)
}

func checksumOf(in *Instance) (string, error) {
	b, err := canonical(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// EncodeLock returns the canonical lockfile of an instance: same instance,
// same bytes.
func EncodeLock(in *Instance) ([]byte, error) {
	sum, err := checksumOf(in)
	if err != nil {
		return nil, fmt.Errorf("encode lock %s: %w", in.ID, err)
	}
	b, err := canonical(lockDocument{Instance: *in, Checksum: sum})
	if err != nil {
		return nil, fmt.Errorf("encode lock %s: %w", in.ID, err)
	}
	return append([]byte(lockHeader), b...), nil
}

// DecodeLock parses a lockfile and verifies its checksum. path is used in
// errors only.
func DecodeLock(path string, data []byte) (*Instance, error) {
	if len(data) > maxLockSize {
		return nil, fmt.Errorf("%s: lockfile is %d bytes, more than the %d allowed", path, len(data), maxLockSize)
	}
	var doc lockDocument
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a valid lockfile: %w", path, err)
	}
	in := doc.Instance
	if in.APIVersion != APIVersion {
		return nil, fmt.Errorf("%s: field apiVersion: expected %q, got %q", path, APIVersion, in.APIVersion)
	}
	if in.Kind != KindInstance && in.Kind != KindTombstone {
		return nil, fmt.Errorf("%s: field kind: expected %q or %q, got %q", path, KindInstance, KindTombstone, in.Kind)
	}
	if in.Sequence < 1 {
		return nil, fmt.Errorf("%s: field sequence: expected a positive integer, got %d", path, in.Sequence)
	}
	if doc.Checksum == "" {
		return nil, fmt.Errorf("%s: field checksum: missing", path)
	}
	sum, err := checksumOf(&in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sum != doc.Checksum {
		return nil, &HandEditError{Path: path, Want: doc.Checksum, Computed: sum}
	}
	if want := in.ID.LockPath(); path != "" && !bytes.HasSuffix([]byte(path), []byte(want)) {
		return nil, fmt.Errorf("%s: field deployment: the lockfile names %s, whose lockfile is %s", path, in.ID, want)
	}
	if in.Internal != "" && in.Internal != InternalIngress {
		return nil, fmt.Errorf("%s: field internal: expected %q or none, got %q", path, InternalIngress, in.Internal)
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
	return &in, nil
}
