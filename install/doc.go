// Package install owns putting Styrmin on a cluster and telling whether it
// is there: Render builds the objects from config's embedded manifests
// (CRDs, the agent's namespace, RBAC, the admission policy and the agent's
// Deployment, with the cluster, repository, branch, folder, credentials
// Secret and image set in the Deployment), Export writes them as YAML,
// Apply applies them with server-side apply (CRDs first, established
// before the rest, never dropping a version the cluster still stores),
// Check reports prerequisites and the installation one finding at a time,
// and Agent reads the installed agent's version.
//
// It edits the manifests as objects, never as text, and keeps no state:
// every call takes the cluster's *rest.Config.
package install
