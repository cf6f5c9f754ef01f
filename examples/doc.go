// Package examples holds a complete desired-state repository with drivers and
// charts, used by the demo and the end-to-end tests. Repo exposes it as an
// fs.FS so tests do not depend on the working directory.
package examples
