// Package ociimage builds Styrmin's container image without a container
// runtime, as ko does: it cross-compiles a command for each platform and
// assembles an OCI image index from scratch layers (a minimal base with CA
// certificates, a non-root user and /tmp, then the binary), written as an
// OCI image layout that crane or skopeo can push.
//
// The result is reproducible: every input that varies between machines
// (file times, the creation time, build paths, the Go build's defaults) is
// fixed, so two builds of the same commit with the same toolchain have the
// same digests.
package ociimage
