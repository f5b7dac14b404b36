package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/faultline-dev/faultline/pkg/gpu/gpusim"
)

// The fault-injection endpoint exists only in a simulation mode and only on loopback.
func TestCheckSimulation(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     DaemonConfig
		wantErr string
	}{
		"no simulation":               {cfg: DaemonConfig{}},
		"kwok nodes, no endpoint":     {cfg: DaemonConfig{SimulateHardware: true}},
		"kwok nodes, loopback v4":     {cfg: DaemonConfig{SimulateHardware: true, SimulateAddr: "127.0.0.1:9090"}},
		"real nodes, loopback v6":     {cfg: DaemonConfig{SimulateGPUs: []string{"GPU-a"}, SimulateAddr: "[::1]:0"}},
		"real nodes, other 127/8":     {cfg: DaemonConfig{SimulateGPUs: []string{"GPU-a"}, SimulateAddr: "127.0.0.2:9090"}},
		"endpoint without simulation": {cfg: DaemonConfig{SimulateAddr: "127.0.0.1:9090"}, wantErr: "nothing to simulate"},
		"every interface":             {cfg: DaemonConfig{SimulateHardware: true, SimulateAddr: ":9090"}, wantErr: "not a loopback address"},
		"all v4 interfaces":           {cfg: DaemonConfig{SimulateHardware: true, SimulateAddr: "0.0.0.0:9090"}, wantErr: "not a loopback address"},
		"a node address":              {cfg: DaemonConfig{SimulateGPUs: []string{"GPU-a"}, SimulateAddr: "10.0.0.5:9090"}, wantErr: "not a loopback address"},
		"a name, even localhost":      {cfg: DaemonConfig{SimulateHardware: true, SimulateAddr: "localhost:9090"}, wantErr: "not a loopback address"},
		"no port":                     {cfg: DaemonConfig{SimulateHardware: true, SimulateAddr: "127.0.0.1"}, wantErr: "missing port"},
		"both simulations":            {cfg: DaemonConfig{SimulateHardware: true, SimulateGPUs: []string{"GPU-a"}}, wantErr: "exclude each other"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.checkSimulation()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkSimulation: %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkSimulation: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// An XID is injected on the GPU named by index or by UUID; anything else is refused.
func TestSimulateXIDByIndexOrUUID(t *testing.T) {
	sim, err := gpusim.NewWithUUIDs([]string{"GPU-a", "GPU-b"})
	if err != nil {
		t.Fatal(err)
	}
	h := simulateXID(sim, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tc := range []struct {
		query   string
		status  int
		wantGPU string
	}{
		{"gpu=1&xid=79", http.StatusAccepted, "GPU-b"},
		{"uuid=GPU-a&xid=48", http.StatusAccepted, "GPU-a"},
		{"uuid=GPU-zz&xid=79", http.StatusBadRequest, ""},
		{"gpu=2&xid=79", http.StatusBadRequest, ""}, // the machine has 2 GPUs
		{"gpu=0", http.StatusBadRequest, ""},
	} {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/simulate/xid?"+tc.query, nil))
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.query, rec.Code, tc.status, rec.Body)
			continue
		}
		if tc.wantGPU == "" {
			continue
		}
		ev, ret := sim.Set.Wait(1000)
		if ret != 0 {
			t.Fatalf("%s: no NVML event: %v", tc.query, ret)
		}
		if uuid, _ := ev.Device.GetUUID(); uuid != tc.wantGPU {
			t.Errorf("%s: XID on %s, want %s", tc.query, uuid, tc.wantGPU)
		}
	}
}

// An agent asked to stop exits 0 whatever its components returned on their way out; one whose
// component failed exits with the error, even one that wraps context.Canceled (a CRI or API
// call of the component's own context): exit 0 would read as the kubelet's SIGTERM.
func TestStoppedOnlyCleanWhenAsked(t *testing.T) {
	running := context.Background()
	asked, stop := context.WithCancelCause(context.Background())
	stop(errors.New("terminated signal received"))
	ownCancel := fmt.Errorf("watch the node's pods: %w", context.Canceled)
	for name, tc := range map[string]struct {
		asked   context.Context
		err     error
		wantErr string
	}{
		"asked, components canceled":        {asked: asked, err: ownCancel},
		"asked, components clean":           {asked: asked},
		"a component failed":                {asked: running, err: errors.New("dbus: connection closed"), wantErr: "node agent on n1 stopped: dbus: connection closed"},
		"a component canceled on its own":   {asked: running, err: ownCancel, wantErr: "context canceled"},
		"every component returned, unasked": {asked: running, wantErr: "every component stopped on its own"},
	} {
		t.Run(name, func(t *testing.T) {
			err := stopped(tc.asked, "n1", tc.err)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("stopped = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
