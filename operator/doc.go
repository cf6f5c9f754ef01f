// Package operator owns the in-cluster agent: the styrmin.io/v1alpha1 API
// types, the controllers (source sync, tasks, StyrminDeployment), server-side
// apply, inventory, pruning, health, action primitives and the webhook
// receiver. Business logic that the CLI also needs lives in the packages it
// imports.
package operator
