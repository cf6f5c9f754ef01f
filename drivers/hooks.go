package drivers

import (
	"errors"
	"fmt"
	"strings"

	release "helm.sh/helm/v4/pkg/release/v1"
)

// HookAnnotation is Helm's hook annotation (helm.sh/hook): its value lists
// the events (pre-install, post-upgrade, test, …) at which Helm runs the
// object, instead of installing it with the release.
const HookAnnotation = release.HookAnnotation

// testHooks are the hook events of `helm test`: test, and Helm 2's
// test-success and test-failure. Helm's install never creates these
// objects (releaseutil.SortManifests puts them among the hooks), so a
// render leaves them out.
var testHooks = map[string]bool{
	release.HookTest.String(): true,
	"test-success":            true,
	"test-failure":            true,
}

// HookAdvice is what a chart whose objects are Helm hooks must do instead.
const HookAdvice = "Styrmin does not run Helm hooks; disable the hook through the chart's values, " +
	"or move the work to the driver's actions (runJob in actions.setup/upgrade)"

// helmEvents are the hook events Helm 4 knows. An object whose annotation
// names any other (Helm 2's crd-install, test-success; an empty value) is
// skipped by Helm's install (releaseutil.SortManifests: "skipping unknown
// hooks"), and so left out of a render here.
var helmEvents = map[string]bool{
	release.HookPreInstall.String(): true, release.HookPostInstall.String(): true,
	release.HookPreDelete.String(): true, release.HookPostDelete.String(): true,
	release.HookPreUpgrade.String(): true, release.HookPostUpgrade.String(): true,
	release.HookPreRollback.String(): true, release.HookPostRollback.String(): true,
	release.HookTest.String(): true,
}

// hookEvents parses an object's helm.sh/hook annotation as Helm does
// (comma-separated events, trimmed, lower case; an empty item is an event
// Helm does not know): the annotation's value as written, its events, and
// whether it has one.
func hookEvents(o *rendered) (value string, events []string, ok bool) {
	a, _ := o.meta()["annotations"].(map[string]any)
	v, ok := a[HookAnnotation]
	if !ok {
		return "", nil, false
	}
	switch x := v.(type) {
	case string:
		value = x
	case nil:
	default:
		value = fmt.Sprint(x)
	}
	for e := range strings.SplitSeq(value, ",") {
		events = append(events, strings.ToLower(strings.TrimSpace(e)))
	}
	return value, events, true
}

// skippedByHelm reports whether Helm's install skips an object with these
// hook events: one of them is unknown to Helm, or they are all `helm
// test`'s (run by `helm test` only).
func skippedByHelm(events []string) bool {
	for _, e := range events {
		if !helmEvents[e] {
			return true
		}
	}
	return onlyTestHooks(events)
}

// onlyTestHooks reports whether events are all test hooks (and at least
// one).
func onlyTestHooks(events []string) bool {
	for _, e := range events {
		if !testHooks[e] {
			return false
		}
	}
	return len(events) > 0
}

// leaveOutHooks removes the chart's test hooks from objs, as Helm's
// install does, and refuses any other Helm hook: the agent applies every
// object it renders as an ordinary object, at once and drift-corrected, so
// a pre-upgrade Job would run alongside the upgrade and a hook its delete
// policy removed would be made again. Run after the driver's patches, as
// Helm 4 sorts hooks after its post-renderer (so a patch may remove the
// annotation, which makes the object an ordinary one on purpose). Every
// refused object is reported (up to maxReported), at its template.
func (d *Driver) leaveOutHooks(objs []*rendered) ([]*rendered, error) {
	out := objs[:0]
	var errs []error
	for _, o := range objs {
		value, events, ok := hookEvents(o)
		switch {
		case !ok:
			out = append(out, o)
		case skippedByHelm(events):
			// Run by `helm test` only, or an event Helm does not know:
			// never installed by Helm either.
		case len(errs) < maxReported:
			errs = append(errs, &SpecError{File: o.source, Field: "metadata.annotations." + HookAnnotation,
				Msg: fmt.Sprintf("%s %s of driver %s@%s is a Helm hook (%s: %q): %s",
					o.kind(), o.name(), d.Name, d.Version, HookAnnotation, value, HookAdvice)})
		}
	}
	switch len(errs) {
	case 0:
		return out, nil
	case 1:
		return nil, errs[0]
	}
	return nil, errors.Join(errs...)
}
