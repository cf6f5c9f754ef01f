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
	"fmt"
	"io/fs"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
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

// LoadAgentChart loads the agent's chart with Helm's loader, ready for
// Helm's install, upgrade or template actions.
func LoadAgentChart() (*chartv2.Chart, error) {
	fsys := AgentChart()
	var files []*archive.BufferedFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		files = append(files, &archive.BufferedFile{Name: p, Data: b})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("charts: reading the embedded chart: %w", err)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("charts: loading %s: %w", AgentChartDir, err)
	}
	return ch, nil
}
