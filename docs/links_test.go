package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link matches a markdown link or image: [text](target) or ![alt](target).
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link and image in the README, these pages and
// bench/results/README.md names a file that exists and, with a #fragment, a heading of it,
// so that moving a page or a report, or renaming a heading, fails here rather than on a
// reader.
func TestLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "../bench/results/README.md")
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range outsideCode(string(text)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, fragment, _ := strings.Cut(target, "#")
				file := page
				if path != "" {
					file = filepath.Join(filepath.Dir(page), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s:%d links to %s, which does not exist", page, n+1, target)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d links to #%s in %s, which has no headings", page, n+1, fragment, file)
					continue
				}
				body, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(body))[fragment] {
					t.Errorf("%s:%d links to %s, but %s has no heading with the anchor #%s", page, n+1, target, file, fragment)
				}
			}
		}
	}
}

// outsideCode returns the file's lines, with those inside fenced code blocks blanked.
func outsideCode(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// anchors are the fragments that GitHub gives a page's headings: lower case, spaces as
// hyphens, every other character that is not a letter, digit, hyphen or underscore dropped,
// and -1, -2… after repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range outsideCode(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			out[a+"-"+strconv.Itoa(k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
