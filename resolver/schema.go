package resolver

// schemaSource holds the schemas of every file kind of the desired-state
// repository. Definitions are closed: an unknown field is an error naming
// the file and the field.
const schemaSource = `
import "strings"

#Name: =~"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" & strings.MaxRunes(40)

// Settings may be set by any layer; the most specific layer wins.
#Settings: {
	domain?:           string & =~"^[a-z0-9.-]+$"
	ingressClass?: string
	storageClasses?: [string]: string
	// backupBeforeUpgrade takes a backup of a deployment (its driver's
	// backup hook) in the upgrade hook's pre mode, before anything else
	// runs; styrminctl upgrade --backup-first writes it.
	backupBeforeUpgrade?: bool
	// config is free-form data handed to drivers as context.cluster.config.
	config?: {...}
	// parameters set here apply to every deployment below whose driver
	// declares them.
	parameters?: {...}
}

#Repo: {
	// drivers lists driver versions that live in other git repositories.
	drivers?: [...#DriverSource]
	// deletionThreshold is how many deployments one plan may delete
	// before it needs an explicit allowance.
	deletionThreshold?: int & >=0 & <=9223372036854775807
	// limits bound every driver's load, evaluation and render (see
	// docs/driver-limits.md); unset ones keep their defaults.
	limits?: {
		// timeout of one load or render, a Go duration ("30s").
		timeout?: string & !=""
		// memory of one evaluation, in bytes (512Mi).
		memory?: int & >0 & <=9223372036854775807
		// renderedBytes: the most text a chart may render to.
		renderedBytes?: int & >0 & <=9223372036854775807
		// chartBytes: the most the subchart archives may unpack to.
		chartBytes?: int & >0 & <=9223372036854775807
	}
	// rollout splits every cluster's fan-outs into health-gated waves
	// (the loader checks the values, for errors that say what to write).
	rollout?: #RepoRollout
}

#RepoRollout: {
	#Rollout
	// order runs a fan-out environment by environment.
	order?: [...string]
}

#Rollout: {
	// waves: a number of waves, or the share each takes ("10%").
	waves?: number | string
	// gate: what opens the next wave; "ready".
	gate?: string
	// pause after the gate opened, a Go duration.
	pause?: string
}

#DriverSource: {
	name:    #Name
	version: string
	url:     string
	ref:     string
	path:    *"." | string
}

// #Policy is what an environment's deployments may do. Only cluster.cue
// (the cluster's default) and environment.cue set it: a deployment's
// author does not choose the boundary it runs in.
#Policy: {
	// namespaces the deployments may put objects in, besides their own.
	namespaces?: [...#Namespace]
	// kinds the charts may create; empty: every namespaced kind. A
	// cluster-scoped kind must be listed by name; "*" is every namespaced
	// kind.
	kinds?: [...(=~"^[A-Z][A-Za-z0-9]*$" | "*")]
	// serviceAccountName the agent impersonates to apply: a service
	// account in the deployment's namespace, or "namespace/name".
	serviceAccountName?: =~"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
}

#Namespace: =~"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" & strings.MaxRunes(63)

// #Backups are an environment's backup settings (cluster.cue sets the
// default of its environments, field by field). The loader checks the
// values, for errors that say what to write.
#Backups: {
	// secret names a Secret in the agent's namespace with the location's
	// credentials.
	secret?: string & !=""
	// schedule is a cron expression of five fields.
	schedule?: string & !=""
	// keep is how many scheduled backups are kept.
	keep?: int & <=9223372036854775807
}

// #EnvironmentSettings are set by cluster.cue (the default) and
// environment.cue, never by a deployment: an environment is backed up,
// restored and cloned as a whole.
#EnvironmentSettings: {
	// backupLocation is where the environment's backups go:
	// s3://BUCKET[/PREFIX] or pvc://CLAIM[/PATH].
	backupLocation?: string
	backups?:        #Backups
}

#Cluster: {
	#Settings
	#EnvironmentSettings
	// dedicatedIngress gives every environment its own ingress
	// controller (with ingress: set) serving the class
	// "<environment>-<ingressClass>"; an environment may opt in or out.
	dedicatedIngress?: bool
	// defaultIngressClass names the cluster's default IngressClass (the
	// one annotated ingressclass.kubernetes.io/is-default-class "true"):
	// the host check takes an Ingress naming no class as on it, as the
	// API server's admission names it. A fact of the cluster, so no
	// environment sets it, and no driver sees it.
	defaultIngressClass?: string
	// sharedDomain says the cluster serves its domains together with
	// the repository's other clusters giving them to environments of the
	// same name (a blue/green or active/active pair), on purpose: plan
	// and lock then do not warn of their same hosts.
	sharedDomain?: bool
	// ingress names the driver of the cluster's ingress controller: an
	// internal deployment the resolver adds, serving ingressClass (and
	// one per environment with dedicatedIngress).
	ingress?: #Ingress
	// policy is the default of every environment of the cluster; an
	// environment's policy replaces it field by field.
	policy?: #Policy
}

#Ingress: {
	driver:   #Name
	version?: string
	// appVersion of the controller; default: its chart's appVersion.
	appVersion?: string & =~"^v?[0-9]+\\.[0-9]+\\.[0-9]+([-+].*)?$"
	// parameters of the ingress driver; no other layer's reach it.
	parameters?: {...}
}

#Environment: {
	#Settings
	#EnvironmentSettings
	// clonedFrom is written by styrminctl env clone: the environment this
	// one is a copy of, and the backup it restores (if any).
	clonedFrom?: {
		cluster:     #Name
		environment: #Name
		commit:      =~"^[0-9a-f]{7,64}$"
		backup?:     string
		location?:   string
		// deployments are those the clone copied from the backup: a
		// deployment added to the clone later starts empty.
		deployments?: [...#Name]
	}
	// dedicatedIngress opts the environment in (true) or out (false) of
	// the cluster's setting.
	dedicatedIngress?: bool
	policy?: #Policy
	// namespacePrefix prefixes the namespace of every deployment of the
	// environment; it defaults to the environment's name.
	namespacePrefix?: #Name
	// rollout splits the environment's share of a fan-out into waves of
	// its own.
	rollout?: #Rollout
}

#Deployment: {
	#Settings
	// dedicatedIngress is a cluster (or environment) setting: the loader
	// refuses it here with a message saying so.
	dedicatedIngress?: _
	// backupLocation and backups are environment settings: the loader
	// refuses them here with a message saying so.
	backupLocation?: _
	backups?:        _
	driver: #Name | {
		name:     #Name
		version?: string
		// upgrade is a one-shot upgrade request: a token the deployment's
		// current lock has not recorded makes the next lock take the
		// newest driver version that supports the application version,
		// once; the lock records it (driver.upgradeRequest), so later
		// locks keep that version. A boolean is the old standing flag:
		// the loader refuses it and says what to write instead.
		// The loader checks the token itself (upgradeTokenRE), so that a bad
		// one gets a clear error rather than a disjunction's.
		upgrade?: bool | string
	}
	appVersion: string & =~"^v?[0-9]+\\.[0-9]+\\.[0-9]+([-+].*)?$"
	// connects names the deployments (or deployment.service) of the same
	// environment whose services this one reaches; only those appear in
	// context.services.
	connects?: [...string]
	// hold keeps the deployment at its current lock, whatever changes
	// around it (for example "restore in progress"): fan-outs and its own
	// edits wait until the hold is removed.
	hold?: string & !=""
}
`
