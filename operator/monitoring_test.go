package operator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/internal/agenttest"
)

// dashboard is the part of a Grafana dashboard the test checks.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name, Type, Query string
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos *struct{ X, Y, W, H int } `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestGrafanaDashboardQueriesMetricsTheAgentServes loads the shipped
// dashboard (config/monitoring) and checks its shape (a data-source
// variable every panel uses, unique panel ids, a query per panel), then
// runs the agent with its webhook on, makes it correct a drift and
// receive a delivery, and checks that every metric a query names has
// samples on the agent's metrics endpoint: a renamed metric breaks the
// test, not the team's dashboard.
func TestGrafanaDashboardQueriesMetricsTheAgentServes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../config/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard %q (uid %q) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type, Query string }) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("no Prometheus data-source variable: %+v", d.Templating.List)
	}
	metricName := regexp.MustCompile(`\bstyrmin_[a-z_]+`)
	names := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" || p.GridPos == nil || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, grid %v, %d queries", p.Title, p.Datasource.UID, p.GridPos, len(p.Targets))
		}
		for _, q := range p.Targets {
			found := metricName.FindAllString(q.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q queries no Styrmin metric: %s", p.Title, q.Expr)
			}
			for _, n := range found {
				names[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}

	e := startAgentEnv(t)
	e.lock(t)
	metricsAddr, webhookAddr := agenttest.FreeAddr(t), agenttest.FreeAddr(t)
	e.startAgent(t, "--metrics-bind-address="+metricsAddr, "--webhook-bind-address="+webhookAddr,
		"--webhook-secret-name=styrmin-webhook", "--drift-interval=2s")
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))
	// A delivery (signed, so that the Secret is read; it does not exist:
	// answered 503).
	if got := agenttest.Deliver(t, "http://"+webhookAddr+"/", "push", "d1", "sha256="+strings.Repeat("0", 64), `{}`); got != http.StatusServiceUnavailable {
		t.Errorf("delivery answered %d, want 503 (no secret)", got)
	}
	// A drift: the web Deployment deleted, put back.
	ctx := context.Background()
	if err := e.c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: webNamespace, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	var metrics string
	agenttest.WaitUntil(t, agentWaitLimit, "the drift corrected", func(context.Context) (bool, string, error) {
		metrics = scrape(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(metrics, `styrmin_drift_corrections_total{kind="Deployment",namespace="dev-web"}`), "", nil
	})
	for n := range names {
		if !regexp.MustCompile(`(?m)^` + n + `(_bucket|_count|_sum)?(\{| )`).MatchString(metrics) {
			t.Errorf("the dashboard queries %s, which the agent does not serve", n)
		}
	}
	t.Logf("%d panels query %d metrics, all served", len(d.Panels), len(names))
}
