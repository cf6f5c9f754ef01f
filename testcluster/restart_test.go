package testcluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/testcluster"
)

// TestAPIServerRestartKeepsAddressCredentialsAndObjects stops
// kube-apiserver (requests fail), starts it again and finds the same
// client working against the same objects, and the admin kubeconfig too.
func TestAPIServerRestartKeepsAddressCredentialsAndObjects(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	cl := newClient(t, c)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"a": "1"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	host := c.RESTConfig.Host

	start := time.Now()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %s", time.Since(start).Round(time.Millisecond))
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := cl.Get(short, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err == nil {
		t.Fatal("a read succeeded while the API server was stopped")
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatalf("stopping a stopped API server: %v", err)
	}

	start = time.Now()
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started again in %s", time.Since(start).Round(time.Millisecond))
	if c.RESTConfig.Host != host {
		t.Fatalf("the API server moved from %s to %s", host, c.RESTConfig.Host)
	}
	var got corev1.ConfigMap
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil || got.Data["a"] != "1" {
		t.Fatalf("after the restart: %v %v, want the ConfigMap kept", err, got.Data)
	}
}
