package version

import "testing"

func TestTag(t *testing.T) {
	for v, want := range map[string]string{
		"v0.3.1":                 "v0.3.1",
		"v0.3.1-4-gabcdef-dirty": "v0.3.1-4-gabcdef-dirty",
		"v0.3.1+build.5":         "v0.3.1-build.5",
		"dev":                    "dev",
		"":                       "dev",
		".hidden":                "v.hidden",
	} {
		if got := Tag(v); got != want {
			t.Errorf("Tag(%q) = %q, want %q", v, got, want)
		}
	}
}

func TestImagesOf(t *testing.T) {
	got := ImagesOf("127.0.0.1:5000/", "v1.0.0")
	want := Images{Controller: "127.0.0.1:5000/faultline:v1.0.0", Agent: "127.0.0.1:5000/faultline-nodeagent:v1.0.0", Barrier: "127.0.0.1:5000/faultline-barrier:v1.0.0"}
	if got != want {
		t.Errorf("ImagesOf = %+v, want %+v", got, want)
	}
	if got := ImagesOf("", "v1.0.0").Controller; got != DefaultRegistry+"/faultline:v1.0.0" {
		t.Errorf("default registry: %s", got)
	}
}
