// Package install owns putting Styrmin on a cluster, telling whether it
// is there, and taking it off: Render builds the objects from config's
// embedded manifests (CRDs stamped with the version, the agent's
// namespace, RBAC, the admission policy and the agent's Deployment, with
// the cluster, repository, branch, folder, credentials Secret and image
// set in the Deployment), Export writes them as YAML, Inspect and
// PlanUpgrade read an installed agent and keep what an upgrade must not
// change (its image, settings and hand-added arguments) and refuse a
// downgrade, Apply applies them with server-side apply (CRDs first,
// established before the rest, never dropping a version the cluster still
// stores), Check reports prerequisites and the installation one finding at
// a time (a CRD at another schema than this version's included), Agent
// reads the installed agent's version, and Uninstall removes Styrmin and
// leaves the applications running as plain Helm releases.
//
// It edits the manifests as objects, never as text, and keeps no state:
// every call takes the cluster's *rest.Config.
package install
