package termmsg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What is kept from above the tail: the first traceback's header, last frame and exception
// line; error and fatal records with their continuation lines, up to a stack trace; NCCL's
// warnings; nothing else.
func TestKeepLines(t *testing.T) {
	for name, tc := range map[string]struct {
		lines []string
		want  []string
	}{
		"the first of two chained tracebacks": {
			lines: []string{
				"step 1 loss 2.3",
				"Traceback (most recent call last):",
				`  File "/app/train.py", line 10, in <module>`,
				"    main()",
				`  File "/app/train.py", line 7, in main`,
				"    load(path)",
				"    ^^^^^^^^^^",
				"FileNotFoundError: /data/shard-7",
				"",
				"During handling of the above exception, another exception occurred:",
				"",
				"Traceback (most recent call last):",
				`  File "/app/train.py", line 12, in <module>`,
				"RuntimeError: cleanup failed",
			},
			want: []string{
				"Traceback (most recent call last):",
				`  File "/app/train.py", line 7, in main`,
				"    load(path)",
				"FileNotFoundError: /data/shard-7",
			},
		},
		"torchrun's rank prefix": {
			lines: []string{
				"[rank3]: Traceback (most recent call last):",
				`[rank3]:   File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 3075, in all_reduce`,
				"[rank3]:     work.wait()",
				"[rank3]: RuntimeError: Connection closed by peer [127.0.0.1]:11469",
				"[rank2]: unrelated",
			},
			want: []string{
				"[rank3]: Traceback (most recent call last):",
				`[rank3]:   File "/usr/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 3075, in all_reduce`,
				"[rank3]:     work.wait()",
				"[rank3]: RuntimeError: Connection closed by peer [127.0.0.1]:11469",
			},
		},
		"a record's continuation ends at its stack trace; info and warnings are not kept": {
			lines: []string{
				"I1127 02:26:37.000000 1 coordination_service.cc:100] Initializing CoordinationService",
				"W1127 02:26:37.100000 1 x.cc:1] slow",
				"E1127 02:27:02.731576 2306 coordination_service.cc:1518] Use error polling to propagate: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
				"2",
				"The tasks have crashed.",
				"=== Source Location Trace: ===",
				"external/xla+/xla/pjrt/distributed/coordination/coordination_service.cc:232",
				"host:1:2 [0] NCCL INFO Channel 00/02",
				"host:1:2 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer host-1<34512>",
			},
			want: []string{
				"E1127 02:27:02.731576 2306 coordination_service.cc:1518] Use error polling to propagate: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
				"2",
				"The tasks have crashed.",
				"host:1:2 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer host-1<34512>",
			},
		},
		"the same record logged again counts once": {
			lines: []string{
				"E1127 02:26:50.167238 1750 coordination_service_agent.cc:288] Polled an error from coordination service.",
				"E1127 02:26:50.167285 1788 coordination_service_agent.cc:288] Polled an error from coordination service.",
			},
			want: []string{"E1127 02:26:50.167238 1750 coordination_service_agent.cc:288] Polled an error from coordination service."},
		},
		"nothing that matters": {
			lines: []string{"step 1", "step 2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, keepLines(tc.lines)); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
}

// The budget: fatal records before errors, whole records only, each line clipped.
func TestKeepLinesBudget(t *testing.T) {
	var lines []string
	for range 40 {
		lines = append(lines, "E1127 02:27:02.000000 1 a.cc:1] "+strings.Repeat("e", 100)+strings.Repeat("x", len(lines)))
	}
	long := "F1127 02:27:03.000000 1 client.h:86] Terminating process " + strings.Repeat("f", 2*maxKeptLine)
	lines = append(lines, long)
	got := keepLines(lines)
	if n := len(strings.Join(got, "\n")) + 1; n > MaxKeptBytes {
		t.Errorf("kept %d bytes, want at most %d", n, MaxKeptBytes)
	}
	if len(got) == 0 || got[len(got)-1] != long[:maxKeptLine]+"…" {
		t.Errorf("the fatal record, clipped, is not kept: %q", got)
	}
	if len(got) < 10 {
		t.Errorf("kept %d lines: the error records that fit beside the fatal one are missing", len(got))
	}
}

// ReadReport reads the log as the kubelet does (both streams, the runtime's partial lines
// joined) and keeps what Kept keeps; a message file is the program's own and is kept as it
// is; a container whose policy does not fall back reports no log.
func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	var cri []string
	var lines []string
	cri = append(cri, "stderr F Traceback (most recent call last):", `stderr F   File "train.py", line 3, in <module>`, "stderr P RuntimeError: ", "stderr F worker 2 failed")
	lines = append(lines, "Traceback (most recent call last):", `  File "train.py", line 3, in <module>`, "RuntimeError: worker 2 failed")
	for i := range 100 {
		l := "    @     0x7f4c2612d7d4  frame " + strings.Repeat("x", i%7)
		cri = append(cri, "stderr F "+l)
		lines = append(lines, l)
	}
	logPath := criLog(t, dir, cri...)
	msgFile := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(msgFile, []byte("checkpoint saved; bye"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := func(hostPath string, policy corev1.TerminationMessagePolicy) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{ExitCode: 134, LogPath: logPath, Metadata: &runtimeapi.ContainerMetadata{Name: "worker"},
			Annotations: map[string]string{AnnotationPath: "/dev/termination-log", AnnotationPolicy: string(policy)},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: hostPath}}}
	}
	fromLog, err := ReadReport(st(filepath.Join(dir, "missing"), corev1.TerminationMessageFallbackToLogsOnError))
	if err != nil {
		t.Fatal(err)
	}
	if want := Kept(lines); fromLog != want {
		t.Errorf("from the log: %q\nwant %q", fromLog, want)
	}
	if !strings.HasPrefix(fromLog, "Traceback (most recent call last):\n") || !strings.Contains(fromLog, "RuntimeError: worker 2 failed\n"+keptMark+"\n") {
		t.Errorf("from the log: %q; want the traceback kept above the tail", fromLog)
	}
	tail, err := Read(st(filepath.Join(dir, "missing"), corev1.TerminationMessageFallbackToLogsOnError))
	if err != nil || !strings.HasSuffix(fromLog, "\n"+tail) || strings.Contains(tail, "RuntimeError") {
		t.Errorf("the kubelet's message %q (error %v): want the report to end with it, and it to have lost the traceback", tail, err)
	}
	if got, err := ReadReport(st(msgFile, corev1.TerminationMessageFallbackToLogsOnError)); err != nil || got != "checkpoint saved; bye" {
		t.Errorf("with a message file: %q, %v; want the file's message", got, err)
	}
	if got, err := ReadReport(st(filepath.Join(dir, "missing"), corev1.TerminationMessageReadFile)); err != nil || got != "" {
		t.Errorf("without the fallback: %q, %v; want no message", got, err)
	}
}
