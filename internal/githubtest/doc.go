// Package githubtest holds what tests of GitHub's API clients share:
// the answers GitHub gives when it rate limits, as its documentation
// describes them.
package githubtest
