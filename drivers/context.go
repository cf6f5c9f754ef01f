package drivers

// Context is the resolved context (GlobalContext) a driver's values, services
// and patches are computed from. The resolver builds it; the JSON field names
// are the names CUE sees under `context` in a driver spec.
type Context struct {
	Cluster     ClusterContext     `json:"cluster"`
	Environment EnvironmentContext `json:"environment"`
	Deployment  DeploymentContext  `json:"deployment"`
	Parameters  map[string]any     `json:"parameters"`
	// Services maps a sibling deployment name (same environment) to its
	// services by service name.
	Services map[string]map[string]Endpoint `json:"services"`
}

// ClusterContext is the cluster layer of the context.
type ClusterContext struct {
	Name             string `json:"name"`
	Domain           string `json:"domain"`
	IngressClass     string `json:"ingressClass"`
	DedicatedIngress bool   `json:"dedicatedIngress"`
	// StorageClasses maps a role (for example "default", "fast") to a
	// storage class name.
	StorageClasses map[string]string `json:"storageClasses,omitempty"`
	// Config holds free-form extra cluster values.
	Config map[string]any `json:"config,omitempty"`
}

// EnvironmentContext is the environment layer of the context.
type EnvironmentContext struct {
	Name string `json:"name"`
	// Namespace is the namespace prefix of the environment's deployments.
	Namespace      string         `json:"namespace"`
	BackupLocation string         `json:"backupLocation,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	// ClonedFrom is what the environment was cloned from (nil unless it
	// is a clone): the agent reads it to restore a clone's deployments
	// from the source's backup in the setup hook's restoreBackup step.
	ClonedFrom *CloneSource `json:"clonedFrom,omitempty"`
	// Policy is what the environment's deployments may do (nil: the
	// default policy, see Policy), enforced at lock time and again by the
	// agent before it applies.
	Policy *Policy `json:"policy,omitempty"`
}

// CloneSource is where a cloned environment came from, as `styrminctl
// env clone` recorded it in environment.cue's clonedFrom.
type CloneSource struct {
	Cluster     string `json:"cluster,omitempty"`
	Environment string `json:"environment,omitempty"`
	// Commit is the commit of the source's configuration the clone copied.
	Commit string `json:"commit,omitempty"`
	// Backup is the ID of the source's backup the clone restores ("":
	// none, the clone starts empty).
	Backup string `json:"backup,omitempty"`
	// Location is the source's backupLocation the backup is read from.
	Location string `json:"location,omitempty"`
	// Deployments are the deployments the clone copied, which the backup
	// holds: only they restore it. Written with Backup; empty in a clone
	// written before the list (every deployment restores). A context
	// never carries it: a deployment's context has a clone source only
	// when the deployment restores it.
	Deployments []string `json:"deployments,omitempty"`
}

// DeploymentContext identifies the deployment being rendered.
type DeploymentContext struct {
	Name          string `json:"name"`
	Namespace     string `json:"namespace"`
	AppVersion    string `json:"appVersion"`
	Driver        string `json:"driver"`
	DriverVersion string `json:"driverVersion"`
}

// Endpoint is how other deployments reach one service of a deployment.
type Endpoint struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	URL      string `json:"url"`
}

// SecretRef names a key of a Kubernetes Secret in the deployment's
// namespace. A parameter of secret type is only ever this reference, never
// the secret's value.
type SecretRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}
