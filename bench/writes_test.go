package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseWritesSortsTheAPIServersWritesByKind(t *testing.T) {
	metrics := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 300
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 256
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 250
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 5
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 512
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 9000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 20
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 30
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="faultline.dev",resource="trainingruns",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 6
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 2
`
	got := parseWrites(metrics)
	want := writeCounts{writePodCreate: 300, writeBinding: 256, writePodDelete: 250, writePodPatch: 105, writePodStatus: 512, writeEvent: 50, writeJob: 3, writeRun: 6, writeLease: 4, writeOther: 2}
	for _, k := range writeKinds {
		if got[k] != want[k] {
			t.Errorf("%s: got %.0f, want %.0f (all: %v)", k, got[k], want[k], got)
		}
	}
	if d := got.since(writeCounts{writePodCreate: 100}); d[writePodCreate] != 200 || d.total() != got.total()-100 {
		t.Errorf("since: got %v", d)
	}
}

func TestWritesTableComparesEachSystemWithTheFloor(t *testing.T) {
	r := &session{}
	r.add(sample{system: scenarioFloor, workers: 256, scenario: scenarioFloor, d: 2 * time.Second,
		writes: writeCounts{writePodCreate: 256, writeBinding: 256, writePodStatus: 256, writeOther: 32}})
	for _, deletes := range []float64{250, 256, 300, 262} { // the median of four: (256+262)/2
		r.add(sample{system: sysFaultline, workers: 256, scenario: scenarioShutdown, d: 4 * time.Second,
			writes: writeCounts{writePodCreate: 256, writePodDelete: deletes, writeBinding: 256, writePodStatus: 256, writeOther: 32}})
	}
	r.add(sample{system: sysJobSetDefault, workers: 256, scenario: scenarioShutdown, d: 8 * time.Second}) // not counted
	var b strings.Builder
	r.writesTable(&b, scenarioShutdown)
	got := b.String()
	requireRows(t, got,
		"| 256 | floor | 256 | 0 | 0 | 256 | 256 | 0 | 0 | 0 | 0 | 32 | 800 | 1.00× | 400 |",
		"| 256 | faultline | 256 | 259 | 0 | 256 | 256 | 0 | 0 | 0 | 0 | 32 | 1059 | 1.32× | 265 |",
	)
	if strings.Contains(got, sysJobSetDefault) {
		t.Errorf("a system whose writes were not counted has a row:\n%s", got)
	}
	var none strings.Builder
	(&session{samples: r.pick(sysJobSetDefault, scenarioShutdown, 256)}).writesTable(&none, scenarioShutdown)
	if none.Len() != 0 {
		t.Errorf("a table with nothing counted:\n%s", none.String())
	}
}
