package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/fake"
	restfake "k8s.io/client-go/rest/fake"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// TestMadeFor: the pods that ran an attempt are labelled with it, or, for an attempt that
// restarted in place, with any attempt since its Job's (a pod keeps the attempt it was made
// for); an attempt that recreated its pods has its own only.
func TestMadeFor(t *testing.T) {
	run := inPlaceRun() // attempt 2 restarted in place in attempt 1's Job
	if got := madeFor(run, 2); !cmp.Equal(got, []string{"1", "2"}) {
		t.Errorf("in-place attempt 2: %v, want [1 2]", got)
	}
	if got := madeFor(run, 1); !cmp.Equal(got, []string{"1"}) {
		t.Errorf("attempt 1: %v, want [1]", got)
	}
	if got := madeFor(runningRun(), 2); !cmp.Equal(got, []string{"2"}) {
		t.Errorf("recreated attempt 2: %v, want [2]", got)
	}
}

// TestPodLogOptions: --since (rounded up to the kubelet's whole seconds), --timestamps,
// --previous and --tail reach the kubelet's log request.
func TestPodLogOptions(t *testing.T) {
	got := podLogOptions(LogsOptions{Tail: 100, Since: 1500 * time.Millisecond, Timestamps: true, Previous: true, Follow: true}, "worker")
	want := &corev1.PodLogOptions{Container: "worker", Follow: true, Timestamps: true, Previous: true, TailLines: ptr.To[int64](100), SinceSeconds: ptr.To[int64](2)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PodLogOptions (-want +got):\n%s", diff)
	}
	if got := podLogOptions(LogsOptions{Tail: -1}, "w"); got.TailLines != nil || got.SinceSeconds != nil {
		t.Errorf("no --tail, no --since: %+v, want neither", got)
	}
}

// TestLogsMaxStreams: --follow refuses more workers than --max-streams (each stream stays
// open) before opening any; without --follow every worker is read, that many at a time.
func TestLogsMaxStreams(t *testing.T) {
	run := runningRun()
	objs := []runtime.Object{}
	for i := range 5 {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("llm-%d", i), Namespace: run.Namespace, Labels: map[string]string{
				v1alpha1.LabelRun: run.Name, v1alpha1.LabelAttempt: strconv.Itoa(int(run.Status.Attempt)), batchv1.JobCompletionIndexAnnotation: strconv.Itoa(i),
			}},
			Spec:   corev1.PodSpec{NodeName: "gpu-node-1", Containers: []corev1.Container{{Name: "worker"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1"}})
	kube := fake.NewClientset(objs...)
	runs := &Runs{REST: fakeRunsREST(t, run), Namespace: run.Namespace}
	var out, errOut bytes.Buffer
	err := Logs(context.Background(), kube, runs, run.Name, LogsOptions{Index: -1, Tail: -1, Follow: true, MaxStreams: 4}, &out, &errOut)
	if msg, code := Message(err, ""); code != ExitUsage || !strings.Contains(msg, "5 workers, but --max-streams is 4") {
		t.Errorf("follow 5 workers with 4 streams: exit %d, %q", code, msg)
	}
	if err := Logs(context.Background(), kube, runs, run.Name, LogsOptions{Index: -1, Tail: -1, MaxStreams: 2}, &out, &errOut); err != nil {
		t.Fatalf("%v (stderr %s)", err, errOut.String())
	}
	if n := strings.Count(out.String(), "fake logs"); n != 5 {
		t.Errorf("read %d workers' logs, want all 5:\n%s", n, out.String())
	}
}

// fakeRunsREST serves one run, as the API server would to Runs.Get.
func fakeRunsREST(t *testing.T, run *v1alpha1.TrainingRun) *restfake.RESTClient {
	t.Helper()
	body, err := json.Marshal(forOutput(run))
	if err != nil {
		t.Fatal(err)
	}
	return &restfake.RESTClient{
		NegotiatedSerializer: serializer.NewCodecFactory(clientScheme).WithoutConversion(),
		GroupVersion:         v1alpha1.GroupVersion,
		Client: restfake.CreateHTTPClient(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": []string{"application/json"}},
				Body: io.NopCloser(bytes.NewReader(body))}, nil
		}),
	}
}

// TestAttemptLines: a worker whose barrier supervises it runs every attempt in one
// container: its log is cut at the barrier's markers, --since and --tail apply to the
// attempt's own lines, and the kubelet's timestamps are shown only if asked for.
func TestAttemptLines(t *testing.T) {
	now := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	at := func(s int, text string) string {
		return now.Add(time.Duration(s)*time.Second).Format(time.RFC3339Nano) + " " + text
	}
	log := []string{
		at(-30, "waiting for the go signal"),
		at(-29, barrier.AttemptMarker(1)),
		at(-28, "attempt 1: step 1"),
		at(-20, "attempt 1: step 2"),
		at(-10, barrier.AttemptMarker(2)),
		// The marker on the other stream, after the worker's first line on this one.
		at(-9, "attempt 2: step 1"),
		at(-9, barrier.AttemptMarker(2)),
		at(-1, "attempt 2: step 2"),
	}
	for name, tc := range map[string]struct {
		attempt int
		o       LogsOptions
		want    []string
	}{
		"attempt 1":             {1, LogsOptions{Tail: -1}, []string{barrier.AttemptMarker(1), "attempt 1: step 1", "attempt 1: step 2"}},
		"attempt 2":             {2, LogsOptions{Tail: -1}, []string{barrier.AttemptMarker(2), "attempt 2: step 1", "attempt 2: step 2"}},
		"attempt 2, tail 1":     {2, LogsOptions{Tail: 1}, []string{"attempt 2: step 2"}},
		"attempt 1, since 25 s": {1, LogsOptions{Tail: -1, Since: 25 * time.Second}, []string{"attempt 1: step 2"}},
		"attempt 2, timestamps": {2, LogsOptions{Tail: 1, Timestamps: true}, []string{at(-1, "attempt 2: step 2")}},
		"attempt 3, not yet":    {3, LogsOptions{Tail: -1}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			err := copyLines(strings.NewReader(strings.Join(log, "\n")), &attemptLines{attempt: tc.attempt, o: tc.o, now: now},
				func(line string) { got = append(got, line) })
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
