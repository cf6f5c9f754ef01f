package agenttest

import (
	"net/http"
	"strings"
	"testing"
)

// Deliver posts a GitHub webhook delivery (event, delivery id, signature
// header and JSON body) to url and returns the status code.
func Deliver(t testing.TB, url, event, delivery, sig, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
