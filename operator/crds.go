package operator

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/version"
)

// AnnotationCRDVersion on a styrmin.io CRD is the version of the Styrmin
// build that applied it (InstallCRDs, styrminctl install): what a later
// InstallCRDs or install compares its own version with, so that an older
// build never replaces a newer build's schemas.
const AnnotationCRDVersion = v1alpha1.Group + "/version"

// InstallCRDs applies the styrmin.io CRDs (config/crd) with server-side
// apply, as InstallCRDsAs with this binary's version. The agent calls it
// at start when allowed to (--install-crds); tests call it on a fresh
// control plane.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	return InstallCRDsAs(ctx, cfg, version.Get().Short())
}

// InstallCRDsAs applies the styrmin.io CRDs (config/crd) with server-side
// apply, each annotated AnnotationCRDVersion=v, and waits until the API
// server serves them. A CRD whose live annotation names a version newer
// than v (NewerVersion) is left as it is, with a log line (the context's
// logger): an agent rolled back must not roll the schemas back with it,
// or the API server would prune the fields the newer objects hold.
func InstallCRDsAs(ctx context.Context, cfg *rest.Config, v string) error {
	logger := log.FromContext(ctx)
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	var names []string
	for _, doc := range config.CRDs() {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			return fmt.Errorf("install CRDs: embedded CRD: %w", err)
		}
		names = append(names, crd.Name)
		var live apiextensionsv1.CustomResourceDefinition
		err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, &live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("install CRD %s: reading it: %w", crd.Name, err)
		case NewerVersion(live.Annotations[AnnotationCRDVersion], v):
			logger.Info("not applying CRD: the cluster's was applied by a newer Styrmin; it is kept as it is (update the agent, or apply this version's CRDs by hand to roll them back)",
				"crd", crd.Name, "appliedBy", live.Annotations[AnnotationCRDVersion], "agentVersion", v, "annotation", AnnotationCRDVersion)
			continue
		}
		crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		crd.ResourceVersion = ""
		if crd.Annotations == nil {
			crd.Annotations = map[string]string{}
		}
		crd.Annotations[AnnotationCRDVersion] = v
		//nolint:staticcheck // client.Apply with a typed object is the simplest full-object apply here.
		if err := c.Patch(ctx, &crd, client.Apply, client.FieldOwner(v1alpha1.FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				return false, err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("install CRDs: %s not established: %w", name, err)
		}
	}
	return nil
}

// NewerVersion tells whether a build of version live may be newer than a
// build of version self, so that self must not replace what live
// installed: live is a version (CompareVersions can order it) and self
// is older, or self is no version at all ("(devel)", "dev"), which cannot
// tell. A live value that is no version ("", "(devel)") is never newer:
// nothing orders it, and refusing would stop every development install.
func NewerVersion(live, self string) bool {
	if _, ok := parseBuildVersion(live); !ok {
		return false
	}
	cmp, ok := CompareVersions(live, self)
	return !ok || cmp > 0
}

// CompareVersions orders two Styrmin build versions: -1, 0 or 1 as a is
// older, the same or newer than b, and false when either is no version.
// It reads semantic versions with or without "v" (a Go pseudo-version
// v0.3.1-0.20261201150405-abcdef123456 is one, older than v0.3.1), and
// git describe's versions (make build, make image: v0.3.0-5-gabcdef1,
// with -dirty), which come after their tag, ordered by the commits since.
// A "-dirty" build counts as the version it was built from.
func CompareVersions(a, b string) (int, bool) {
	va, ok := parseBuildVersion(a)
	if !ok {
		return 0, false
	}
	vb, ok := parseBuildVersion(b)
	if !ok {
		return 0, false
	}
	if c := va.base.Compare(vb.base); c != 0 {
		return c, true
	}
	switch {
	case va.ahead < vb.ahead:
		return -1, true
	case va.ahead > vb.ahead:
		return 1, true
	}
	return 0, true
}

// buildVersion is a version as CompareVersions orders it: a semantic
// version and the commits a git describe version is ahead of it.
type buildVersion struct {
	base  *semver.Version
	ahead int
}

// describe is git describe's version: a tag, the commits since and the
// commit (--dirty's suffix is cut before).
var describe = regexp.MustCompile(`^(.+)-(\d+)-g[0-9a-f]{4,40}$`)

func parseBuildVersion(s string) (buildVersion, bool) {
	s = strings.TrimSuffix(s, "-dirty")
	if !strings.HasPrefix(s, "v") && (s == "" || s[0] < '0' || s[0] > '9') {
		return buildVersion{}, false
	}
	if m := describe.FindStringSubmatch(s); m != nil {
		if base, err := semver.StrictNewVersion(strings.TrimPrefix(m[1], "v")); err == nil {
			n, _ := strconv.Atoi(m[2])
			return buildVersion{base: base, ahead: n}, true
		}
	}
	base, err := semver.StrictNewVersion(strings.TrimPrefix(s, "v"))
	if err != nil {
		return buildVersion{}, false
	}
	return buildVersion{base: base}, true
}
