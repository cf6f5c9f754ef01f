package ui_test

import (
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/testcluster"
	"github.com/styrmin/styrmin/ui"
)

func wantIn(t *testing.T, page, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", page, w)
		}
	}
	if t.Failed() {
		t.Logf("%s:\n%s", page, body)
	}
}

func TestOverviewShowsEveryDeploymentWithItsSequencesAndState(t *testing.T) {
	w := newDemoWorld(t)
	code, hd, body := get(t, w.srv, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	if ct := hd.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	wantIn(t, "the overview", body,
		"Cluster local", "Environment dev", "Environment staging",
		`href="/d/local/dev/web"`, `href="/d/local/dev/hub"`,
		`<span class="badge bad">failed</span>`,      // dev/web's newest task failed
		`<span class="badge muted">held</span>`,      // staging/web
		`<small>frozen for the audit</small>`,        // the hold's reason
		`<span class="badge run">not applied</span>`, // staging/hub: locked, never applied
		`data-refresh="5"`,
		"1 failed", "1 held",
		// The lock mode held a deployment back at the head.
		`<span class="bad">not locked</span> DeploymentsHeldBack: at `, "held back: local/staging/web: driver webapp@9.0.0 does not load",
	)
}

// rowOf is the overview's table row of the deployment whose page is
// href ("" when none).
func rowOf(body, href string) string {
	i := strings.Index(body, `<a href="`+href+`">`)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(body[:i], "<tr")
	end := strings.Index(body[i:], "</tr>")
	if start < 0 || end < 0 {
		return ""
	}
	return body[start : i+end]
}

// The fixture's head holds brokenLock, no lockfile: the overview names it
// and keeps git's data (the locked sequence, behind git) of every other
// deployment.
func TestOverviewSkipsAnInvalidLockfileNamingItAndKeepsTheOtherRowsGitData(t *testing.T) {
	w := newDemoWorld(t)
	_, _, body := get(t, w.srv, "/")
	wantIn(t, "the overview", body, "Invalid lockfiles at git head", brokenLock+": field apiVersion")
	for href, want := range map[string][]string{
		// Locked, applied, active; the state.
		"/d/local/dev/web":     {"<td>2</td><td>2</td><td>1</td>", ">failed</span>"},
		"/d/local/dev/hub":     {"<td>3</td><td>3</td><td>3</td>", ">ready</span>"},
		"/d/local/staging/web": {"<td>1</td><td>1</td><td>1</td>", ">held</span>"},
		// Known from git only: locked, never applied, behind git.
		"/d/local/staging/hub": {"<td>1</td><td>0</td><td>0</td>", ">not applied</span>"},
	} {
		r := rowOf(body, href)
		if r == "" {
			t.Errorf("no row of %s in the overview", href)
			continue
		}
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("the row of %s lacks %q:\n%s", href, w, r)
			}
		}
	}
	wantIn(t, "the overview's counts", body, "1 behind git")
	if strings.Contains(body, `href="/d/local/dev/broken"`) {
		t.Error("the invalid lockfile became a deployment's row")
	}
}

func TestOverviewFiltersByClusterEnvironmentNameAndState(t *testing.T) {
	w := newDemoWorld(t)
	_, _, body := get(t, w.srv, "/?state=failed")
	if !strings.Contains(body, `href="/d/local/dev/web"`) || strings.Contains(body, `href="/d/local/dev/hub"`) {
		t.Errorf("state=failed should keep dev/web only:\n%s", body)
	}
	_, _, body = get(t, w.srv, "/?env=staging")
	if strings.Contains(body, `href="/d/local/dev/web"`) || !strings.Contains(body, `href="/d/local/staging/web"`) {
		t.Errorf("env=staging should keep staging only:\n%s", body)
	}
	_, _, body = get(t, w.srv, "/?q=hub&state=held")
	if !strings.Contains(body, "No deployment matches the filter.") {
		t.Errorf("no held hub: want the empty note:\n%s", body)
	}
	if code, _, _ := get(t, w.srv, "/?state=sideways"); code != http.StatusBadRequest {
		t.Errorf("an unknown state: %d, want 400", code)
	}
}

func TestDeploymentPageShowsTheActiveInstanceSettingsLayersPodsAndEvents(t *testing.T) {
	w := newDemoWorld(t)
	code, _, body := get(t, w.srv, "/d/local/dev/web")
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	wantIn(t, "dev/web", body,
		"Active instance", "sequence 1 (task", "webapp@1.1.0", "app 1.25.0",
		"Resolved settings", "<code>parameters.replicas</code>", "<code>3</code>", "deployment", "<code>clusters/local/environments/dev/deployments/web.cue</code>",
		"<code>parameters.message</code>", "(sensitive)",
		"ProgressDeadlineExceeded", "CrashLoopBackOff", "web-7f9-abcde", "<td>4</td>",
		"<code>Deployment/dev-web/web</code>",
		"StepFailed",
		"Chart values",
	)
}

func TestTaskPagesExplainFailedAndSupersededInWords(t *testing.T) {
	w := newDemoWorld(t)
	_, _, failed := get(t, w.srv, "/t/local/dev-web/web-2")
	wantIn(t, "the failed task", failed,
		`<span class="badge bad">Failed</span>`, "Failed at step 2 (update/core/1:waitReady)",
		"The instance before stays active", `<svg class="chart"`, `<rect class="bar-bad"`,
		"Show output", "1 of 3 replicas ready", "1m39s",
	)
	_, _, superseded := get(t, w.srv, "/t/local/dev-hub/hub-2")
	wantIn(t, "the superseded task", superseded,
		`<span class="badge muted">Superseded</span>`, "the cluster already held sequence 3",
		"NewerInstanceKept: this step found a newer instance", "NewerInstanceKept: the step that writes the StyrminDeployment",
		"kept sequence 3; task hub-2 for sequence 2 is superseded",
	)
	if strings.Contains(superseded, "data-refresh") {
		t.Error("a finished task's page should not reload itself")
	}
	if code, _, _ := get(t, w.srv, "/t/local/dev-hub/hub-99"); code != http.StatusNotFound {
		t.Errorf("a missing task: %d, want 404", code)
	}
}

func TestTimelineListsEveryLockCommitFromGitWithTheClustersResults(t *testing.T) {
	w := newDemoWorld(t)
	code, _, body := get(t, w.srv, "/d/local/dev/hub/timeline")
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	lc := w.git.lockCommits
	wantIn(t, "dev/hub's timeline", body,
		lc[0].Short(), lc[2].Short(), lc[3].Short(),
		"Styrmin CI", "hub: more workers", "hub: even more workers",
		`<span class="badge ok">active</span>`,
		`href="/t/local/dev-hub/hub-2">Superseded</a>`,
		`href="/t/local/dev-hub/hub-3">Succeeded</a>`,
		"create", "update",
	)
	// The lock commits of dev/web carry the pull request they locked.
	_, _, web := get(t, w.srv, "/d/local/dev/web/timeline")
	wantIn(t, "dev/web's timeline", web, "PR #7", `>Failed</a>`)
	// Two entries diffed with the planner's renderer.
	_, _, diff := get(t, w.srv, "/d/local/dev/hub/timeline?a=1&b=3")
	wantIn(t, "the diff of hub 1 and 3", diff, "From sequence 1 to 3", `<section class="plan">`, "context.parameters.workers", "<code>2</code>", "<code>4</code>")
	if code, _, _ := get(t, w.srv, "/d/local/dev/hub/timeline?a=x"); code != http.StatusBadRequest {
		t.Errorf("a=x: %d, want 400", code)
	}
}

// A backup task carries the sequence and lock of the change it follows:
// sequence 2 of dev/web failed, the backup after it succeeded, and the
// timeline shows 2's own task and result.
func TestTimelineShowsTheChangesOwnResultNotABackupTaskAtItsSequence(t *testing.T) {
	w := newDemoWorld(t)
	code, _, body := get(t, w.srv, "/d/local/dev/web/timeline")
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	wantIn(t, "dev/web's timeline", body, `href="/t/local/dev-web/web-2">Failed</a>`)
	for _, bad := range []string{"web-backup-nightly", "ran as backup"} {
		if strings.Contains(body, bad) {
			t.Errorf("the timeline shows the backup task as a change's result (%q):\n%s", bad, body)
		}
	}
}

func TestPlanPageRendersTheplannersModelOfARefAgainstAnother(t *testing.T) {
	w := newDemoWorld(t)
	lc := w.git.lockCommits
	code, _, body := get(t, w.srv, "/plan?base="+lc[0].String()+"&head="+lc[1].String())
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	wantIn(t, "the plan", body, `<section class="plan">`, "1 to update", "<code>local/dev/web</code>", "context.parameters.replicas", "Blast radius")
	_, _, form := get(t, w.srv, "/plan")
	wantIn(t, "the plan form", form, `<form class="filters" method="get" action="/plan">`)
	_, _, bad := get(t, w.srv, "/plan?head=no-such-branch")
	wantIn(t, "a bad ref", bad, `head &#34;no-such-branch&#34;`)
}

func TestNoPageHoldsASecretValue(t *testing.T) {
	w := newDemoWorld(t)
	lc := w.git.lockCommits
	for _, path := range []string{
		"/", "/d/local/dev/web", "/d/local/dev/web/timeline", "/d/local/dev/web/timeline?a=1&b=2",
		"/t/local/dev-web/web-1", "/t/local/dev-web/web-2",
		"/plan?base=" + lc[0].String() + "&head=" + lc[1].String(),
	} {
		_, _, body := get(t, w.srv, path)
		// As the browser shows it: html/template writes the value's "+"
		// as "&#43;", which the raw form is not found in.
		if found := secrettest.Find([]byte(html.UnescapeString(body)), secretValue); len(found) > 0 {
			t.Errorf("%s holds the sensitive value as %s", path, strings.Join(found, ", "))
		}
		if strings.Contains(body, "styrmin:sensitive:") {
			t.Errorf("%s shows a placeholder of a sensitive value", path)
		}
	}
}

func TestOnlyGETIsServedAndEveryResponseCarriesAStrictPolicy(t *testing.T) {
	w := newDemoWorld(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		code, hd, _ := do(t, w.srv, m, "/")
		if code != http.StatusMethodNotAllowed || hd.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: %d, Allow %q; want 405 and GET, HEAD", m, code, hd.Get("Allow"))
		}
	}
	if code, _, body := do(t, w.srv, http.MethodHead, "/"); code != http.StatusOK || body != "" {
		t.Errorf("HEAD /: %d with %d bytes, want 200 and no body", code, len(body))
	}
	for _, path := range []string{"/", "/d/local/dev/hub", "/static/ui.js", "/no/such/page", "/t/local/dev-hub/hub-3"} {
		_, hd, body := get(t, w.srv, path)
		csp := hd.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: the policy allows inline code: %q", path, csp)
		}
		if hd.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
		if strings.HasPrefix(path, "/static/") {
			continue
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, " onclick=") {
			t.Errorf("%s holds inline script or style", path)
		}
	}
}

func TestPagesEscapeWhatTheyShow(t *testing.T) {
	w := newDemoWorld(t)
	_, _, body := get(t, w.srv, "/?q=%3Cscript%3Ealert(1)%3C/script%3E")
	if strings.Contains(body, "<script>alert(1)") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the query is not escaped in the filter form:\n%s", body)
	}
}

func TestAnEmptyClusterBesideAFullOneSaysItHasNothingYet(t *testing.T) {
	w := newDemoWorld(t)
	_, empty := agenttest.StartCluster(t, testcluster.Options{})
	h, err := ui.New(ui.Options{
		Clusters: []ui.Cluster{{Name: "local", Reader: w.cl}, {Name: "edge", Reader: empty}},
		Repo:     w.git.repo,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, _, body := get(t, srv, "/")
	wantIn(t, "two clusters", body, "Cluster local", "Cluster edge", "No deployments in this cluster yet.", `href="/d/local/dev/web"`)
	_, _, edge := get(t, srv, "/?cluster=edge")
	if strings.Contains(edge, "Cluster local") || !strings.Contains(edge, "No deployments in this cluster yet.") {
		t.Errorf("cluster=edge shows only the empty cluster:\n%s", edge)
	}
	if code, _, _ := get(t, srv, "/d/edge/dev/web"); code != http.StatusNotFound {
		t.Errorf("a deployment the empty cluster does not have: %d, want 404", code)
	}
	if code, _, _ := get(t, srv, "/d/nowhere/dev/web"); code != http.StatusNotFound {
		t.Errorf("an unknown cluster: %d, want 404", code)
	}

	// Without a repository, the pages that read git say so.
	bare, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "edge", Reader: empty}}})
	if err != nil {
		t.Fatal(err)
	}
	bs := httptest.NewServer(bare)
	defer bs.Close()
	if code, _, body := get(t, bs, "/plan?head=main"); code != http.StatusNotFound || !strings.Contains(body, "none is configured") {
		t.Errorf("plan without a repository: %d\n%s", code, body)
	}
	if code, _, body := get(t, bs, "/"); code != http.StatusOK || !strings.Contains(body, "No deployments in this cluster yet.") {
		t.Errorf("overview without a repository: %d\n%s", code, body)
	}
}
