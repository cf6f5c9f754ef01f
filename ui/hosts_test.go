package ui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/ui"
)

// emptyCluster is a cluster with no Styrmin objects, for the tests of
// what the handler does before it reads one.
func emptyCluster(t *testing.T) client.Reader {
	t.Helper()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

// getHost serves GET path on h as a browser that resolved host would
// ask for it.
func getHost(h http.Handler, host, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = host
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A web page whose name is rebound to 127.0.0.1 (DNS rebinding) makes
// the browser send its own name as the Host: such a request is refused,
// saying how to allow a host; localhost, any IP address, the hosts
// configured and a bind address's own host are served.
func TestARequestForAHostThatIsNeitherLoopbackNorAllowedIsRefused(t *testing.T) {
	cl := emptyCluster(t)
	local, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}})
	if err != nil {
		t.Fatal(err)
	}
	behindIngress, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}},
		AllowedHosts: []string{"styrmin.example.com"}, Addr: "10.0.0.5:8090"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h     *ui.Handler
		hosts []string
		want  int
	}{
		// An address names no one else's site (rebinding needs a name):
		// the [::] styrminctl ui prints for --listen :8090, a pod's IP a
		// load balancer's health check sends.
		{local, []string{"localhost:8090", "127.0.0.1:8090", "[::1]:8090", "localhost", "LocalHost:8090", "127.3.4.5:8090",
			"10.0.0.5:8090", "0.0.0.0:8090", "[::]:8090", "[fd00::5]:8090"}, http.StatusOK},
		{local, []string{"attacker.example:8090", "attacker.example", "localhost.attacker.example:8090", "127.0.0.1.attacker.example:8090",
			"styrmin.example.com", ""}, http.StatusMisdirectedRequest},
		{behindIngress, []string{"styrmin.example.com", "Styrmin.Example.COM:443", "10.0.0.5:8090", "10.0.0.6:8090", "localhost:8090"}, http.StatusOK},
		{behindIngress, []string{"attacker.example:8090", "ui.styrmin.example.com"}, http.StatusMisdirectedRequest},
	} {
		for _, host := range tc.hosts {
			for _, path := range []string{"/", "/static/ui.js"} {
				rec := getHost(tc.h, host, path)
				if rec.Code != tc.want {
					t.Errorf("GET %s with Host %q: %d, want %d\n%s", path, host, rec.Code, tc.want, rec.Body)
					continue
				}
				if rec.Code == http.StatusMisdirectedRequest && !strings.Contains(rec.Body.String(), "--ui-allowed-hosts") {
					t.Errorf("the refusal of Host %q does not say how to allow a host:\n%s", host, rec.Body)
				}
			}
		}
	}
	for _, bad := range []string{"https://styrmin.example.com", "*.example.com", "styrmin.example.com/ui", ""} {
		if _, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, AllowedHosts: []string{bad}}); err == nil {
			t.Errorf("allowed host %q: no error", bad)
		}
	}
}
