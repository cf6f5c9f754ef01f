// Package crdtest starts a control plane serving Styrmin's CRDs for the
// tests of the packages the operator package imports (which cannot use
// operator.InstallCRDs, or internal/agenttest, without an import cycle).
package crdtest
