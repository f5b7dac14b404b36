package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestTeardownsCountEveryClientsRequestsUntilTheNextJob(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 0, 18, 29, 0, time.UTC)
	const (
		faultlineUA = "launcher/v0.1.0 (linux/amd64) faultline"
		gcUA        = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/$Format/generic-garbage-collector"
		kwokUA      = "kwok-controller/v0.8.0 (linux/amd64) kwok"
		schedUA     = "kube-scheduler/v1.36.3 (linux/amd64) kubernetes/$Format/scheduler"
	)
	line := func(at time.Duration, ua, verb, ns, resource, sub string, code int) string {
		return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":%q,"userAgent":%q,"objectRef":{"resource":%q,"subresource":%q,"namespace":%q,"name":"w-0"},"responseStatus":{"code":%d},"requestReceivedTimestamp":%q}`,
			verb, ua, resource, sub, ns, code, t0.Add(at).Format(time.RFC3339Nano))
	}
	log := strings.Join([]string{
		// Out of order on purpose: the log is written as requests complete.
		line(1100*time.Millisecond, gcUA, "delete", namespace, "pods", "", 200),
		line(0, faultlineUA, "patch", namespace, "pods", "", 200),
		line(1000*time.Millisecond, faultlineUA, "delete", namespace, "jobs", "", 200),
		line(1050*time.Millisecond, faultlineUA, "delete", namespace, "pods", "", 200),
		line(1200*time.Millisecond, gcUA, "delete", namespace, "pods", "", 404),
		line(1300*time.Millisecond, kwokUA, "delete", namespace, "pods", "", 200),
		line(1400*time.Millisecond, kwokUA, "delete", "faultline-system", "pods", "", 200), // the agent's pods are not the gang's
		line(1500*time.Millisecond, kwokUA, "delete", namespace, "pods", "", 404),
		line(2*time.Second, faultlineUA, "create", namespace, "jobs", "", 201),
		line(3*time.Second, schedUA, "create", namespace, "pods", "binding", 201),
		line(4*time.Second, faultlineUA, "patch", namespace, "pods", "", 200),   // within auditQuiet of the last: no new teardown
		line(30*time.Second, faultlineUA, "delete", namespace, "pods", "", 200), // a failed run's: no Job follows
		line(31*time.Second, kwokUA, "delete", namespace, "pods", "", 200),
	}, "\n")
	events, err := readAudit(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	ts := teardowns(events)
	if len(ts) != 1 {
		t.Fatalf("got %d teardowns, want 1: %+v", len(ts), ts)
	}
	td := ts[0]
	if !td.start.Equal(t0) || td.took != 2*time.Second {
		t.Errorf("teardown from %v for %v, want from %v for 2s", td.start, td.took, t0)
	}
	gc := "kube-controller-manager (generic-garbage-collector)"
	want := map[request]outcome{
		{sysFaultline, "patch pods"}:       {ok: 1},
		{sysFaultline, "delete jobs"}:      {ok: 1},
		{sysFaultline, "delete pods"}:      {ok: 1},
		{gc, "delete pods"}:                {ok: 1, failed: 1},
		{"kwok-controller", "delete pods"}: {ok: 1, failed: 1},
	}
	if len(td.by) != len(want) {
		t.Errorf("got requests %v, want %v", td.by, want)
	}
	for k, w := range want {
		if got := td.by[k]; got != w {
			t.Errorf("%s %s: got %+v, want %+v", k.client, k.what, got, w)
		}
	}

	var b strings.Builder
	auditTable(&b, ts)
	for _, row := range []string{
		"| faultline | delete pods | 1 + 0 |",
		"| " + gc + " | delete pods | 1 + 1 |",
		"| kwok-controller | delete pods | 1 + 1 |",
		"| all | | 5 + 2 |",
		"| seconds, requests a second | | 2.00 s, 4 |",
	} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("the table lacks %q:\n%s", row, b.String())
		}
	}
}
