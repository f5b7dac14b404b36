package docs

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
)

// tableHeader is a line of a sample that looks like a table's header: four or more words in
// capitals, two spaces or more apart.
var tableHeader = regexp.MustCompile(`^\s*([A-Z][A-Z-]+)(\s{2,}[A-Z][A-Z/-]+){3,}\s*$`)

// printedHeaders are the headers the launcher's table printers write, each as its words:
// get's (table and wide, with and without -A), nodes' (table and wide) and drain's moves.
func printedHeaders(t *testing.T) [][]string {
	t.Helper()
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	run := v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "default", CreationTimestamp: metav1.NewTime(now)}}
	var out [][]string
	add := func(b *bytes.Buffer, line int) {
		lines := strings.Split(b.String(), "\n")
		if len(lines) <= line {
			t.Fatalf("the printer wrote %q: no line %d", b.String(), line)
		}
		out = append(out, strings.Fields(lines[line]))
	}
	for _, output := range []string{"", "wide"} {
		for _, all := range []bool{false, true} {
			var b bytes.Buffer
			if err := cli.PrintRuns(&b, []v1alpha1.TrainingRun{run}, cli.PrintOptions{Output: output, AllNamespaces: all, Now: now}); err != nil {
				t.Fatal(err)
			}
			add(&b, 0)
		}
	}
	for _, f := range []cli.Format{cli.FormatTable, cli.FormatWide} {
		var b bytes.Buffer
		if err := cli.PrintNodes(&b, []cli.NodeReport{{Name: "gpu-node-0"}}, f, now); err != nil {
			t.Fatal(err)
		}
		add(&b, 0)
	}
	var b bytes.Buffer
	nm := &v1alpha1.NodeMaintenance{Status: v1alpha1.NodeMaintenanceStatus{Runs: []v1alpha1.MaintenanceRun{{Namespace: "default", Name: "llm", Attempt: 1}}}}
	if err := cli.PrintMoves(&b, nm); err != nil {
		t.Fatal(err)
	}
	add(&b, 0)
	return out
}

// checkSamples: every table a page shows as the launcher's output has the header one of the
// launcher's printers writes, word for word: a column the printers gained is in the samples.
func checkSamples(t *testing.T) {
	headers := printedHeaders(t)
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		in := false
		for i, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				in = !in
				continue
			}
			if !in || !tableHeader.MatchString(l) {
				continue
			}
			words := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "$ "))
			if slices.ContainsFunc(headers, func(h []string) bool { return slices.Equal(h, words) }) {
				continue
			}
			var near []string
			for _, h := range headers {
				if len(h) > 1 && h[0] == words[0] && h[1] == words[1] {
					near = append(near, strings.Join(h, " "))
				}
			}
			t.Errorf("%s:%d shows a table headed %q, which no printer of the launcher writes; theirs: %q", page, i+1, strings.Join(words, " "), near)
		}
	}
}

// figure is a speed in a page's prose or table: a time or a ratio with decimals (2.23 s,
// 0.58×); an estimate ("about 1.9 s") or a target ("≤ 0.45×") is not a measurement.
var figure = regexp.MustCompile(`(about |~|≈|≤|≥|<|>)?(\d+\.\d+)\s?(ms|s|×)`)

// reportTime is a duration as the reports print it (170ms, 4.673s, 4626776470 ns/op).
var reportTime = regexp.MustCompile(`(\d+(?:\.\d+)?)\s?(ns|µs|ms|s)\b`)

// decimal is a number with decimals: what a ratio of a page is the quotient of.
var decimal = regexp.MustCompile(`\d+\.\d+`)

// citation is a link to a benchmark report (or their history), or to the page of benchmarks.
var citation = regexp.MustCompile(`\]\(((?:\.\./)*(?:bench/results/[^)#\s]+\.md|(?:docs/)?benchmarks\.md))(?:#[^)]*)?\)`)

var unitSeconds = map[string]float64{"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1}

// rounds is whether v, rounded as shown (decimals), is shown.
func rounds(v float64, shown string) bool {
	want, err := strconv.ParseFloat(shown, 64)
	if err != nil {
		return false
	}
	_, frac, _ := strings.Cut(shown, ".")
	half := 0.5 * math.Pow(10, -float64(len(frac)))
	return math.Abs(v-want) <= half+1e-9
}

// checkFigures: every speed a paragraph (or the table under it) states, where the paragraph
// cites a benchmark report or the benchmarks page, is in what it cites, as the report prints
// it (170ms for 0.17 s), or, for a ratio, is the quotient of two figures on its own line: a
// figure from before a report was rerun, or of another report, is not.
func checkFigures(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var cited []string
		for _, block := range strings.Split(string(text), "\n\n") {
			block = strings.TrimSpace(block)
			if !strings.HasPrefix(block, "|") {
				// A table is its paragraph's: it keeps the citations before it.
				cited = nil
				for _, m := range citation.FindAllStringSubmatch(block, -1) {
					cited = append(cited, filepath.Join(filepath.Dir(page), m[1]))
				}
			}
			if len(cited) == 0 {
				continue
			}
			var sources strings.Builder
			for _, c := range cited {
				b, err := os.ReadFile(c)
				if err != nil {
					t.Errorf("%s cites %s: %v", page, c, err)
				}
				sources.Write(b)
			}
			var times []float64
			for _, m := range reportTime.FindAllStringSubmatch(sources.String(), -1) {
				v, _ := strconv.ParseFloat(m[1], 64)
				times = append(times, v*unitSeconds[m[2]])
			}
			for _, line := range strings.Split(block, "\n") {
				for _, m := range figure.FindAllStringSubmatch(line, -1) {
					if m[1] != "" || stated(m[2], m[3], line, sources.String(), times) {
						continue
					}
					t.Errorf("%s states %s%s, which %s does not: %q", page, m[2], m[3], strings.Join(cited, ", "), firstLine(block))
				}
			}
		}
	}
}

// stated is whether the figure value (in unit) of line is in the sources: a time among
// their times, a ratio as they print it or as the quotient of two figures of line.
func stated(value, unit, line, sources string, times []float64) bool {
	if unit == "×" {
		if strings.Contains(sources, value+"×") {
			return true
		}
		nums := decimal.FindAllString(line, -1)
		for _, a := range nums {
			for _, b := range nums {
				x, _ := strconv.ParseFloat(a, 64)
				y, _ := strconv.ParseFloat(b, 64)
				if y != 0 && rounds(x/y, value) {
					return true
				}
			}
		}
		return false
	}
	for _, v := range times {
		if rounds(v/unitSeconds[unit], value) {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
