package main

import "testing"

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
