package install

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AgentInfo is what the cluster tells of the installed agent.
type AgentInfo struct {
	// Deployment is namespace/name of the agent's Deployment.
	Deployment string `json:"deployment"`
	// Image is the agent container's image, Tag its tag ("" for none or
	// a digest only).
	Image string `json:"image"`
	Tag   string `json:"tag,omitempty"`
	// Version is the Deployment's LabelVersion: the styrminctl that
	// installed it ("" when none stamped it).
	Version string `json:"version,omitempty"`
	// ReadyReplicas of Replicas are ready.
	ReadyReplicas int32 `json:"readyReplicas"`
	Replicas      int32 `json:"replicas"`
}

// Agent reads the agent's Deployment in namespace ns.
func Agent(ctx context.Context, cfg *rest.Config, ns string) (AgentInfo, error) {
	c, err := newClient(cfg)
	if err != nil {
		return AgentInfo{}, err
	}
	dep, err := readAgent(ctx, c, ns)
	if err != nil {
		return AgentInfo{}, err
	}
	return agentInfo(dep), nil
}

func readAgent(ctx context.Context, c client.Reader, ns string) (*appsv1.Deployment, error) {
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: agentDeployment}, &dep); err != nil {
		return nil, fmt.Errorf("reading the agent's Deployment %s/%s: %w", ns, agentDeployment, err)
	}
	return &dep, nil
}

func agentInfo(dep *appsv1.Deployment) AgentInfo {
	in := AgentInfo{
		Deployment:    dep.Namespace + "/" + dep.Name,
		Version:       dep.Labels[LabelVersion],
		ReadyReplicas: dep.Status.ReadyReplicas,
		Replicas:      1,
	}
	if dep.Spec.Replicas != nil {
		in.Replicas = *dep.Spec.Replicas
	}
	if c := agentContainerOf(dep); c != nil {
		in.Image = c.Image
		in.Tag = tagOf(c.Image)
	}
	return in
}

// agentArgs are the agent container's arguments.
func agentArgs(dep *appsv1.Deployment) []string {
	if c := agentContainerOf(dep); c != nil {
		return c.Args
	}
	return nil
}

func agentContainerOf(dep *appsv1.Deployment) *corev1.Container {
	for i := range dep.Spec.Template.Spec.Containers {
		if c := &dep.Spec.Template.Spec.Containers[i]; c.Name == agentContainer {
			return c
		}
	}
	return nil
}

// tagOf is the tag of an image reference ("" when it has none).
func tagOf(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[i+1:]
	}
	return ""
}

// KubernetesVersion is the API server's version (its gitVersion,
// "v1.37.2").
func KubernetesVersion(cfg *rest.Config) (string, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 15 * time.Second
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("kubernetes discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the API server's version at %s: %w", cfg.Host, err)
	}
	return v.GitVersion, nil
}
