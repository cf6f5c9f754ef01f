package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// TestTheCommitStatusTokenIsReadAgainOnceItsTimeIsUp: a GitHub App's
// installation token expires within the hour, and whatever renews it
// writes the new one into the Secret. The agent read it once at start,
// so every status after the first hour was refused until a restart.
func TestTheCommitStatusTokenIsReadAgainOnceItsTimeIsUp(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	api, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "statuses"}, Data: map[string][]byte{"token": []byte("ghs_first\n")}}
	if err := api.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	tokens := &secretToken{reader: api, key: types.NamespacedName{Namespace: "default", Name: "statuses"}, field: "token", ttl: time.Hour}
	if got, err := tokens.Token(ctx); err != nil || got != "ghs_first" {
		t.Fatalf("first read: %q, %v; want ghs_first, its newline trimmed", got, err)
	}
	sec.Data["token"] = []byte("ghs_second")
	if err := api.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if got, _ := tokens.Token(ctx); got != "ghs_first" {
		t.Fatalf("within its time the kept token is used: got %q", got)
	}
	tokens.expires = time.Now().Add(-time.Second) // its time is up
	if got, err := tokens.Token(ctx); err != nil || got != "ghs_second" {
		t.Fatalf("after its time: %q, %v; want the token the Secret holds now", got, err)
	}
	delete(sec.Data, "token")
	if err := api.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	tokens.expires = time.Time{}
	if _, err := tokens.Token(ctx); err == nil || !strings.Contains(err.Error(), `no key "token"`) || strings.Contains(err.Error(), "ghs_") {
		t.Fatalf("a Secret without the key: %v; want an error naming the key and no token", err)
	}
}

// TestAStatusRepositoryThatIsNotOwnerSlashNameIsRefusedNamingTheFlag pins
// the error of --status-repository: a value with no slash, an empty
// part or a slash too many names the flag and the form it expects.
func TestAStatusRepositoryThatIsNotOwnerSlashNameIsRefusedNamingTheFlag(t *testing.T) {
	for _, bad := range []string{"acme", "acme/", "/repo", "a/b/c", "/"} {
		_, _, err := statusRepository(bad)
		if err == nil || !strings.Contains(err.Error(), "--status-repository") || !strings.Contains(err.Error(), "expected OWNER/NAME") || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("statusRepository(%q) = %v, want an error naming the value, --status-repository and OWNER/NAME", bad, err)
		}
	}
	owner, repo, err := statusRepository("acme/desired-state")
	if err != nil || owner != "acme" || repo != "desired-state" {
		t.Errorf("statusRepository(acme/desired-state) = %q, %q, %v", owner, repo, err)
	}
}
