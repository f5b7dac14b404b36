package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The API server's writes, by what they wrote. On this machine the API server and etcd share
// two cores with everything else, and a restart at QPS 200 is bound by how many writes they
// can take a second: counting the writes of a restart against those of the floor shows how
// much of the gap to the floor is work that has to be done, and how much is waiting.
const (
	writePodCreate = "pod creates"
	writePodDelete = "pod deletes"
	writePodPatch  = "pod patches"
	writePodStatus = "pod status"
	writeBinding   = "bindings"
	writeEvent     = "events"
	writeJob       = "Jobs"
	writeRun       = "runs"
	writeLease     = "Leases"
	writeOther     = "other"
)

// writeKinds are the columns of the writes table, in order.
// runs: the systems' own objects (TrainingRuns, JobSets), status included.
// Leases: the nodes' and the node agents' heartbeats, and what the agents keep on theirs
// (their pods' barrier records, nodeagent --barrier-records-on-heartbeat).
var writeKinds = []string{writePodCreate, writePodDelete, writePodPatch, writePodStatus, writeBinding, writeEvent, writeJob, writeRun, writeLease, writeOther}

// writeCounts counts successful writes by kind (writeKinds).
type writeCounts map[string]float64

func (w writeCounts) total() float64 {
	t := 0.0
	for _, v := range w {
		t += v
	}
	return t
}

// since is w less before, an earlier reading.
func (w writeCounts) since(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range w {
		out[k] = v - before[k]
	}
	return out
}

// writeVerbs are apiserver_request_total's verbs that change the store (an apply is a PATCH).
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true}

// parseWrites sums the API server's successful (2xx) writes from its metrics page: a request
// that failed (a conflict, a pod already gone) wrote nothing.
func parseWrites(metrics string) writeCounts {
	const name = "apiserver_request_total{"
	out := writeCounts{}
	for _, line := range strings.Split(metrics, "\n") {
		set, value, ok := strings.Cut(strings.TrimPrefix(line, name), "} ")
		if !ok || !strings.HasPrefix(line, name) {
			continue
		}
		verb, _ := label(set, "verb")
		code, _ := label(set, "code")
		if !writeVerbs[verb] || !strings.HasPrefix(code, "2") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		resource, _ := label(set, "resource")
		sub, _ := label(set, "subresource")
		out[writeKind(resource, sub, verb)] += v
	}
	return out
}

func writeKind(resource, subresource, verb string) string {
	switch {
	case resource == "events":
		return writeEvent
	case resource == "bindings" || resource == "pods" && subresource == "binding":
		return writeBinding
	case resource == "jobs":
		return writeJob
	case resource == v1alpha1.ResourceTrainingRun || resource == cluster.JobSetGVR.Resource:
		return writeRun
	case resource == "leases":
		return writeLease
	case resource != "pods":
		return writeOther
	case subresource == "status":
		return writePodStatus
	case subresource != "":
		return writeOther
	case verb == "POST":
		return writePodCreate
	case verb == "DELETE" || verb == "DELETECOLLECTION":
		return writePodDelete
	}
	return writePodPatch
}

// apiWrites reads the API server's write counters.
func (b *bench) apiWrites(ctx context.Context) (writeCounts, error) {
	raw, err := b.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	return parseWrites(string(raw)), nil
}

// writesTable: every write the API server took from the fault until every worker ran again
// (from the Job's creation, for the floor), whoever sent it, the median of the rounds kind by
// kind. The machine does nothing else meanwhile but heartbeats (Leases).
func (r *session) writesTable(b *strings.Builder, scenario string) {
	systems := r.systems(scenario)
	measured := false
	for _, n := range r.sizes() {
		for _, sys := range systems {
			measured = measured || hasWrites(r.pick(sys, scenario, n))
		}
	}
	if !measured {
		return
	}
	b.WriteString("The API server's successful writes (`apiserver_request_total`, 2xx; a delete of a pod already being deleted counts, though it changes little), whoever sent them: from the fault until every worker ran again, " +
		"and for the floor from the Job's creation until every pod ran. The median of the rounds, column by column; *per second* is the total over the median time:\n\n" +
		"| workers | system |" + cells(writeKinds) + " total | ÷ floor | per second |\n" +
		"| ---: | --- |" + strings.Repeat(" ---: |", len(writeKinds)+3) + "\n")
	for _, n := range r.sizes() {
		floor := r.pick(scenarioFloor, scenarioFloor, n)
		floorTotal := medianWrites(floor).total()
		for _, sys := range append([]string{scenarioFloor}, systems...) {
			sc := scenario
			if sys == scenarioFloor {
				sc = scenarioFloor
			}
			ss := r.pick(sys, sc, n)
			if !hasWrites(ss) {
				continue
			}
			w := medianWrites(ss)
			fmt.Fprintf(b, "| %d | %s |", n, sys)
			for _, k := range writeKinds {
				fmt.Fprintf(b, " %.0f |", w[k])
			}
			share := "–"
			if floorTotal > 0 {
				share = fmt.Sprintf("%.2f×", w.total()/floorTotal)
			}
			d := median(ss, func(s sample) time.Duration { return s.d })
			fmt.Fprintf(b, " %.0f | %s | %.0f |\n", w.total(), share, w.total()/max(d.Seconds(), 1e-9))
		}
	}
	b.WriteString("\n")
}

func hasWrites(ss []sample) bool {
	for _, s := range ss {
		if s.writes != nil {
			return true
		}
	}
	return false
}

// medianWrites is the median of each kind over the samples that counted writes.
func medianWrites(ss []sample) writeCounts {
	out := writeCounts{}
	for _, k := range writeKinds {
		var vs []float64
		for _, s := range ss {
			if s.writes != nil {
				vs = append(vs, s.writes[k])
			}
		}
		if len(vs) > 0 {
			slices.Sort(vs)
			out[k] = midpoint(vs)
		}
	}
	return out
}
