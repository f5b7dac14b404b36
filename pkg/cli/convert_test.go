package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/faultline-dev/faultline/pkg/convert"
)

// TestGoldenConvert: `launcher convert` prints the runs as one YAML stream on standard output
// and the issues on standard error, and exits 3 (ExitDiffers) when a run would behave
// differently (each such issue names the source's field and why), 0 when everything was
// carried over as it was or in faultline's form.
func TestGoldenConvert(t *testing.T) {
	for name, tc := range map[string]struct {
		files []string
		code  int
	}{
		"convert-same":    {[]string{"jobset-pytorch.yaml", "pytorchjob-never.yaml"}, ExitOK},
		"convert-differs": {[]string{"jobset-max-restarts.yaml"}, ExitDiffers},
		// Per-index retries are kept, the JobSet's restarts on top are not: said, exit 3.
		"convert-per-index": {[]string{"jobset-per-index.yaml"}, ExitDiffers},
	} {
		t.Run(name, func(t *testing.T) {
			var in bytes.Buffer
			for i, f := range tc.files {
				b, err := os.ReadFile(filepath.Join("..", "convert", "testdata", f))
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 {
					in.WriteString("---\n")
				}
				in.Write(b)
			}
			var out, errOut bytes.Buffer
			err := ConvertFile(&in, "run.yaml", convert.Options{}, &out, &errOut)
			msg, code := Message(err, "")
			if code != tc.code {
				t.Errorf("exit %d (%s), want %d", code, msg, tc.code)
			}
			golden(t, name, append(append(out.Bytes(), "--- stderr\n"...), append(errOut.Bytes(), msg...)...))
		})
	}
	var out bytes.Buffer
	if _, code := Message(ConvertFile(bytes.NewBufferString("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"), "pod.yaml", convert.Options{}, &out, &out), ""); code != ExitUsage {
		t.Errorf("a Pod: exit %d, want %d", code, ExitUsage)
	}
}
