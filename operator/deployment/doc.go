// Package deployment owns the StyrminDeployment controller: it makes the
// cluster run the instance a StyrminDeployment holds, as a Helm release
// (package release), reports the components' state (package health) and
// the conditions Ready, Reconciling, Stalled and Drifted, and on an
// interval puts drifted fields back.
//
// A reconcile is a chain of phases, each owning one condition; errors are
// classified where they happen and mapped to the result in one place
// (resultFor, through outcome.Map).
package deployment
