// Package operator owns the in-cluster agent: the styrmin.io/v1alpha1 API
// types, the controllers (source sync, tasks, StyrminDeployment), server-side
// apply, inventory, pruning, health, action primitives and the webhook
// receiver. Business logic that the CLI also needs lives in the packages it
// imports.
//
// # The StyrminDeployment controller
//
// A StyrminDeployment (one per deployment, in its namespace, named after
// it) carries an instance as its spec. The controller applies the objects
// drivers.Render produces with server-side apply (field manager
// "styrmin", conflicts forced after the first install) and records each
// revision as a Helm 4 release named after the deployment, in its
// namespace, in Helm's "secret" storage format (helm.go): `helm list`,
// `helm history` and `helm get manifest` show what runs, and `helm
// uninstall` works. Helm's install and upgrade actions are not used: they
// read every object and the history first and write each revision three
// times. The release's chart records the driver's name and version and
// the app version.
//
// The status reports the active sequence and digest, the release revision,
// the inventory, and per component its workloads and ready replicas, with
// the conditions Ready, Reconciling, Stalled and Drifted. On an interval
// (Options.DriftInterval) the controller compares the release's objects
// with the live ones through field ownership (see drift.go), applies the
// drifted objects again without a new Helm revision, and records a
// DriftCorrected event naming the fields. A tombstone, or deleting the
// StyrminDeployment, uninstalls the release, then the StyrminDeployment
// goes.
//
// # For tasks
//
// The core step writes the StyrminDeployment with WriteInstance (the guard
// included) and waits with Applied until the controller runs the sequence:
//
//	out, err := operator.WriteInstance(ctx, c, namespace, instance)
//	// out.Kept > 0: a newer instance holds the StyrminDeployment: Superseded.
//	ok, err := operator.Applied(sd, instance.Sequence)
//	// err wraps ErrStalled when the instance cannot be applied (driver
//	// missing, render error): fail the step with it.
//
// The active sequence is status.activeSequence; the sequence held is the
// styrmin.io/instance-sequence annotation (HeldSequence).
package operator
