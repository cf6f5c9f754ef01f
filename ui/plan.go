package ui

import (
	"fmt"
	"html/template"
	"net/http"
	"strings"
)

type planData struct {
	Base, Head         string
	BaseName, HeadName string
	Plan               template.HTML
	Error              string
}

// plan is the plan of a ref against another: the head ref's
// configuration against the base ref's lockfiles (default: the tracked
// branch's head), so a reviewer can read a branch's plan before merging.
func (h *Handler) plan(w http.ResponseWriter, r *http.Request) {
	if h.o.Repo == nil {
		h.fail(w, http.StatusNotFound, errNoRepository)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	d := planData{Base: q.Get("base"), Head: q.Get("head")}
	nav := []link{{"Overview", "/"}}
	if d.Head == "" {
		h.render(w, "plan", page{Title: "Plan", Data: d, Nav: nav})
		return
	}
	for _, f := range []struct{ name, ref string }{{"head", d.Head}, {"base", d.Base}} {
		if err := checkRef(f.ref); err != nil {
			h.fail(w, http.StatusBadRequest, fmt.Errorf("%s=%q: %w", f.name, f.ref, err))
			return
		}
	}
	base, err := h.o.Repo.Head()
	if d.Base != "" {
		base, err = h.o.Repo.Resolve(d.Base)
	}
	if err != nil {
		d.Error = fmt.Sprintf("base %q: %s", d.Base, mask(err.Error()))
		h.render(w, "plan", page{Title: "Plan", Data: d, Nav: nav})
		return
	}
	head, err := h.o.Repo.Resolve(d.Head)
	if err != nil {
		d.Error = fmt.Sprintf("head %q: %s", d.Head, mask(err.Error()))
		h.render(w, "plan", page{Title: "Plan", Data: d, Nav: nav})
		return
	}
	d.BaseName, d.HeadName = base.Short(), head.Short()
	baseName := base.Short()
	if d.Base != "" {
		baseName = d.Base + " (" + base.Short() + ")"
	}
	d.Plan, err = h.planHTML(ctx, base, head, baseName, d.Head+" ("+head.Short()+")", nil)
	if err != nil {
		d.Error = mask(err.Error())
	}
	h.render(w, "plan", page{Title: "Plan of " + d.Head, Data: d, Nav: nav})
}

// maxRefLength bounds a ref a plan is asked for (git's own names are far
// shorter).
const maxRefLength = 256

// errNotARef is checkRef's answer.
var errNotARef = fmt.Errorf("expected a branch, tag or commit of at most %d bytes (not a revision expression such as main~1 or main^{/text})", maxRefLength)

// checkRef accepts a ref the plan page is for: a branch, a tag, a remote
// branch or a commit (whole or abbreviated), as git's ref names are
// written. A revision expression is refused before git reads anything:
// main~N and main^{/text} walk the history under the repository's lock
// (the agent's syncer waits for it), and text is a regular expression
// matched against every commit message, as often as pages ask.
func checkRef(ref string) error {
	if len(ref) > maxRefLength || strings.ContainsAny(ref, "~^:?*[\\") || strings.Contains(ref, "..") || strings.Contains(ref, "@{") {
		return errNotARef
	}
	for _, r := range ref {
		if r <= ' ' || r == 0x7f {
			return errNotARef
		}
	}
	if ref != "" && len(ref) < minAbbrev && isHex(ref) {
		return errShortHex
	}
	return nil
}

// minAbbrev is the shortest commit abbreviation taken, git's own
// (MINIMUM_ABBREV): go-git tries every ref as a hash prefix first, of
// whole bytes, so "a" is the empty prefix and "abc" one byte: it lists
// every object of the clone, or one in 256, and reads each as a commit
// until one is, under the repository's lock the agent's syncer waits for.
const minAbbrev = 4

// errShortHex is checkRef's answer for hex digits shorter than minAbbrev.
var errShortHex = fmt.Errorf("expected a commit abbreviated to at least %d hex digits, or a branch or tag by its full name (refs/tags/1)", minAbbrev)

// isHex reports whether s is made of hex digits only.
func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}
