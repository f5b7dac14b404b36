package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/faultline-dev/faultline/pkg/framework"
)

// readmeLimit is the README's size at most: what it is, the quick start, deploying, the tour
// and the links; everything else has a page here.
const readmeLimit = 16 << 10

// pages are the documents TestDocsAreTrue reads: these pages, the README and the examples'.
func pages(t *testing.T) []string {
	t.Helper()
	out, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, "../README.md", "../examples/README.md")
}

// TestDocsAreTrue: what the documentation says about the repository is so. Every file or
// directory of the repository a page names (`pkg/cli/get.go`, `deploy/admission/`) exists;
// every flag a page shows on a launcher command line (`launcher get -o wide`) is in that
// command's --help, and every other flag it names in code (`--release-timeout`) is one of a
// faultline binary's; every framework the CRD's controller ships a plugin for is in the
// reference; the index of docs/ and the README's list every page; the README stays under
// readmeLimit; the five-minute plugin of plugins.md compiles; deploy.md's supported and tested
// versions are the pinned ones (checkVersions). Links and the TrainingRun
// reference have tests of their own (links_test.go, reference_test.go).
func TestDocsAreTrue(t *testing.T) {
	t.Run("files", func(t *testing.T) { checkFiles(t) })
	t.Run("index", func(t *testing.T) { checkIndex(t) })
	t.Run("frameworks", func(t *testing.T) { checkFrameworks(t) })
	t.Run("versions", func(t *testing.T) { checkVersions(t) })
	t.Run("sample output", func(t *testing.T) { checkSamples(t) })
	t.Run("speed figures", func(t *testing.T) { checkFigures(t) })
	t.Run("readme size", func(t *testing.T) {
		fi, err := os.Stat("../README.md")
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > readmeLimit {
			t.Errorf("README.md is %d bytes, more than %d: move detail into a page of docs/ and link it", fi.Size(), readmeLimit)
		}
	})
	t.Run("flags", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds the binaries")
		}
		checkFlags(t)
	})
	t.Run("five-minute plugin compiles", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds a plugin")
		}
		checkFiveMinutePlugin(t)
	})
}

// repoDirs are the repository's top-level directories: a code span that starts with one
// names a path of the repository.
var repoDirs = []string{"api/", "bench/", "cmd/", "deploy/", "docs/", "examples/", "hack/", "pkg/", "plugins/", "test/", ".ci/"}

// upstream are paths the pages cite from other projects' trees (with the project named
// beside them): Kubernetes' kubelet, API validation and Job controller.
var upstream = []string{"pkg/kubelet/", "pkg/apis/core/", "pkg/controller/job", "cmd/in-place-restart-agent/"}

var codeSpan = regexp.MustCompile("`([^`\n]+)`")

// spans are a page's code: its inline code spans and the lines of its fenced blocks.
func spans(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if in {
			out = append(out, l)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var pathToken = regexp.MustCompile(`(?:\.\./)*[A-Za-z0-9_.][A-Za-z0-9_./-]*`)

func checkFiles(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, span := range spans(string(text)) {
			if strings.ContainsAny(span, "<>*{}$") || strings.Contains(span, "://") {
				continue // a pattern or a placeholder, not a path
			}
			for _, tok := range pathToken.FindAllString(span, -1) {
				tok = strings.TrimRight(tok, ".,:;")
				rel := strings.TrimLeft(tok, "./")
				if strings.HasPrefix(tok, "../") {
					// A path relative to the page names exactly one file.
					if _, err := os.Stat(filepath.Join(filepath.Dir(page), tok)); err != nil {
						t.Errorf("%s names %s, which does not exist (relative to %s)", page, tok, filepath.Dir(page))
					}
					continue
				}
				if !slices.ContainsFunc(repoDirs, func(d string) bool { return strings.HasPrefix(rel, d) }) ||
					slices.ContainsFunc(upstream, func(u string) bool { return strings.HasPrefix(rel, u) }) || seen[rel] {
					continue
				}
				seen[rel] = true
				if _, err := os.Stat(filepath.Join("..", rel)); err != nil {
					t.Errorf("%s names %s, which is not in the repository", page, tok)
				}
			}
		}
	}
}

// pageLink matches a markdown link's target.
var pageLink = regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)

func checkIndex(t *testing.T) {
	all, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, index := range []struct{ file, prefix string }{{"README.md", ""}, {"../README.md", "docs/"}} {
		text, err := os.ReadFile(index.file)
		if err != nil {
			t.Fatal(err)
		}
		linked := map[string]bool{}
		for _, m := range pageLink.FindAllStringSubmatch(string(text), -1) {
			linked[m[1]] = true
		}
		for _, page := range all {
			if page == "README.md" {
				continue
			}
			if !linked[index.prefix+page] {
				t.Errorf("%s does not list %s: every page of docs/ has a row in the index", index.file, index.prefix+page)
			}
		}
	}
}

func checkFrameworks(t *testing.T) {
	text, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "| `framework` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatalf("%s has no row for spec.framework", referenceFile)
	}
	for _, fw := range append(slices.Clone(framework.Shipped), "none") {
		if !strings.Contains(row, "`"+fw+"`") {
			t.Errorf("%s's spec.framework row does not name %q, which the CRD accepts and faultline ships: %s", referenceFile, fw, row)
		}
	}
}

// launcherLine matches a launcher command line: `launcher get -o wide`, `$ bin/launcher run …`.
var launcherLine = regexp.MustCompile(`(?:^|[\s$(])(?:bin/)?launcher\s+([a-z][a-z-]*)([^|;&)]*)`)

// flagToken matches a flag: --name, --name=value, -o.
var flagToken = regexp.MustCompile(`(?:^|\s)(--?[a-zA-Z][a-zA-Z0-9-]*)`)

// otherTools are flags of other programs that the pages name in code outside a command line
// of their own (kubectl's, a training program's): every other --flag must be a faultline
// binary's.
var otherTools = []string{"--server-side", "--force-conflicts", "--context", "--overwrite", "--steps"}

func checkFlags(t *testing.T) {
	bin := buildBinaries(t)
	helps := map[string]string{}
	help := func(args ...string) string {
		key := strings.Join(args, " ")
		if h, ok := helps[key]; ok {
			return h
		}
		// Go's flag package exits 2 after printing its help; cobra 0.
		out, err := exec.Command(filepath.Join(bin, args[0]), append(args[1:], "--help")...).CombinedOutput()
		if err != nil && len(out) == 0 {
			t.Fatalf("%s --help: %v", key, err)
		}
		helps[key] = string(out)
		return helps[key]
	}
	commands := subcommands(help("launcher"))
	// launcher.md's table of commands has a row for each of them.
	table, err := os.ReadFile("launcher.md")
	if err != nil {
		t.Fatal(err)
	}
	for c := range commands {
		if c != "help" && !regexp.MustCompile("(?m)^\\|[^|\n]*`"+regexp.QuoteMeta(c)+"[ `]").Match(table) {
			t.Errorf("launcher.md's table of commands has no row for `launcher %s`", c)
		}
	}
	// Every flag of every faultline binary: what a flag named outside a command line must be.
	known := map[string]bool{}
	for _, h := range []string{help("nodeagent"), help("faultline-barrier"), help("launcher")} {
		for _, f := range helpFlags(h) {
			known[f] = true
			if !strings.HasPrefix(f, "--") && len(f) > 2 {
				known["-"+f] = true // Go's flag package takes -step and --step alike
			}
		}
	}
	for c := range commands {
		for _, f := range helpFlags(help("launcher", c)) {
			known[f] = true
		}
	}
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range spans(string(text)) {
			first := strings.Fields(strings.TrimPrefix(strings.TrimSpace(span), "$ "))
			if len(first) > 0 && slices.Contains(otherCommands, first[0]) {
				continue // another program's command line: its flags are its own
			}
			if launcherLine.MatchString(span) {
				for _, m := range launcherLine.FindAllStringSubmatch(span, -1) {
					cmd, rest := m[1], m[2]
					if !commands[cmd] {
						continue // prose: "the launcher binary"
					}
					rest, _, _ = strings.Cut(rest, " -- ") // the workers' command follows
					flags := helpFlags(help("launcher", cmd))
					for _, f := range flagToken.FindAllStringSubmatch(rest, -1) {
						if !slices.Contains(flags, f[1]) {
							t.Errorf("%s shows `launcher %s %s`, which `launcher %s --help` does not list", page, cmd, f[1], cmd)
						}
					}
				}
				continue
			}
			// Elsewhere, a --flag named in code is a faultline binary's (or a well-known
			// tool's, otherTools).
			for _, f := range flagToken.FindAllStringSubmatch(span, -1) {
				if strings.HasPrefix(f[1], "--") && !known[f[1]] && !slices.Contains(otherTools, f[1]) {
					t.Errorf("%s names the flag %s, which no faultline binary has (in %q)", page, f[1], span)
				}
			}
		}
	}
}

// otherCommands start command lines of other programs, whose flags are their own.
var otherCommands = []string{"kubectl", "go", "make", "git", "python", "python3", "torchrun", "bash", "sh", "systemctl", "curl", "helm", "kwokctl", "docker", "sudo"}

// subcommands are the commands a cobra help lists.
func subcommands(help string) map[string]bool {
	out := map[string]bool{}
	in := false
	for _, l := range strings.Split(help, "\n") {
		switch {
		case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
			in = strings.Contains(l, "Commands") || strings.HasSuffix(l, "training:") || strings.HasSuffix(l, "runs:") ||
				strings.HasSuffix(l, "(SREs):") || strings.HasSuffix(l, "faultline:")
		case in && strings.HasPrefix(l, "  "):
			if f := strings.Fields(l); len(f) > 0 {
				out[f[0]] = true
			}
		}
	}
	return out
}

var helpFlag = regexp.MustCompile(`(?m)^\s+(?:(-[a-zA-Z]), )?(--[a-zA-Z0-9-]+)|(?m)^\s+(-[a-zA-Z][a-zA-Z0-9-]*)\s`)

// helpFlags are the flags a --help lists (cobra's "  -o, --output string" and Go flag's
// "  -workers int").
func helpFlags(help string) []string {
	var out []string
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		for _, f := range m[1:] {
			if f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
	buildOut  []byte
)

// buildBinaries builds the launcher, the node agent and the barrier once for the package.
func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "faultline-docs-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/launcher", "./cmd/nodeagent", "./cmd/faultline-barrier")
		cmd.Dir = ".."
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build the binaries: %v\n%s", buildErr, buildOut)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// checkFiveMinutePlugin builds the Go program of plugins.md's "The plugin in five minutes"
// as it is shown, against this repository.
func checkFiveMinutePlugin(t *testing.T) {
	text, err := os.ReadFile("plugins.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(text), "## The plugin in five minutes\n")
	if !ok {
		t.Fatal(`plugins.md has no "The plugin in five minutes" section`)
	}
	_, code, ok := strings.Cut(after, "```go\n")
	if !ok {
		t.Fatal("the five-minute plugin has no ```go block")
	}
	code, _, _ = strings.Cut(code, "```")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"main.go": code,
		"go.mod":  "module example.com/plugin\n\ngo 1.26\n\nrequire github.com/faultline-dev/faultline v0.0.0\n\nreplace github.com/faultline-dev/faultline => " + root + "\n",
		"go.sum":  string(sum),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The module's requirements come from the replaced module's go.mod. Its graph names
	// go.mod files that faultline's own build never reads (go-hclog's requirement of an
	// older fatih/color): on a fresh machine the module cache lacks them, and go fetches
	// them as a user's build would (through GOPROXY), checked against faultline's go.sum.
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "faultline-plugin-example"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("plugins.md's five-minute plugin does not build as shown: %v\n%s", err, out)
	}
}
