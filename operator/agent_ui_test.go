package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/browser"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// statusHost implements GitHub's POST /repos/{owner}/{repo}/statuses/{sha}
// for the agent's reports, checking the token.
type statusHost struct {
	mu  sync.Mutex
	got map[string][]map[string]string // by sha
}

func (h *statusHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.Method != http.MethodPost || len(parts) != 5 || strings.Join(parts[:4], "/") != "repos/acme/desired/statuses" {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+agentGitToken {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	var s map[string]string
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		http.Error(w, `{"message":"Problems parsing JSON"}`, http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.got[parts[4]] = append(h.got[parts[4]], s)
	h.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (h *statusHost) states(sha string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, s := range h.got[sha] {
		out = append(out, s["context"]+"="+s["state"])
	}
	return out
}

// last is the newest status of context ctx posted on sha (nil if none).
func (h *statusHost) last(sha, ctx string) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[string]string
	for _, s := range h.got[sha] {
		if s["context"] == ctx {
			out = s
		}
	}
	return out
}

func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestAgentServesTheUIAndReportsEachLockCommitToTheGitHost runs the agent
// with --ui-bind-address and --report-statuses: the lock commit's result
// reaches the git host as a commit status of context styrmin/local
// (pending, then success once its tasks succeeded), the UI serves the
// deployments and the timeline from the agent's clone, and the token is
// in no log line.
func TestAgentServesTheUIAndReportsEachLockCommitToTheGitHost(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	host := &statusHost{got: map[string][]map[string]string{}}
	gh := httptest.NewServer(host)
	defer gh.Close()
	addr := freeAddress(t)
	e.startAgent(t, "--ui-bind-address="+addr, "--report-statuses", "--status-api-url="+gh.URL, "--status-repository=acme/desired",
		"--status-target-url=http://"+addr+"/")
	seqs := e.lock(t)
	head, err := e.clone.Head()
	if err != nil {
		t.Fatal(err)
	}
	e.waitTask(t, hubNamespace, "hub", seqs["hub"])
	e.waitTask(t, webNamespace, "web", seqs["web"])
	deadline := time.Now().Add(agentWaitLimit)
	for {
		st := host.states(head.String())
		if len(st) > 0 && st[len(st)-1] == "styrmin/local=success" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the git host got %v for the lock commit, want styrmin/local=success last", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A lockfile deleted by hand is refused (a deleted deployment leaves
	// a tombstone): its commit makes no task, and is reported a failure.
	refused := e.git.Commit(agentRepoName, "web's lockfile deleted by hand", map[string][]byte{"locks/local/dev/web.lock.yaml": nil})
	for {
		st := host.states(refused)
		if len(st) > 0 && st[len(st)-1] == "styrmin/local=failure" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the git host got %v for the commit that deleted a lockfile, want styrmin/local=failure", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if body := get("/"); !strings.Contains(body, `href="/d/local/dev/hub"`) || !strings.Contains(body, `href="/d/local/dev/web"`) {
		t.Errorf("the agent's overview lacks the deployments:\n%s", body)
	}
	if body := get("/d/local/dev/hub/timeline"); !strings.Contains(body, head.Short()) {
		t.Errorf("the timeline lacks the lock commit %s:\n%s", head.Short(), body)
	}
	// The agent caches finished tasks without their steps
	// (task.TrimFinished); the task page reads the task itself.
	var hubTask v1alpha1.StyrminTask
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: hubNamespace, Name: v1alpha1.TaskName("hub", seqs["hub"])}, &hubTask); err != nil {
		t.Fatal(err)
	}
	if len(hubTask.Status.Steps) == 0 {
		t.Fatalf("task %s has no steps", hubTask.Name)
	}
	taskPage := get("/t/local/" + hubNamespace + "/" + hubTask.Name)
	for _, st := range hubTask.Status.Steps {
		if !strings.Contains(taskPage, html.EscapeString(st.Name)) {
			t.Errorf("the page of the finished task %s lacks its step %s:\n%s", hubTask.Name, st.Name, taskPage)
		}
	}
	if strings.Contains(e.agent.Log(), agentGitToken) {
		t.Error("the agent's log holds the token")
	}
	// A browser over the running agent: the DOM it builds, no page part
	// the policy refuses (the ui package's test loads every page).
	if bin := browser.Find(); bin != "" {
		for path, want := range map[string]string{"/": "Cluster local", "/t/local/dev-hub/hub-" + fmt.Sprint(seqs["hub"]): "Succeeded"} {
			out, errOut, err := browser.Run(context.Background(), bin, t.TempDir(), "--virtual-time-budget=2000", "--dump-dom", "http://"+addr+path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, want) || strings.Contains(errOut, "Content Security Policy") {
				t.Errorf("chromium on %s: the DOM lacks %q or the policy refused a part:\n%s\n%s", path, want, out, errOut)
			}
		}
	} else if os.Getenv("CI") != "" {
		t.Error("chromium is not installed (.ci/run installs it)")
	}
}
