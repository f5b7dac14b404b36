package termmsg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criLog writes lines in the CRI log format, as containerd writes a container's log.
func criLog(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, "0.log")
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("2026-11-26T06:00:00.000000000Z " + l + "\n")
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	msgFile := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(msgFile, []byte("checkpoint saved; bye"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", 5000)+"END"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := criLog(t, dir, "stdout F step 1", "stderr F jax.errors.JaxRuntimeError: DEADLINE_EXCEEDED", "stderr P Barrier timed ", "stderr F out")
	// An exited container as the runtime shows it, with the kubelet's annotations.
	status := func(exit int32, hostPath string, path string, policy corev1.TerminationMessagePolicy) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{ExitCode: exit, LogPath: logPath, Metadata: &runtimeapi.ContainerMetadata{Name: "worker"},
			Annotations: map[string]string{AnnotationPath: path, AnnotationPolicy: string(policy)},
			Mounts:      []*runtimeapi.Mount{{ContainerPath: "/etc/hosts", HostPath: "/nonexistent/hosts"}, {ContainerPath: "/dev/termination-log", HostPath: hostPath}}}
	}
	const path = "/dev/termination-log"
	for _, tc := range []struct {
		name string
		st   *runtimeapi.ContainerStatus
		want string
	}{
		{"the file", status(1, msgFile, path, corev1.TerminationMessageReadFile), "checkpoint saved; bye"},
		{"the file wins over the log", status(1, msgFile, path, corev1.TerminationMessageFallbackToLogsOnError), "checkpoint saved; bye"},
		{"an empty file and no fallback", status(1, empty, path, corev1.TerminationMessageReadFile), ""},
		{"an empty file falls back to the log", status(1, empty, path, corev1.TerminationMessageFallbackToLogsOnError),
			"step 1\njax.errors.JaxRuntimeError: DEADLINE_EXCEEDED\nBarrier timed out\n"},
		{"a missing file falls back to the log", status(1, filepath.Join(dir, "missing"), path, corev1.TerminationMessageFallbackToLogsOnError),
			"step 1\njax.errors.JaxRuntimeError: DEADLINE_EXCEEDED\nBarrier timed out\n"},
		{"exit 0 never reads the log", status(0, empty, path, corev1.TerminationMessageFallbackToLogsOnError), ""},
		{"the file's last 4 KiB", status(1, big, path, corev1.TerminationMessageReadFile), strings.Repeat("x", MaxFileBytes-3) + "END"},
		{"no mount at the path", status(1, msgFile, "/tmp/msg", corev1.TerminationMessageReadFile), ""},
		{"no annotations: nothing to read", &runtimeapi.ContainerStatus{ExitCode: 1, LogPath: logPath}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.st)
			if err != nil || got != tc.want {
				t.Errorf("Read = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestReadUnreadableFile(t *testing.T) {
	dir := t.TempDir() // a directory where the file should be: reading it fails
	_, err := Read(&runtimeapi.ContainerStatus{ExitCode: 1, Metadata: &runtimeapi.ContainerMetadata{Name: "worker"},
		Annotations: map[string]string{AnnotationPath: "/dev/termination-log"},
		Mounts:      []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: dir}}})
	if err == nil || !strings.Contains(err.Error(), "container worker") {
		t.Errorf("Read of a directory: %v; want an error naming the container", err)
	}
}

func TestLogTailLimits(t *testing.T) {
	var lines []string
	for i := range 100 {
		lines = append(lines, fmt.Sprintf("stdout F line %d", i))
	}
	lines = append(lines, "garbage", "stdout X no tag")
	got, err := LogTail(strings.NewReader("2026-11-26T06:00:00Z "+strings.Join(lines, "\n2026-11-26T06:00:00Z ")+"\n"), MaxLogLines, MaxLogBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "line 20\n") || !strings.HasSuffix(got, "line 99\n") || strings.Count(got, "\n") != 80 {
		t.Errorf("LogTail kept %d lines from %q to %q; want lines 20-99", strings.Count(got, "\n"), got[:10], got[len(got)-10:])
	}
	got, _ = LogTail(strings.NewReader("t stdout F "+strings.Repeat("y", 3000)+"\n"), MaxLogLines, MaxLogBytes)
	if len(got) != MaxLogBytes {
		t.Errorf("LogTail of a 3000-byte line: %d bytes, want %d", len(got), MaxLogBytes)
	}
}

// A log far longer than the window: its tail is read from its end, the line the window cuts
// is dropped, and the result is what the whole log's tail is.
func TestReadLongLog(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := range 20000 {
		lines = append(lines, fmt.Sprintf("stdout F step %d loss 0.%04d", i, i))
	}
	logPath := criLog(t, dir, lines...)
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 4*logWindow {
		t.Fatalf("log of %d bytes: want several windows", len(raw))
	}
	want, err := LogTail(strings.NewReader(string(raw)), MaxLogLines, MaxLogBytes)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(&runtimeapi.ContainerStatus{ExitCode: 1, LogPath: logPath,
		Annotations: map[string]string{AnnotationPolicy: string(corev1.TerminationMessageFallbackToLogsOnError)}})
	if err != nil || got != want || !strings.HasSuffix(got, "step 19999 loss 0.19999\n") {
		t.Errorf("Read of a %d-byte log = %q, %v; want the whole log's tail %q", len(raw), got, err, want)
	}
}
