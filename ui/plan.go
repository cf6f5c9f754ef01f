package ui

import (
	"fmt"
	"html/template"
	"net/http"
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
