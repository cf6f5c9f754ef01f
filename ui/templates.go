package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"time"

	"github.com/styrmin/styrmin/resolver"
)

// conditionClass colours a condition by what its status means: Ready
// and the agent's sync are good when True, Stalled, Drifted and
// Reconciling when False.
func conditionClass(condType, status string) string {
	good := "True"
	switch condType {
	case "Stalled", "Drifted", "Reconciling":
		good = "False"
	}
	switch {
	case status == good:
		return "ok"
	case status == "Unknown":
		return "wait"
	case condType == "Reconciling":
		return "run"
	}
	return "bad"
}

// pageNames are the pages; each is parsed with the layout.
var pageNames = []string{"overview", "deployment", "timeline", "task", "plan", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"short":          short,
		"stateClass":     stateClass,
		"conditionClass": conditionClass,
		"deployment":     deploymentHref,
		"timelineOf":     func(cluster string, id resolver.ID) string { return deploymentHref(cluster, id) + "/timeline" },
		"taskHref": func(cluster, namespace, task string) string {
			return "/t/" + url.PathEscape(cluster) + "/" + url.PathEscape(namespace) + "/" + url.PathEscape(task)
		},
		"date":      func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04Z") },
		"firstLine": firstLine,
		"mask":      mask,
		"add":       func(a, b int) int { return a + b },
		"mul":       func(a, b int) int { return a * b },
		"seq":       func(n int64) string { return fmt.Sprint(n) },
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templates, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}
