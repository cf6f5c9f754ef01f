package task

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// logLines is a log of n numbered lines of attempt name, 31 bytes each.
func logLines(name string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "attempt %s, line %05d of work.\n", name, i)
	}
	return b.String()
}

// TestAJobsOutputKeepsItsLastAttemptsLogAndSaysWhatOfTheEarlierWasLeftOut
// pins how a runJob step's output is bounded: the last attempt's log
// (the one that says why the Job failed) is kept whole, or its end when
// it alone is over the bound; earlier attempts get the room left, the
// latest first, the one that does not fit its end; and each cut says
// what was left out. Before, the logs were joined oldest first and their
// tail kept, under a marker that said only how many bytes: a long earlier
// attempt took the room, cut into the middle of its log without its pod's
// name.
func TestAJobsOutputKeepsItsLastAttemptsLogAndSaysWhatOfTheEarlierWasLeftOut(t *testing.T) {
	t.Parallel()
	const failed = "migrate: column users.email: duplicate key value (row 17)\n"
	big, small := logLines("a", 200), logLines("b", 3) // 6200 and 93 bytes
	// Exactly the room of the two later attempts and the note.
	oldestOut := "… 6200 bytes of 1 earlier attempt(s) left out\npod j-2:\n" + small + "pod j-3:\n" + failed
	for _, tc := range []struct {
		name   string
		logs   []podLog
		headed bool
		max    int
		// want is the whole output, or, when empty, what it has: its
		// prefix, what it holds and what it ends with.
		want, prefix, suffix string
		has                  []string
	}{
		{name: "no log", max: 4096},
		{name: "one pod's log as it is", logs: []podLog{{"j-1", "done\n"}}, max: 4096, want: "done\n"},
		{name: "everything fits: every pod named, oldest first", headed: true, max: 4096,
			logs: []podLog{{"j-1", "first\n"}, {"j-2", "second\n"}},
			want: "pod j-1:\nfirst\npod j-2:\nsecond\n"},
		{name: "a log without a newline at its end ends its line", headed: true, max: 4096,
			logs: []podLog{{"j-1", "first"}, {"j-2", "second"}},
			want: "pod j-1:\nfirst\npod j-2:\nsecond"},
		{name: "a long earlier attempt: its end in the room the last one leaves", headed: true, max: 4096,
			logs:   []podLog{{"j-1", big}, {"j-2", failed}},
			prefix: "pod j-1:\n… the first ",
			has:    []string{" bytes of this log left out\nattempt a, line ", "attempt a, line 00199 of work.\npod j-2:\n" + failed},
			suffix: "\npod j-2:\n" + failed},
		{name: "the oldest attempt left out, the later ones whole", headed: true, max: len(oldestOut),
			logs: []podLog{{"j-1", big}, {"j-2", small}, {"j-3", failed}},
			want: oldestOut},
		{name: "the last attempt alone over the bound: its end, none of the earlier", headed: true, max: 1024,
			logs:   []podLog{{"j-1", small}, {"j-2", big + failed}},
			prefix: "… 93 bytes of 1 earlier attempt(s) left out\npod j-2:\n… the first ",
			has:    []string{" bytes of this log left out\nattempt a, line "},
			suffix: "attempt a, line 00199 of work.\n" + failed},
		{name: "one pod over the bound: its end from a line's start", max: 1024,
			logs:   []podLog{{"j-1", big + failed}},
			prefix: "… the first ",
			has:    []string{" bytes of this log left out\nattempt a, line "},
			suffix: failed},
		{name: "a bound too small for a note: the tail", headed: true, max: 20,
			logs: []podLog{{"j-1", big}, {"j-2", failed}},
			want: " key value (row 17)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundJobLogs(tc.logs, tc.headed, tc.max)
			if len(got) > tc.max {
				t.Errorf("%d bytes, over the bound of %d:\n%s", len(got), tc.max, got)
			}
			if tc.prefix == "" && tc.suffix == "" {
				if got != tc.want {
					t.Errorf("got\n%q\nwant\n%q", got, tc.want)
				}
				return
			}
			if !strings.HasPrefix(got, tc.prefix) || !strings.HasSuffix(got, tc.suffix) {
				t.Errorf("got\n%s\nwant it to start with %q and end with %q", got, tc.prefix, tc.suffix)
			}
			for _, h := range tc.has {
				if !strings.Contains(got, h) {
					t.Errorf("got\n%s\nwant it to hold %q", got, h)
				}
			}
			// What a note says was left out, and what was kept, are the
			// log: a cut log restarts at a line's start.
			if i := strings.Index(got, " bytes of this log left out\n"); i >= 0 {
				var n int
				start := strings.LastIndex(got[:i], "… the first ") + len("… the first ")
				if _, err := fmt.Sscanf(got[start:i], "%d", &n); err != nil {
					t.Fatalf("no number in the note %q", got[:i])
				}
				rest := got[i+len(" bytes of this log left out\n"):]
				for _, l := range tc.logs {
					if n > 0 && n < len(l.text) && strings.HasPrefix(l.text[n:], rest[:min(len(rest), len(l.text)-n)]) && l.text[n-1] == '\n' {
						return
					}
				}
				t.Errorf("the note says %d bytes were left out, and what follows is not the rest of a log from a line's start:\n%s", n, got)
			}
		})
	}
}

// TestEveryBoundOfAJobsOutputHoldsItsLastLinesFirst checks boundJobLogs
// over every bound: never over it, and the last attempt's last line kept
// as soon as there is room for it and a note.
func TestEveryBoundOfAJobsOutputHoldsItsLastLinesFirst(t *testing.T) {
	t.Parallel()
	logs := []podLog{{"j-1", logLines("a", 40)}, {"j-2", logLines("b", 2)}, {"j-3", logLines("c", 40) + "the end\n"}}
	for max := range 3000 {
		got := boundJobLogs(logs, true, max)
		if len(got) > max {
			t.Fatalf("bound %d: %d bytes", max, len(got))
		}
		if max >= 200 && !strings.HasSuffix(got, "attempt c, line 00039 of work.\nthe end\n") {
			t.Fatalf("bound %d: the last attempt's end is not kept:\n%s", max, got)
		}
	}
}

// podLogsOf answers each pod's log from a map.
type podLogsOf map[string]string

func (p podLogsOf) Logs(_ context.Context, _, pod, _ string) (string, error) { return p[pod], nil }

// liveContextReader answers a Get as an API server without the object,
// or with the error of a done context.
type liveContextReader struct{ client.Reader }

func (liveContextReader) Get(ctx context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
}

// TestAJobsLogsAreMaskedBeforeTheyAreCut: a value on a long line at the
// edge of what is kept is masked whole, not cut into a piece no mask
// finds; and the values to mask are read with the step's context, not
// one of a log's read, done by then (the output was withheld).
func TestAJobsLogsAreMaskedBeforeTheyAreCut(t *testing.T) {
	t.Parallel()
	const ns, secret = "dev-jobs", "hunter2-secret-value"
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jobs-migrate-1"}}
	pod := func(name string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"job-name": job.Name},
				CreationTimestamp: metav1.NewTime(time.Now().Add(-age).Truncate(time.Second))},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Command: []string{"migrate"}}}},
		}
	}
	c := fake.NewClientBuilder().WithObjects(pod("jobs-migrate-1-zzz", 3*time.Minute), pod("jobs-migrate-1-aaa", time.Minute)).Build()
	r := &Reconciler{opts: Options{APIReader: c}}
	run := &taskRun{
		task:  &v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Namespace: ns}},
		actor: &Actor{Reader: liveContextReader{}, Logs: podLogsOf{"jobs-migrate-1-zzz": strings.Repeat("x"+secret, 500), "jobs-migrate-1-aaa": "password " + secret + " refused\n"}},
		// A deployment with sensitive values, whose Secret is read to
		// mask them, and the credentials of a backup's job.
		instance: &resolver.Instance{Context: &drivers.Context{Parameters: map[string]any{
			"token": resolver.PlaceholderPrefix + strings.Repeat("ab", 32),
		}}},
		credentials:     resolver.Sensitive{"password": secret},
		credentialsRead: true,
	}
	got := r.jobLogs(context.Background(), run, job, []string{"migrate"}, 1000)
	if !strings.HasPrefix(got, "pod jobs-migrate-1-zzz:\n… the first ") || !strings.HasSuffix(got, "pod jobs-migrate-1-aaa:\npassword (sensitive) refused\n") {
		t.Errorf("got\n%s\nwant the older pod's end, then the last one's log, masked", got)
	}
	for i := 0; i+6 <= len(secret); i++ {
		if piece := secret[i : i+6]; strings.Contains(got, piece) {
			t.Fatalf("%q of the value is in the output:\n%s", piece, got)
		}
	}
}
