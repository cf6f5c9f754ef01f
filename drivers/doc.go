// Package drivers owns application drivers: the driver spec and its CUE
// schema, loading a driver version from a folder (fs.FS), the version
// catalog and the selection rule, and rendering a deployment's manifests
// from a resolved context (Helm engine, then Kustomize-style post-render
// patches). It knows nothing about git remotes, clusters or tasks.
//
// # A driver version folder
//
//	driver.cue        the spec (or driver.yaml: same schema, loaded through CUE)
//	chart/            a Helm chart (the folder the spec's `chart` names; default "chart")
//
// Only charts inside the folder are supported: charts fetched from remote
// repositories (https, oci) are not, and a chart path leaving the folder,
// through ".." or a symbolic link, is refused. Symbolic links are followed
// only to regular files inside the folder. Files over LoadOptions.MaxFileSize
// (1 MiB by default) and folders over MaxTotalSize (16 MiB) are refused.
// Subcharts in chart/charts are rendered unconditionally (their conditions
// and tags are not evaluated).
//
// # The spec
//
// The spec is unified with one compiled schema, #Driver (schema.cue), so
// unknown fields, wrong types and bad values are reported as
// file:line:column: field: message. Example:
//
//	name:        "webapp"                 // lower-case DNS label
//	version:     "1.1.0"                  // semver of the driver itself
//	description: "…"
//	appVersions: ">=1.0.0 <2.0.0"         // supported application versions
//	chart:       "chart"                  // optional, the default
//	kubeVersion: "v1.37.0"                // optional: declared to the chart
//	provides:    ["ingressClass"]         // optional: an ingress controller (cluster.cue ingress:)
//
//	parameters: {
//		// Number of pods. (doc comments become the parameter docs)
//		replicas: *2 | int & >=1 & <=10
//		// Reference to the database password; never the password itself.
//		dbPassword: #SecretRef
//		apiToken?:  string @styrmin(sensitive)   // optional; a string, carried as a placeholder
//	}
//	components: server: workloads: [{kind: "Deployment", name: "\(context.deployment.name)-server"}]
//	components: db: workloads: [{kind: "StatefulSet", matchLabels: {"app.kubernetes.io/component": "db"}}]
//	services: http: {component: "server", port: 80, protocol: "http", ingress: true,
//		host: "\(context.deployment.name)-server.\(context.deployment.namespace).svc"}
//	values: {replicaCount: context.parameters.replicas, image: tag: context.deployment.appVersion}
//	patches: [{target: {kind: "Deployment"}, patch: spec: template: metadata: annotations: a: context.cluster.name}]
//	actions: upgrade: {
//		pre:  [{action: "stopComponents", components: ["worker"]},
//		       {action: "runJob", component: "server", job: "migrate", command: ["app", "migrate"], timeout: "5m"}]
//		core: [{action: "upgradeDeploymentVersion"}]
//		post: [{action: "startComponents", components: ["worker"]},
//		       {action: "waitReady", components: ["server", "worker"], timeout: "5m"}]
//	}
//
// `context` is the resolved context (see Context; its JSON names are the
// names CUE sees): context.cluster, .environment, .deployment, .parameters
// (the applied parameters) and .services (sibling deployment → service →
// Endpoint). A spec may use CUE's standard library (import "strings").
//
//   - parameters: the CUE schema of what a deployment may set. #SecretRef
//     ({name, key} of a Secret in the deployment's namespace) is the only
//     way to pass a secret: its value never appears in an instance.
//   - components: named parts of the application, each a list of workload
//     selectors (a workload kind with a name, which may use the context,
//     and/or matchLabels). The workload kinds are the apps/v1 kinds the
//     agent can wait for (WorkloadKinds: Deployment, StatefulSet,
//     DaemonSet); stopComponents and startComponents may only name
//     components whose kinds scale (CanScale: not DaemonSet). Kinds()
//     is the one table of the kinds the engine treats specially,
//     cluster-scoped ones included. Rendered objects are tagged with their
//     component: the label styrmin.io/component on an object wins;
//     otherwise a workload selected by a component belongs to it, and a
//     Service to the component of the workloads its selector picks; other
//     objects are shared (component ""). Every component must match a
//     workload.
//   - services: what other deployments of the environment learn about this
//     one (Endpoints). component, port, protocol (default "tcp") and
//     ingress must not depend on the context; host defaults to
//     <deployment>.<namespace>.svc, and the URL is protocol://host:port.
//   - values: the chart values, computed from the context.
//   - patches: applied in order after the chart is rendered. `patch` is a
//     strategic-merge patch (an object, or YAML text); without a target it
//     patches the object its apiVersion, kind and metadata.name name, with a
//     target ({group, version, kind, name, namespace, labelSelector}) every
//     object the target selects, as Kustomize does. `jsonPatch` is a JSON
//     6902 patch (a list of operations, or their text) and needs a target.
//     A patch that selects nothing is an error. Built-in kinds are merged
//     with Kubernetes' strategic merge (apimachinery): the same merge keys
//     and directives Kustomize honours, except that list elements a patch
//     adds are appended (Kustomize prepends them); other kinds go through
//     kyaml's merge, as in Kustomize. No Kustomize build runs: it costs
//     milliseconds per deployment, and every deployment is rendered on
//     every plan.
//   - actions: for the hooks setup (create) and upgrade, the modes pre, core
//     and post, each an ordered list of steps: stopComponents,
//     startComponents, waitReady (components), exec (component, command),
//     runJob (component whose pod template to run, job name, command) and
//     upgradeDeploymentVersion (apply the new version; core only, exactly
//     once). Each step may set a timeout ("5m") and free-form args. A hook
//     without core steps gets the default core step upgradeDeploymentVersion.
//     An update (configuration only) runs just the core step. Steps are
//     declarations here; the agent executes them.
//
// # Loading
//
// Load reads a folder once: the content digest ("sha256:" over sorted
// paths and bytes, the same on every machine), the spec compiled against
// the schema, the chart. When every parameter has a default (secret
// references get a sample one), Load renders the driver once with a sample
// context (SampleContext), so template errors, components without
// workloads and patches that select nothing are found at load time.
// LoadCatalog loads dir/<name>/<version>/ folders; the folder names must
// match the spec's name and version.
//
// # Selection
//
// Catalog.Select: a pinned version wins (it must be loaded and its range
// must contain the application version). Otherwise the locked driver
// version is kept while the application version equals the locked one
// (unless Upgrade is set, which the resolver does for a new upgrade
// request); a locked version no longer loaded is then a
// *LockedNotLoadedError, not another version. Otherwise
// the newest loaded version whose range contains the application version.
// Prerelease application versions follow Masterminds semver: "1.5.0-rc.1"
// matches only a range that itself names a prerelease (">=1.5.0-0 <2.0.0"),
// so a driver opts in to prereleases explicitly. No match is a
// *NoMatchError listing every version tried with its range.
//
// # Rendering
//
// Values evaluates the spec's values for a context; Render runs the Helm 4
// engine on the chart (release name = deployment name, namespace =
// deployment namespace, revision 1, install; the declared Kubernetes
// version, by default DefaultKubeVersion, and API versions; no cluster, so
// `lookup` returns nothing), parses the documents as Kubernetes clients do
// (go-yaml v2 scalars, as sigs.k8s.io/yaml), sets the deployment's
// namespace on namespaced objects that have none, applies the patches,
// tags components and sorts the objects (Helm's install order of kinds,
// then group, namespace, name). Each object is written as canonical YAML
// (sorted keys, two-space indentation, literal blocks for multi-line
// strings, quotes only where a YAML 1.1 or 1.2 parser could misread a
// plain string); the same input gives the same bytes.
//
// Helm hooks are not run. After the patches (as Helm 4 sorts hooks after
// its post-renderer), an object whose helm.sh/hook annotation lists only
// `helm test`'s hooks (test, or Helm 2's test-success and test-failure),
// or names an event Helm 4 does not know (crd-install, an empty value), is
// left out, as Helm's install leaves it out: the test Pod of a `helm
// create` chart. Any other hook (pre-install, post-upgrade, …, several)
// refuses the render with a *SpecError at its
// template naming the driver, the object and the annotation's value
// (HookAdvice): the agent would apply it with everything else and put it
// back after its delete policy removed it. Turn the hook off through the
// chart's values, or do the work in the driver's actions (runJob in
// actions.setup or actions.upgrade); a patch removing the annotation
// makes the object an ordinary one.
//
// Evaluation is cheap by construction: the spec is compiled once, and each
// computation (values, services, components with patches) evaluates a
// projection of the spec holding only the declarations it needs, filled
// with only the parts of the context it refers to. A Driver is safe for
// concurrent use.
package drivers
