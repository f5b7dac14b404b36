package memlimit

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestFromEnv(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for name, tc := range map[string]struct {
		gomemlimit, limit string
		want              int64
		wantErr           bool
	}{
		"the container's limit": {limit: "536870912", want: 483183820},
		"GOMEMLIMIT wins":       {gomemlimit: "300MiB", limit: "536870912"},
		"no limit known":        {},
		"not a number of bytes": {limit: "512Mi", wantErr: true},
		"a limit of zero":       {limit: "0", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.gomemlimit)
			t.Setenv(EnvContainerLimit, tc.limit)
			debug.SetMemoryLimit(math.MaxInt64)
			got, err := FromEnv()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("FromEnv() = %d, %v; want %d, error %t", got, err, tc.want, tc.wantErr)
			}
			wantRuntime := tc.want
			if wantRuntime == 0 {
				wantRuntime = math.MaxInt64
			}
			if rt := debug.SetMemoryLimit(-1); rt != wantRuntime {
				t.Errorf("runtime limit %d, want %d", rt, wantRuntime)
			}
		})
	}
}
