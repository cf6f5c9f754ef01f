// Package driversource gives the agent's controllers the exact driver
// version an instance pins: from the desired-state repository's clone
// (RepoDrivers) or a loaded catalog (CatalogSource), with the source's
// errors classified in one place (Get).
package driversource
