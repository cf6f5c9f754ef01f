package testcluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// fakeNodeAnnotation marks the nodes kwok manages.
const fakeNodeAnnotation = "kwok.x-k8s.io/node"

// NodeNamePrefix starts the name of every fake node: kwok-node-0, kwok-node-1, …
const NodeNamePrefix = "kwok-node-"

// fakeNode is a Node that kwok manages: it reports it Ready and runs the
// pods bound to it without containers.
func fakeNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("32"),
		corev1.ResourceMemory:           resource.MustParse("256Gi"),
		corev1.ResourcePods:             resource.MustParse("250"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{fakeNodeAnnotation: "fake"},
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				Architecture:    "amd64",
				KubeletVersion:  "fake",
			},
		},
	}
}

// addNodes creates n fake nodes and waits until all are Ready and untainted,
// failing early if a workload component exits.
func (c *Cluster) addNodes(ctx context.Context, n int) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	for i := range n {
		node := fakeNode(NodeNamePrefix + strconv.Itoa(i))
		// Nodes take their status (capacity) on create.
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("testcluster: creating node %s: %w", node.Name, err)
		}
		c.NodeNames = append(c.NodeNames, node.Name)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.exited(); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil && countSchedulable(list.Items) >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: waiting for %d fake nodes to be Ready (logs in %s): %w", n, c.LogDir, ctx.Err())
		case <-tick.C:
		}
	}
}

// countSchedulable counts nodes that are Ready and carry no NoSchedule or
// NoExecute taint (new nodes carry node.kubernetes.io/not-ready until the
// node lifecycle controller sees them Ready).
func countSchedulable(nodes []corev1.Node) int {
	n := 0
	for _, node := range nodes {
		if isReady(node) && !hasBlockingTaint(node) {
			n++
		}
	}
	return n
}

func isReady(node corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasBlockingTaint(node corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}
