// Package config holds the Kubernetes manifests of Styrmin: the CRDs
// generated from operator/api/v1alpha1, the agent's RBAC, its Deployment
// and Service, and examples of the Secrets it reads. They are embedded so
// tests and the agent install exactly the files in the repository.
// charts/styrmin-agent installs the same agent with Helm.
package config

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
)

//go:embed crd/*.yaml rbac/*.yaml agent/*.yaml tenancy/*.yaml admission/*.yaml
var files embed.FS

// CRDs returns the CustomResourceDefinitions of the styrmin.io API, one
// YAML document each, sorted by file name.
func CRDs() [][]byte {
	return mustReadAll(files, "crd")
}

// Namespace returns the agent's Namespace.
func Namespace() []byte {
	return mustRead(files, "agent/namespace.yaml")
}

// RBAC returns the agent's ServiceAccount, its least-privilege ClusterRole,
// the leader-election Role, the Role reading its own Secrets and their
// bindings, sorted by file name.
func RBAC() [][]byte {
	return mustReadAll(files, "rbac")
}

// TenancyExample returns the example of an environment applied as its own
// service account: the namespace, the account, its Role and RoleBinding,
// and the Role that lets the agent impersonate it (all in dev-web).
func TenancyExample() []byte {
	return mustRead(files, "tenancy/example-environment.yaml")
}

// AdmissionPolicy returns the ValidatingAdmissionPolicy and its binding
// that let only the agent's service account create or change
// StyrminTasks and the styrmin.io/ annotations of StyrminDeployments.
func AdmissionPolicy() []byte {
	return mustRead(files, "admission/styrmin-tasks.yaml")
}

// AgentDeployment returns the agent's Deployment.
func AgentDeployment() []byte {
	return mustRead(files, "agent/deployment.yaml")
}

// Service returns the agent's Service: its metrics and webhook ports.
func Service() []byte {
	return mustRead(files, "agent/service.yaml")
}

// SecretExamples returns the examples of the Secrets the agent reads, the
// repository's credentials and the webhook's shared secret, with
// placeholders for their values. They are not in Manifests: applied, a
// placeholder would replace the real value.
func SecretExamples() [][]byte {
	return [][]byte{
		mustRead(files, "agent/repository-secret.example.yaml"),
		mustRead(files, "agent/webhook-secret.example.yaml"),
	}
}

// Manifests returns every manifest in the order to apply them: CRDs, the
// namespace, RBAC, the agent and its Service.
func Manifests() [][]byte {
	out := CRDs()
	out = append(out, Namespace())
	out = append(out, RBAC()...)
	return append(out, AgentDeployment(), Service())
}

// AgentImage is the agent's image without its tag, as the Deployment and
// kustomization.yaml's `images:` name it.
const AgentImage = "ghcr.io/styrmin/styrmin-agent"

// AgentImageTag is the released tag the Deployment and kustomization.yaml
// name (a test keeps the three equal).
const AgentImageTag = "v0.1.0"

// The agent's identity in the manifests.
const (
	AgentNamespace      = "styrmin-system"
	AgentServiceAccount = "styrmin-agent"
)

func mustReadAll(fsys fs.FS, dir string) [][]byte {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		// The files are embedded at build time: a failure is a build defect.
		panic(fmt.Sprintf("config: reading embedded %s: %v", dir, err))
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	out := make([][]byte, 0, len(names))
	for _, n := range names {
		out = append(out, mustRead(fsys, path.Join(dir, n)))
	}
	return out
}

func mustRead(fsys fs.FS, name string) []byte {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		panic(fmt.Sprintf("config: reading embedded %s: %v", name, err))
	}
	return b
}
