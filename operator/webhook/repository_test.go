package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pushOf is a push to main of the repository at host/fullName, with the
// URLs GitHub sends.
func pushOf(host, fullName string) string {
	return fmt.Sprintf(`{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":%q,"clone_url":"https://%s/%s.git","ssh_url":"git@%s:%s.git","html_url":"https://%s/%s","git_url":"git://%s/%s.git"}}`,
		fullName, host, fullName, host, fullName, host, fullName, host, fullName)
}

// TestAPushOfAnotherRepositoryIsIgnored: the receiver took any signed push
// to a branch of the tracked one's name for a change, whichever
// repository it came from: with an organisation's webhook, or a secret
// shared by several repositories, every repository's push to main made
// the agent sync and lock. A push that names another repository is
// answered 202 "ignored", naming both, and triggers nothing; one of the
// tracked repository, however its URL is written, triggers a sync.
func TestAPushOfAnotherRepositoryIsIgnored(t *testing.T) {
	const remote = "https://x-access-token:tok@GitHub.com/acme/desired-state.git"
	cases := []struct {
		name    string
		body    string
		trigger bool
	}{
		{"another repository of the organisation", pushOf("github.com", "acme/other"), false},
		// The agent may reach the server by another name than its payloads
		// announce (Gitea's in-cluster Service, its ROOT_URL outside):
		// owner/name decides.
		{"the same owner/name announced under another host", pushOf("git.example.com", "acme/desired-state"), true},
		{"another repository, full_name only", `{"ref":"refs/heads/main","repository":{"full_name":"acme/other"}}`, false},
		{"the tracked repository", pushOf("github.com", "acme/desired-state"), true},
		{"the tracked repository, another case", pushOf("github.com", "Acme/Desired-State"), true},
		{"the tracked repository, full_name only", `{"ref":"refs/heads/main","repository":{"full_name":"acme/desired-state"}}`, true},
		{"a push that names no repository", `{"ref":"refs/heads/main"}`, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h, err := NewHandler(Options{
				Secret:     func(context.Context) ([]byte, error) { return testSecret, nil },
				Branch:     "main",
				Repo:       remote,
				OnPush:     rec.onPush,
				Registerer: prometheus.NewRegistry(),
			})
			if err != nil {
				t.Fatal(err)
			}
			w := deliver(h, "push", fmt.Sprintf("d-%d", i), Sign(testSecret, []byte(tc.body)), tc.body)
			if w.Code != http.StatusAccepted {
				t.Fatalf("status %d, want 202 (%s)", w.Code, w.Body)
			}
			if got := len(rec.events) == 1; got != tc.trigger {
				t.Fatalf("%d syncs triggered (%s), want trigger %v", len(rec.events), strings.TrimSpace(w.Body.String()), tc.trigger)
			}
			if tc.trigger {
				return
			}
			body := w.Body.String()
			if !strings.Contains(body, "ignored") || !strings.Contains(body, "acme/") || !strings.Contains(body, "github.com/acme/desired-state") {
				t.Errorf("answer %q: want it ignored, naming the push's repository and the tracked one", body)
			}
			if strings.Contains(body, "tok") {
				t.Errorf("answer %q shows the remote's credentials", body)
			}
			if got := testutil.ToFloat64(h.deliveries.WithLabelValues(string(ResultIgnored))); got != 1 {
				t.Errorf("styrmin_webhook_deliveries_total{result=ignored} = %v, want 1", got)
			}
		})
	}
}

// TestARemoteThatNamesNoRepositoryChecksNone: a remote a push cannot be
// compared with (a path on disk, an SSH alias, a Service's cluster name,
// a single path segment) keeps the receiver's earlier behaviour: a push
// of any repository to the branch triggers a sync. Refusing would drop
// every genuine push.
func TestARemoteThatNamesNoRepositoryChecksNone(t *testing.T) {
	for _, remote := range []string{"", "/srv/git/desired.git", "file:///srv/git/desired.git", "github-acme:acme/desired-state.git",
		"http://gitea-http.gitea.svc.cluster.local:3000/acme/desired-state.git", "http://127.0.0.1:8080/desired", `C:\git\desired`} {
		rec := &recorder{}
		h, err := NewHandler(Options{
			Secret:     func(context.Context) ([]byte, error) { return testSecret, nil },
			Branch:     "main",
			Repo:       remote,
			OnPush:     rec.onPush,
			Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		body := pushOf("github.com", "acme/other")
		if w := deliver(h, "push", "d", Sign(testSecret, []byte(body)), body); w.Code != http.StatusAccepted || len(rec.events) != 1 {
			t.Errorf("remote %q: %d %q, %d syncs; want the push to trigger one", remote, w.Code, w.Body, len(rec.events))
		}
	}
}

// TestRepositoriesAreComparedByHostAndPath pins the normalisation: scheme,
// user, port, case and ".git" do not matter.
func TestRepositoriesAreComparedByHostAndPath(t *testing.T) {
	want := repository{host: "github.com", path: "acme/desired-state"}
	for _, raw := range []string{
		"https://github.com/acme/desired-state",
		"https://github.com/acme/desired-state.git",
		"https://user:secret@github.com:443/Acme/Desired-State.git/",
		"http://github.com/acme/desired-state",
		"ssh://git@github.com/acme/desired-state.git",
		"ssh://git@ssh.github.com:443/acme/desired-state.git",
		"git@github.com:acme/desired-state.git",
		"github.com:acme/desired-state",
		"git://github.com/acme/desired-state.git",
	} {
		got, ok := parseRepository(raw)
		if !ok || got != want {
			t.Errorf("parseRepository(%q) = %v, %v; want %v", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"https://github.com/acme", "https://github.com/acme/../x", "https://github.com/acme/.git", "desired", "ftp://github.com/acme/x"} {
		if got, ok := parseRepository(raw); ok {
			t.Errorf("parseRepository(%q) = %v, want none", raw, got)
		}
	}
}
