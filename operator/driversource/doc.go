// Package driversource gives the agent's controllers the exact driver
// version an instance pins: from the desired-state repository's clone at
// the commit the instance was locked or resolved at, from another git
// repository at the commit its lock recorded (RepoDrivers, with the fetched
// trees shared and bounded by RemoteTrees), or from a loaded catalog
// (CatalogSource), with the source's errors classified in one place (Get); and the
// renders of instances its controllers share (Renders).
package driversource
