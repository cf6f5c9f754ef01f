package operator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/testcluster"
)

// TestAnEventWithALongNoteReachesTheAPIServerCut pins that the agent's
// recorders cut a note to what the events API accepts: a warning naming
// a fan-out's deployments, or a step's output, runs to kilobytes, and the
// API server refuses such an event outright, so it was lost.
func TestAnEventWithALongNoteReachesTheAPIServerCut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, cl := agenttest.StartCluster(t, testcluster.Options{})
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "notes"}}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "notes", Name: "regarding"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	rec := eventnote.Wrap(broadcaster.NewRecorder(cl.Scheme(), "styrmin-agent"))
	long := "the tasks of 300 deployments could not be made: " + strings.Repeat("local/dev/app (quota exceeded); ", 150)
	rec.Eventf(cm, nil, corev1.EventTypeWarning, "Long", "Sync", "%s", long)
	agenttest.WaitUntil(t, 20*time.Second, "the long note's event", func(ctx context.Context) (bool, string, error) {
		var evs eventsv1.EventList
		if err := cl.List(ctx, &evs, client.InNamespace("notes")); err != nil {
			return false, err.Error(), nil
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Long" {
				if len(ev.Note) > eventnote.MaxNote || !strings.HasPrefix(long, strings.TrimSuffix(ev.Note, "…")) {
					t.Fatalf("note of %d bytes, want the long note's start within %d", len(ev.Note), eventnote.MaxNote)
				}
				return true, "", nil
			}
		}
		return false, "no event yet", nil
	})
}
