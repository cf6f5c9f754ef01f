// Package version owns what build of Styrmin a binary is: the release
// version stamped at link time (make build, make image) or, without one,
// what the Go toolchain recorded (the module version, the VCS commit and
// time, whether the tree was modified).
package version
