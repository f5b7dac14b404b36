package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The worker forms its gang from whichever framework's environment the pod has: the jax
// plugin's, the pytorch plugin's env://, or faultline's own.
func TestParseFindsTheGangInEachFrameworksEnv(t *testing.T) {
	common := map[string]string{envRun: "llm", envAttempt: "2", envIndex: "1", envWorldSize: "4", envService: "llm.ml.svc"}
	for name, tc := range map[string]struct {
		env              map[string]string
		index, world     int
		coordinator, job string
	}{
		"faultline's own": {coordinator: "llm-0.llm.ml.svc:1234", index: 1, world: 4, job: "worker"},
		"jax": {env: map[string]string{envCoordinator: "llm-0.llm.ml.svc:1234", envProcessID: "1", envNumProcs: "4"},
			coordinator: "llm-0.llm.ml.svc:1234", index: 1, world: 4, job: "jax_worker"},
		"pytorch env://": {env: map[string]string{envMasterAddr: "llm-0.llm.ml.svc", envMasterPort: "29500", envRank: "3", envTorchWorld: "4"},
			coordinator: "llm-0.llm.ml.svc:29500", index: 3, world: 4, job: "worker"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{envCoordinator, envProcessID, envNumProcs, envMasterAddr, envMasterPort, envRank, envTorchWorld} {
				t.Setenv(k, "")
			}
			for k, v := range common {
				t.Setenv(k, v)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parse(nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.coordinator != tc.coordinator || c.index != tc.index || c.world != tc.world || c.job != tc.job {
				t.Errorf("coordinator %s index %d world %d job %s; want %s %d %d %s", c.coordinator, c.index, c.world, c.job, tc.coordinator, tc.index, tc.world, tc.job)
			}
		})
	}
}

// A pod that restarts in place names the attempt file, which wins over FAULTLINE_ATTEMPT
// (the pod's first attempt); without it the env var is the attempt.
func TestParseReadsTheAttemptFileWhenNamed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "attempt")
	if err := os.WriteFile(file, []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file, want string
		wantErr    bool
	}{
		"no file named: the env var":   {want: "1"},
		"the file wins":                {file: file, want: "3"},
		"a named file that is missing": {file: filepath.Join(dir, "none"), wantErr: true},
		"an empty file":                {file: empty, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(envCoordinator, "127.0.0.1:1234")
			t.Setenv(envProcessID, "0")
			t.Setenv(envNumProcs, "1")
			t.Setenv(envAttempt, "1")
			t.Setenv(envAttemptFile, tc.file)
			c, err := parse(nil)
			if tc.wantErr {
				if err == nil {
					t.Errorf("attempt %q, want an error", c.attempt)
				}
				return
			}
			if err != nil || c.attempt != tc.want {
				t.Errorf("attempt %q, %v; want %q", c.attempt, err, tc.want)
			}
		})
	}
}
