package task

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A backup credentials Secret is handed to an environment's jobs only when
// the platform team marked it for backups and, when it lists environments,
// lists this one: dev's files naming prod's Secret get nothing.
func TestBackupCredentialsGoOnlyToTheEnvironmentsTheirSecretLists(t *testing.T) {
	t.Parallel()
	marked := map[string]string{LabelBackupCredentials: "true"}
	for _, c := range []struct {
		name        string
		labels      map[string]string
		environment *string // the annotation; nil: absent
		want        string  // "": handed over
	}{
		{"not marked", nil, nil, "is not labelled styrmin.io/backup-credentials=true"},
		{"marked, no list: any environment", marked, nil, ""},
		{"listed", marked, ptr.To("local/staging, local/dev"), ""},
		{"the cluster's environments", marked, ptr.To("local/*"), ""},
		{"every environment", marked, ptr.To("*"), ""},
		{"another environment's", marked, ptr.To("local/prod"), `is for environments "local/prod" (annotation styrmin.io/backup-environments), not local/dev`},
		{"another cluster's", marked, ptr.To("other/*"), "not local/dev"},
		{"an empty list", marked, ptr.To(""), "the Secret styrmin-system/prod-keys lists no environment in its annotation styrmin.io/backup-environments"},
		{"a list of no environment", marked, ptr.To(" , "), "lists no environment"},
		{"a prefix is no match", marked, ptr.To("local/de"), "not local/dev"},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "styrmin-system", Name: "prod-keys", Labels: c.labels}}
		if c.environment != nil {
			s.Annotations = map[string]string{AnnotationBackupEnvironments: *c.environment}
		}
		got := CredentialsRefusal(s, "local", "dev")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: refused: %s", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: %q, want a refusal saying %q", c.name, got, c.want)
		}
	}
}
