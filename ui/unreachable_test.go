package ui_test

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/ui"
)

// A task page reads the task from the API server: when that cannot be
// reached, the page says the cluster could not be read (502), not that the
// task does not exist (404); a task that is not there is still 404.
func TestATaskPageOfAClusterThatCannotBeReachedSaysSoRatherThanNotFound(t *testing.T) {
	_, cl := controlPlane(t)
	// An address nothing listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	gone, err := client.New(&rest.Config{Host: "http://" + addr}, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		live client.Reader
		want int
		says string
	}{
		{gone, http.StatusBadGateway, "reading task nowhere/no-task from cluster local"},
		{cl, http.StatusNotFound, "task nowhere/no-task in cluster local"},
	} {
		h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl, Live: tc.live}}})
		if err != nil {
			t.Fatal(err)
		}
		rec := getHost(h, "localhost", "/t/local/nowhere/no-task")
		if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.says) {
			t.Errorf("GET a task's page: %d, want %d saying %q\n%s", rec.Code, tc.want, tc.says, rec.Body)
		}
	}
}
