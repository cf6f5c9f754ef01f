// Package gitsource owns git access through go-git: opening, cloning and
// fetching repositories, an fs.FS over any commit, walking lock commits, and
// committing and pushing locks with compare-and-swap retries. It does not
// parse configuration.
package gitsource
