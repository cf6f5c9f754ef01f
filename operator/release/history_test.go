package release

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// sensitiveSecretExists tells whether the namespace holds the Secret of
// sensitive values.
func (e *releaseEnv) sensitiveSecretExists(t *testing.T, ns string) bool {
	t.Helper()
	_, err := e.cs.CoreV1().Secrets(ns).Get(context.Background(), v1alpha1.SensitiveSecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestUninstallRemovesTheValuesSecretEvenWhenNoRevisionWasRecorded pins
// that the Secret of sensitive values never outlives the release: an
// install refused on its first object writes the Secret but records no
// revision, and its uninstall removes the Secret all the same; so does
// the retry of an uninstall whose records were already deleted. The
// refusal names no value.
func TestUninstallRemovesTheValuesSecretEvenWhenNoRevisionWasRecorded(t *testing.T) {
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "values-left"
	e.namespace(t, ns)
	const value = "hunter2-never-recorded"
	ph := resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", value)
	req := releaseReq(ns, configMap(ns, "zz_invalid", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	_, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err == nil {
		t.Fatal("an install of an object with an invalid name succeeded")
	}
	if leaks := secrettest.Find([]byte(err.Error()), value); len(leaks) > 0 {
		t.Fatalf("the install's error holds %v", leaks)
	}
	if n := e.releaseRecordCount(t, ns); n != 0 || !e.sensitiveSecretExists(t, ns) {
		t.Fatalf("before the uninstall: %d records, values Secret there: %v; want none and the Secret", n, e.sensitiveSecretExists(t, ns))
	}
	if err := e.helm.Uninstall(ctx, ns, "app"); err != nil {
		t.Fatal(err)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the uninstall of a release without records")
	}

	// An uninstall that deleted the records and failed on the Secret is
	// retried with no record left.
	req = releaseReq(ns, configMap(ns, "a", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	if _, _, err := e.helm.Apply(ctx, req, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.records.removeAll(ctx, ns, "app"); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.Uninstall(ctx, ns, "app"); err != nil {
		t.Fatal(err)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the retried uninstall")
	}
}

// TestAReleaseWithoutSensitiveValuesAnyMoreRemovesTheValuesSecret pins
// that the Secret of sensitive values goes once a revision without any
// deployed, and is kept while the deployed revision still uses it (an
// upgrade without values that fails).
func TestAReleaseWithoutSensitiveValuesAnyMoreRemovesTheValuesSecret(t *testing.T) {
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "values-dropped"
	e.namespace(t, ns)
	const value = "hunter2-dropped"
	ph := resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", value)
	req := releaseReq(ns, configMap(ns, "a", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	r1, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "a="+value || !e.sensitiveSecretExists(t, ns) {
		t.Fatalf("after the install: config maps %q, values Secret there: %v", got, e.sensitiveSecretExists(t, ns))
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "plain"), configMap(ns, "zz_invalid", "x")), r1, 1); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	if !e.sensitiveSecretExists(t, ns) {
		t.Fatal("a failed upgrade without values removed the Secret the deployed revision reveals with")
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "plain")), r1, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "a=plain" {
		t.Fatalf("config maps %q, want a=plain", got)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the last revision that had sensitive values")
	}
}
