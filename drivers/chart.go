package drivers

import (
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
)

// loadChart loads the chart folder named by the spec's `chart` field from
// the files already read, and prepares the capabilities declared to it.
func (d *Driver) loadChart(f *folder, v cue.Value, opts LoadOptions) error {
	file := d.compiled.file
	cv := v.LookupPath(cue.ParsePath("chart"))
	p, err := cv.String()
	if err != nil {
		return d.compiled.locator().errAt(cv, "chart", "must be a concrete string that does not depend on the context")
	}
	dir, err := cleanChartPath(p)
	if err != nil {
		return d.compiled.locator().errAt(cv, "chart", "%v", err)
	}
	prefix := dir + "/"
	var files []*archive.BufferedFile
	hasChartYAML := false
	for _, fp := range f.paths {
		if !strings.HasPrefix(fp, prefix) {
			continue
		}
		name := strings.TrimPrefix(fp, prefix)
		if name == "Chart.yaml" {
			hasChartYAML = true
		}
		files = append(files, &archive.BufferedFile{Name: name, Data: f.files[fp]})
	}
	if len(files) == 0 {
		return d.compiled.locator().errAt(cv, "chart", "chart folder %q not found in the driver folder (remote charts are not supported)", dir)
	}
	if !hasChartYAML {
		return d.compiled.locator().errAt(cv, "chart", "chart folder %q has no Chart.yaml", dir)
	}
	opts.notePhase(f.display(dir))
	if err := checkArchives(f, dir, opts.Limits.WithDefaults()); err != nil {
		return err
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return &SpecError{File: f.display(prefix + "Chart.yaml"), Field: "chart", Msg: "cannot load the chart: " + err.Error(), Err: err}
	}
	kube := d.compiled.kubeVersion
	if kube == "" {
		kube = opts.KubeVersion
	}
	if kube == "" {
		kube = DefaultKubeVersion
	}
	kv, err := common.ParseKubeVersion(kube)
	if err != nil {
		return &SpecError{File: file, Field: "kubeVersion", Msg: fmt.Sprintf("%q is not a Kubernetes version: %v", kube, err), Err: err}
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kv.String()) {
		return &SpecError{File: f.display(prefix + "Chart.yaml"), Field: "kubeVersion",
			Msg: fmt.Sprintf("the chart requires Kubernetes %s, but the driver declares %s", c, kube)}
	}
	apis := common.VersionSet(opts.APIVersions)
	if len(apis) == 0 {
		apis = common.DefaultVersionSet
	}
	d.compiled.chart = ch
	d.compiled.chartDir = dir
	d.compiled.display = f.display
	d.compiled.caps = &common.Capabilities{
		KubeVersion: *kv,
		APIVersions: apis,
		HelmVersion: common.DefaultCapabilities.HelmVersion,
	}
	return nil
}

// Chart returns the driver's loaded Helm chart. Callers must not modify it.
func (d *Driver) Chart() *chartv2.Chart { return d.compiled.chart }

// Capabilities returns the Kubernetes version and API versions the driver
// declares to its chart. Callers must not modify them.
func (d *Driver) Capabilities() *common.Capabilities { return d.compiled.caps }
