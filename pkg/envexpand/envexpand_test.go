package envexpand

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The cases are Kubernetes' own expansion cases
// (third_party/forked/golang/expansion/expand_test.go), which pin the kubelet's behaviour.
func TestExpand(t *testing.T) {
	vars := map[string]string{"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	cases := map[string]struct{ in, want string }{
		"whole string":                        {"$(VAR_A)", "A"},
		"repeat":                              {"$(VAR_A)-$(VAR_A)", "A-A"},
		"beginning":                           {"$(VAR_A)-1", "A-1"},
		"middle":                              {"___$(VAR_B)___", "___B___"},
		"end":                                 {"___$(VAR_C)", "___C"},
		"compound":                            {"$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"},
		"escape & expand":                     {"$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"},
		"compound escape":                     {"$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"},
		"mixed in escapes":                    {"f000-$$VAR_A", "f000-$VAR_A"},
		"backslash escape ignored":            {`foo\$(VAR_C)bar`, `foo\Cbar`},
		"nested var references":               {"$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"},
		"nested var references second type":   {"$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"},
		"value is a reference":                {"$(VAR_REF)", "$(VAR_A)"},
		"value is a reference x 2":            {"%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"},
		"empty var":                           {"foo$(VAR_EMPTY)bar", "foobar"},
		"unterminated expression":             {"foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"},
		"expression without operator":         {"f00__(VAR_A)__", "f00__(VAR_A)__"},
		"shell special vars pass through":     {"$?_boo_$!", "$?_boo_$!"},
		"bare operators are ignored":          {"$VAR_A", "$VAR_A"},
		"undefined vars are passed through":   {"$(VAR_DNE)", "$(VAR_DNE)"},
		"even operators, var undefined":       {"$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"},
		"even operators, var defined":         {"$$$$$$(VAR_A)", "$$$(VAR_A)"},
		"odd operators, var undefined":        {"$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"},
		"odd operators, var defined":          {"$$$$$$$(VAR_A)", "$$$A"},
		"missing open expression":             {"$VAR_A)", "$VAR_A)"},
		"shell syntax ignored":                {"${VAR_A}", "${VAR_A}"},
		"trailing incomplete expression":      {"$(VAR_B)_______$(A", "B_______$(A"},
		"trailing incomplete, no content":     {"$(VAR_C)_______$(", "C_______$("},
		"operator at end of input preserved":  {"$(VAR_A)foobarzab$", "Afoobarzab$"},
		"shell escaped incomplete expr":       {`foo-\$(VAR_A`, `foo-\$(VAR_A`},
		"lots of $( in middle":                {"--$($($($($--", "--$($($($($--"},
		"lots of $( in beginning":             {"$($($($($--foo$(", "$($($($($--foo$("},
		"lots of $( in end":                   {"foo0--$($($($(", "foo0--$($($($("},
		"escaped operators in variable names": {"$(foo$$var)", "$(foo$$var)"},
		"newline not expanded":                {"\n", "\n"},
		"empty name":                          {"$()", "$()"},
		"empty input":                         {"", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Expand(tc.in, lookup); got != tc.want {
				t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestReferences(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"none":         {"plain", nil},
		"one":          {`{"index":$(FAULTLINE_INDEX)}`, []string{"FAULTLINE_INDEX"}},
		"two in order": {"$(B)-$(A)", []string{"B", "A"}},
		"escaped":      {"$$(A)", nil},
		"unterminated": {"$(A", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, References(tc.in)); diff != "" {
				t.Errorf("References(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	got := Env([]Var{
		{Name: "FAULTLINE_INDEX", Value: "3", Resolved: true},
		{Name: "LITERAL_DOLLAR", Value: "$(NOT_EXPANDED)", Resolved: true},
		{Name: "A", Value: "a-$(FAULTLINE_INDEX)"},
		{Name: "B", Value: "$(A)/$(LATER)"}, // LATER is not defined yet
		{Name: "LATER", Value: "x"},
		{Name: "A", Value: "again-$(A)"}, // a redefinition sees the earlier value
	})
	want := map[string]string{
		"FAULTLINE_INDEX": "3",
		"LITERAL_DOLLAR":  "$(NOT_EXPANDED)",
		"A":               "again-a-3",
		"B":               "a-3/$(LATER)",
		"LATER":           "x",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
}
