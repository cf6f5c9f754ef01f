package agenttest

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/gitsource/gitserver"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/testcluster"
)

// StartCluster starts a control plane (stopped when the test ends),
// installs Styrmin's CRDs and returns it with a client of Styrmin's
// scheme, acting as the administrator.
func StartCluster(t testing.TB, opts testcluster.Options) (*testcluster.Cluster, client.Client) {
	t.Helper()
	c := testcluster.StartT(t, opts)
	if err := operator.InstallCRDs(context.Background(), c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// Apply applies YAML manifests with server-side apply, as owner.
func Apply(t testing.TB, c client.Client, owner string, docs [][]byte) {
	t.Helper()
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// ImpersonatingKubeconfig writes a copy of the admin kubeconfig that acts
// as user, so the agent runs with exactly that user's RBAC.
func ImpersonatingKubeconfig(t testing.TB, admin, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	p := filepath.Join(t.TempDir(), "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitUntil polls cond every 100 ms until it holds, failing the test
// after timeout with cond's last word on why not.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

// Options describe a World.
type Options struct {
	// Nodes is the number of fake nodes (0: the cluster's default).
	Nodes int
	// RealNode adds the cluster's real node (testcluster.Options.RealNode);
	// call testcluster.RequireRealNode first.
	RealNode *testcluster.RealNodeOptions
	// Repo is the desired-state repository's first commit.
	Repo fs.FS
	// RepoName names the repository on the git server.
	RepoName string
	// Token is the git server's token, also put in the credentials
	// Secret named SecretName in the agent's namespace.
	Token, SecretName string
}

// World is a control plane with workloads, the agent's namespace, RBAC
// and repository credentials, and a git server holding the repository.
type World struct {
	Cluster *testcluster.Cluster
	// Client acts as the administrator.
	Client client.Client
	Git    *gitserver.Server
	// URL is the repository's URL on Git.
	URL string
	// Kubeconfig acts as the agent's service account.
	Kubeconfig string
}

// Start builds a World; everything in it stops when the test ends.
func Start(t testing.TB, o Options) *World {
	t.Helper()
	c, cl := StartCluster(t, testcluster.Options{Workloads: true, Nodes: o.Nodes, RealNode: o.RealNode})
	Apply(t, cl, "test", append([][]byte{config.Namespace()}, config.RBAC()...))
	err := cl.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: o.SecretName, Namespace: config.AgentNamespace},
		Data:       map[string][]byte{operator.SecretKeyToken: []byte(o.Token)},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &World{Cluster: c, Client: cl}
	w.Kubeconfig = ImpersonatingKubeconfig(t, c.KubeconfigPath, "system:serviceaccount:"+config.AgentNamespace+":"+config.AgentServiceAccount)
	w.Git = gitserver.New(t, gitserver.WithToken(o.Token))
	w.Git.Seed(o.RepoName, o.Repo, "examples")
	w.URL = w.Git.RepoURL(o.RepoName)
	return w
}
