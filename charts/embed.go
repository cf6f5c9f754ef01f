// Package charts holds the Helm chart of the Styrmin agent
// (styrmin-agent/), which installs what the kustomize base in config/
// does: the CRDs (copied from config/crd), the RBAC, the admission policy,
// the agent's Deployment and Service, and optionally its repository Secret
// and a ServiceMonitor. It is embedded so a Go caller installs exactly the
// chart in the repository; its tests lint and render it with Helm and have
// a real API server accept what it renders.
package charts

import (
	"embed"
	"io/fs"
)

// all: keeps templates/_helpers.tpl and .helmignore, which embed leaves out
// by default (names starting with _ or .).
//
//go:embed all:styrmin-agent
var files embed.FS

// AgentChartDir is the chart's folder in the repository, below charts/.
const AgentChartDir = "styrmin-agent"

// AgentChart returns the agent's chart: a file tree rooted at its
// Chart.yaml.
func AgentChart() fs.FS {
	sub, err := fs.Sub(files, AgentChartDir)
	if err != nil {
		// The files are embedded at build time: a failure is a build defect.
		panic("charts: " + err.Error())
	}
	return sub
}
