package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// What the API server's audit log (-audit-policy) shows of faultline's restarts: every pod
// and Job request from the teardown's first write to the next attempt's Job, by client,
// request and outcome. The write counters (writes.go) count only what succeeded; the audit
// log also shows the requests that found their pod already gone, which the API server
// spends its time on all the same.

// auditQuiet is how long faultline must have written no pod for its next pod write to
// start a teardown.
const auditQuiet = 5 * time.Second

// auditEvent is the part of an audit.k8s.io/v1 Event the accounting reads.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// request names a client's kind of request: "faultline", "delete pods".
type request struct{ client, what string }

// outcome counts requests that succeeded and those that failed (a 404 for a pod already
// gone, a 409 for one whose precondition no longer holds).
type outcome struct{ ok, failed int }

// teardownAudit is one restart's teardown as the audit log saw it.
type teardownAudit struct {
	start time.Time
	took  time.Duration // to faultline's creation of the next attempt's Job
	by    map[request]outcome
}

// auditClient names the program behind a user agent ("kube-controller-manager/v1.36.3
// (linux/amd64) kubernetes/$Format/job-controller"), and the controller-manager's
// controller: their requests share a program but not a rate limiter.
func auditClient(ua string) string {
	program, _, _ := strings.Cut(ua, "/")
	switch program {
	case "launcher":
		return sysFaultline
	case "kube-controller-manager":
		return program + " (" + ua[strings.LastIndex(ua, "/")+1:] + ")"
	}
	return program
}

// readAudit reads the audit log's pod and Job requests in the bench's namespace (not the
// agent DaemonSet's), in the order the API server received them.
func readAudit(r io.Reader) ([]auditEvent, error) {
	var out []auditEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		if o := e.ObjectRef; o != nil && e.ResponseStatus != nil && (o.Resource == "pods" || o.Resource == "jobs") && o.Namespace == namespace {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b auditEvent) int { return a.Received.Compare(b.Received) })
	return out, sc.Err()
}

// teardowns finds faultline's teardowns in events: each starts at faultline's first pod
// write after auditQuiet without one and ends when it creates the next attempt's Job. One
// that no Job ends (a run that failed) is left out.
func teardowns(events []auditEvent) []teardownAudit {
	var out []teardownAudit
	var last time.Time
	for i, e := range events {
		if auditClient(e.UserAgent) != sysFaultline || e.ObjectRef.Resource != "pods" || e.Verb == "create" {
			continue
		}
		quiet := last.IsZero() || e.Received.Sub(last) > auditQuiet
		last = e.Received
		if !quiet {
			continue
		}
		t := teardownAudit{start: e.Received, by: map[request]outcome{}}
		for _, f := range events[i:] {
			client := auditClient(f.UserAgent)
			if client == sysFaultline && f.Verb == "create" && f.ObjectRef.Resource == "jobs" {
				t.took = f.Received.Sub(t.start)
				break
			}
			what := f.Verb + " " + f.ObjectRef.Resource
			if f.ObjectRef.Subresource != "" {
				what += "/" + f.ObjectRef.Subresource
			}
			o := t.by[request{client, what}]
			if f.ResponseStatus.Code < 300 {
				o.ok++
			} else {
				o.failed++
			}
			t.by[request{client, what}] = o
		}
		if t.took > 0 {
			out = append(out, t)
		}
	}
	return out
}

// auditTable: the teardowns side by side, one row per client and request, each cell the
// requests that succeeded and, after a plus, those that failed.
func auditTable(b *strings.Builder, ts []teardownAudit) {
	if len(ts) == 0 {
		return
	}
	rows := map[request]bool{}
	for _, t := range ts {
		for k := range t.by {
			rows[k] = true
		}
	}
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b request) int {
		return cmp.Or(strings.Compare(a.client, b.client), strings.Compare(a.what, b.what))
	})
	b.WriteString("faultline's teardowns in the API server's audit log, in the order they ran: every pod and Job request from faultline's first pod write to its creation of the next attempt's Job, " +
		"by client; *n + m*: n succeeded, m failed (the pod was already gone, or a precondition no longer held):\n\n| client | request |")
	for i, t := range ts {
		fmt.Fprintf(b, " %d (%s) |", i+1, t.start.UTC().Format("15:04:05"))
	}
	b.WriteString("\n| --- | --- |" + strings.Repeat(" ---: |", len(ts)) + "\n")
	for _, k := range keys {
		fmt.Fprintf(b, "| %s | %s |", k.client, k.what)
		for _, t := range ts {
			o := t.by[k]
			fmt.Fprintf(b, " %d + %d |", o.ok, o.failed)
		}
		b.WriteString("\n")
	}
	b.WriteString("| all | |")
	for _, t := range ts {
		o := t.total()
		fmt.Fprintf(b, " %d + %d |", o.ok, o.failed)
	}
	b.WriteString("\n| seconds, requests a second | |")
	for _, t := range ts {
		o := t.total()
		fmt.Fprintf(b, " %.2f s, %.0f |", t.took.Seconds(), float64(o.ok+o.failed)/t.took.Seconds())
	}
	b.WriteString("\n\n")
}

// total is the teardown's requests, whoever sent them.
func (t teardownAudit) total() outcome {
	var o outcome
	for _, c := range t.by {
		o.ok, o.failed = o.ok+c.ok, o.failed+c.failed
	}
	return o
}

// auditTeardowns reads a session's saved audit log.
func auditTeardowns(path string) ([]teardownAudit, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, err := readAudit(f)
	if err != nil {
		return nil, err
	}
	return teardowns(events), nil
}
