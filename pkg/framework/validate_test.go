package framework

import (
	"errors"
	"github.com/google/go-cmp/cmp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestValidateRendezvous(t *testing.T) {
	many := make([]EnvVar, maxEnvVars+1)
	for i := range many {
		many[i] = EnvVar{Name: "V" + strings.Repeat("X", i)}
	}
	cases := map[string]struct {
		r    Rendezvous
		want []string // substrings of the error; none: valid
	}{
		"empty": {},
		"values, refs to common and earlier vars, field refs, ports": {r: Rendezvous{
			Env: []EnvVar{
				{Name: "TF_CONFIG", Value: `{"index":` + IndexRef + `}`},
				{Name: "B", Value: "$(TF_CONFIG)/$(FAULTLINE_WORLD_SIZE)/$$(NOT_A_REF)"},
				{Name: "IP", FieldPath: "status.podIP"},
				{Name: "IDX", FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"},
				{Name: "LBL", FieldPath: "metadata.labels['app']"},
			},
			Ports: []Port{{Name: "tf-server", Port: 2222}, {Port: 2222, Protocol: corev1.ProtocolUDP}},
		}},
		"invalid names": {
			r:    Rendezvous{Env: []EnvVar{{Name: "1BAD"}, {Name: "has space"}, {Name: ""}}},
			want: []string{`env[0] name "1BAD"`, `env[1] name "has space"`, `env[2] name ""`},
		},
		"common variables are the controller's": {
			r:    Rendezvous{Env: []EnvVar{{Name: v1alpha1.EnvIndex, Value: "0"}}},
			want: []string{"FAULTLINE_INDEX is set by the controller"},
		},
		"duplicates": {
			r:    Rendezvous{Env: []EnvVar{{Name: "A"}, {Name: "A"}}},
			want: []string{"env[1] A is set twice"},
		},
		"both a value and a field path": {
			r:    Rendezvous{Env: []EnvVar{{Name: "A", Value: "v", FieldPath: "status.podIP"}}},
			want: []string{"has both a value and a field path"},
		},
		"unknown field path": {
			r:    Rendezvous{Env: []EnvVar{{Name: "A", FieldPath: "spec.containers[0].image"}}},
			want: []string{`field path "spec.containers[0].image" is not one the Downward API offers`},
		},
		"bad annotation key": {
			r:    Rendezvous{Env: []EnvVar{{Name: "A", FieldPath: "metadata.annotations['-bad-']"}}},
			want: []string{`"-bad-" is not a valid annotations key`},
		},
		"reference to a later or unknown variable": {
			r:    Rendezvous{Env: []EnvVar{{Name: "A", Value: "$(B)"}, {Name: "B", Value: "$(NOPE)"}}},
			want: []string{"env[0] A refers to $(B), which is not defined before it", "env[1] B refers to $(NOPE)"},
		},
		"too many vars": {
			r:    Rendezvous{Env: many},
			want: []string{"65 env vars (at most 64)"},
		},
		"a value over Linux's limit": {
			r:    Rendezvous{Env: []EnvVar{{Name: "BIG", Value: strings.Repeat("x", maxEnvEntryBytes)}}},
			want: []string{"over the 131072 bytes Linux allows"},
		},
		"too much env in all": {
			r: Rendezvous{Env: []EnvVar{
				{Name: "A", Value: strings.Repeat("x", maxEnvEntryBytes-10)},
				{Name: "B", Value: strings.Repeat("x", maxEnvEntryBytes-10)},
				{Name: "C", Value: strings.Repeat("x", 100)},
			}},
			want: []string{"the env vars take"},
		},
		"bad ports": {
			r: Rendezvous{Ports: []Port{
				{Port: 0}, {Port: 70000}, {Name: "Not_Valid", Port: 1}, {Name: "dup", Port: 2}, {Name: "dup", Port: 3},
				{Port: 4, Protocol: "HTTP"}, {Port: 5}, {Port: 5, Protocol: corev1.ProtocolTCP},
			}},
			want: []string{"port[0] 0", "port[1] 70000", `port[2] name "Not_Valid"`, `port[4] name "dup" is used twice`, `port[5] protocol "HTTP"`, "port[7] 5/TCP is listed twice"},
		},
	}
	// Version 3: roles, their variables, the success policy (the run has 7 workers).
	cases["roles that add up to the workers, and their variables"] = struct {
		r    Rendezvous
		want []string
	}{r: Rendezvous{
		Roles:         []Role{{Name: "chief", Replicas: 1}, {Name: "ps", Replicas: 2}, {Name: "worker", Replicas: 4}},
		SuccessPolicy: v1alpha1.SuccessPolicyLeader,
		Env:           []EnvVar{{Name: "TASK", Value: `{"type":"` + RoleRef + `","index":` + RoleIndexRef + `}`}},
	}}
	cases["role variables without roles"] = struct {
		r    Rendezvous
		want []string
	}{r: Rendezvous{Env: []EnvVar{{Name: "TASK", Value: RoleRef}}}, want: []string{"refers to $(FAULTLINE_ROLE), which is not defined"}}
	cases["role variables are the controller's"] = struct {
		r    Rendezvous
		want []string
	}{r: Rendezvous{Roles: []Role{{Name: "worker", Replicas: 7}}, Env: []EnvVar{{Name: v1alpha1.EnvRoleIndex, Value: "0"}}}, want: []string{"FAULTLINE_ROLE_INDEX is set by the controller"}}
	cases["bad roles and success policy"] = struct {
		r    Rendezvous
		want []string
	}{r: Rendezvous{
		Roles:         []Role{{Name: "Chief", Replicas: 1}, {Name: "ps", Replicas: 0}, {Name: "ps", Replicas: 2}},
		SuccessPolicy: "Chief",
	}, want: []string{`role[0] name "Chief" is not a DNS label`, "role[1] ps has 0 replicas", "role[2] ps is listed twice", "add up to 3, but the run has 7 workers", `success policy "Chief"`}}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := validateRendezvous(tc.r, 7)
			checkErr(t, err, tc.want)
		})
	}
}

func TestValidateInfo(t *testing.T) {
	good := Info{Name: "jax", Version: "v1", APIVersion: 1, DefaultRestartScope: v1alpha1.RestartScopeGang, DefaultPorts: []Port{{Port: 1234}}}
	cases := map[string]struct {
		mutate func(*Info)
		want   []string
	}{
		"good":             {mutate: func(*Info) {}},
		"wrong name":       {mutate: func(i *Info) { i.Name = "tensorflow" }, want: []string{`it calls itself "tensorflow", but it was installed as the plugin of framework "jax"`}},
		"wrong version":    {mutate: func(i *Info) { i.APIVersion = 2 }, want: []string{"API version 2, but version 1 was negotiated"}},
		"bad scope":        {mutate: func(i *Info) { i.DefaultRestartScope = "Pod" }, want: []string{`default restart scope "Pod"`}},
		"empty scope":      {mutate: func(i *Info) { i.DefaultRestartScope = "" }, want: []string{`default restart scope ""`}},
		"bad default port": {mutate: func(i *Info) { i.DefaultPorts = []Port{{Port: -1}} }, want: []string{"default ports: port[0] -1"}},
		"long version":     {mutate: func(i *Info) { i.Version = strings.Repeat("v", 300) }, want: []string{"version string is 300 bytes long"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			info := good
			tc.mutate(&info)
			checkErr(t, validateInfo("jax", 1, info), tc.want)
		})
	}
}

func TestCompileHints(t *testing.T) {
	many := make([]HintPattern, maxHints+1)
	for i := range many {
		many[i] = HintPattern{Pattern: "x", Cause: v1alpha1.CausePeerFailure}
	}
	peer := HintPattern{Pattern: `peer (died|left)`, Cause: v1alpha1.CausePeerFailure}
	app := HintPattern{Pattern: `illegal memory access`, Cause: v1alpha1.CauseAppGPUError}
	ecc := HintPattern{Pattern: "ECC", Cause: v1alpha1.CauseGPUFault}
	cases := map[string]struct {
		version int // APIVersion when 0
		hints   []HintPattern
		want    []HintPattern // compiled, in order (the hints when nil and no error)
		dropped []HintPattern
		err     []string
	}{
		"good": {hints: []HintPattern{peer, app}},
		// Program output never proves infrastructure: a version 2 plugin that claims it is
		// broken, and its author is told what to write instead.
		"infrastructure cause from a version 2 plugin": {
			hints: []HintPattern{peer, ecc},
			err:   []string{`hint 1, pattern "ECC": cause GPUFault is an infrastructure cause`, "give the hint cause PeerFailure"},
		},
		// Version 1 allowed it: an installed old plugin keeps working without the hint.
		"infrastructure cause from a version 1 plugin is dropped": {
			version: 1,
			hints:   []HintPattern{ecc, peer, app},
			want:    []HintPattern{peer, app},
			dropped: []HintPattern{ecc},
		},
		"a dropped hint does not shift the index named in a later error": {
			version: 1,
			hints:   []HintPattern{ecc, {Pattern: `(unclosed`, Cause: v1alpha1.CausePeerFailure}},
			err:     []string{`hint 1 from "jax", pattern "(unclosed"`},
		},
		"bad regex": {
			hints: []HintPattern{{Pattern: `(unclosed`, Cause: v1alpha1.CausePeerFailure}},
			err:   []string{`hint 0 from "jax", pattern "(unclosed": error parsing regexp`},
		},
		"unknown cause": {
			hints: []HintPattern{{Pattern: "x", Cause: "Gremlins"}},
			err:   []string{`cause "Gremlins" is not a hint cause`},
		},
		"Unknown is no hint cause": {
			hints: []HintPattern{{Pattern: "x", Cause: v1alpha1.CauseUnknown}},
			err:   []string{`cause "Unknown" is not a hint cause`},
		},
		"empty pattern": {
			hints: []HintPattern{{Pattern: "", Cause: v1alpha1.CausePeerFailure}},
			err:   []string{"empty pattern would match every message"},
		},
		"matches everything": {
			hints: []HintPattern{{Pattern: "a*", Cause: v1alpha1.CausePeerFailure}},
			err:   []string{`pattern "a*": matches the empty message`},
		},
		"too many": {hints: many, err: []string{"129 failure hints"}},
		"too long": {
			hints: []HintPattern{{Pattern: strings.Repeat("a", maxPatternLen+1), Cause: v1alpha1.CausePeerFailure}},
			err:   []string{"pattern is 4097 bytes long"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			version := tc.version
			if version == 0 {
				version = APIVersion
			}
			got, dropped, err := compileHints("jax", version, tc.hints)
			checkErr(t, err, tc.err)
			if err != nil {
				return
			}
			want := tc.want
			if want == nil {
				want = tc.hints
			}
			var compiled []HintPattern
			for _, h := range got {
				if h.Source != "jax" {
					t.Errorf("hint %q has source %q", h.Pattern, h.Source)
				}
				compiled = append(compiled, HintPattern{Pattern: h.Pattern.String(), Cause: h.Cause})
			}
			if diff := cmp.Diff(want, compiled); diff != "" {
				t.Errorf("compiled hints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.dropped, dropped); diff != "" {
				t.Errorf("dropped hints (-want +got):\n%s", diff)
			}
		})
	}
}

// checkErr wants no error when want is empty, else an ErrInvalidAnswer containing each
// of want.
func checkErr(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !errors.Is(err, ErrInvalidAnswer) {
		t.Errorf("error %v is not ErrInvalidAnswer", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q spans lines; it ends up in a condition message", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}
