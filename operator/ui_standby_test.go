package operator_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestTheUIOfAReplicaThatIsNotElectedShowsTheHeadTheLeaderFetched runs
// two agent replicas with --leader-elect, each serving the UI (a
// port-forward to the Deployment lands on either). Only the elected one's
// syncer fetches; every replica cloned once at start. After a change is
// locked and run, both replicas' overviews show the new lock commit as
// git's head, and both show the settings of the deployment's new source
// commit (which the clone made at start does not hold).
func TestTheUIOfAReplicaThatIsNotElectedShowsTheHeadTheLeaderFetched(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	addrs := []string{freeAddress(t), freeAddress(t)}
	for _, addr := range addrs {
		agenttest.StartAgent(t, e.bin, e.agentArgs("--leader-elect", "--ui-bind-address="+addr)...)
	}
	seqs := e.lock(t)
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", seqs["hub"]))
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", seqs["web"]))
	seq := e.change(t, "hub", "hub: three workers", hubConfig("1.4.0", 3, "info"))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", seq))
	head, err := e.clone.Head()
	if err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, agentWaitLimit, "the StyrminSource to record the lock commit fetched", func(ctx context.Context) (bool, string, error) {
		var srcs v1alpha1.StyrminSourceList
		if err := e.c.List(ctx, &srcs, client.InNamespace(config.AgentNamespace)); err != nil || len(srcs.Items) != 1 {
			return false, "no StyrminSource", err
		}
		got := srcs.Items[0].Status.LastFetchedCommit
		return got == head.String(), "lastFetchedCommit " + got, nil
	})

	get := func(ctx context.Context, url string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for i, addr := range addrs {
		// A page fetches at most once every 10 s: a few of them.
		agenttest.WaitUntil(t, 45*time.Second, "replica "+string(rune('a'+i))+"'s overview to show git head "+head.Short(), func(ctx context.Context) (bool, string, error) {
			body, err := get(ctx, "http://"+addr+"/")
			if err != nil {
				return false, err.Error(), nil
			}
			_, after, _ := strings.Cut(body, "git head <code>")
			shown, _, _ := strings.Cut(after, "</code>")
			return shown == head.Short(), "git head " + shown, nil
		})
		body, err := get(context.Background(), "http://"+addr+"/d/local/dev/hub")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(body, `<table class="settings">`) {
			t.Errorf("replica %c's page of dev/hub shows no settings of its source commit:\n%s", 'a'+i, body)
		}
	}
}
