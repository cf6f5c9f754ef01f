// Package browser finds and runs Debian's headless Chromium for the tests
// that check the web UI in a real browser (its DOM, its
// Content-Security-Policy, screenshots), trying a run that crashes again.
package browser
