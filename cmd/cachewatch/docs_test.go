package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/cmd/cachewatch/demo"
	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/probe"
	"github.com/cachewatch/cachewatch/internal/doccheck"
	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// asCLI makes the test binary the cachewatch command, for the shell blocks
// the docs test runs: they call it by name on PATH (TestMain).
const asCLI = "CACHEWATCH_TEST_AS_COMMAND"

func docBlocks(t *testing.T) (string, []doccheck.Block) {
	t.Helper()
	root, err := doccheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	all, err := doccheck.All(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, all
}

// Every cachewatch command in a shell block of the README, the docs and the
// examples' READMEs parses: the command and its flags exist and their
// values are accepted.
func TestDocsCommandsParse(t *testing.T) {
	_, all := docBlocks(t)
	n := 0
	for _, b := range all {
		if b.Lang != "sh" {
			continue
		}
		for _, args := range cachewatchCommands(b.Text) {
			n++
			if err := parseOnly(args); err != nil {
				t.Errorf("%s: cachewatch %s: %v", b, strings.Join(args, " "), err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no cachewatch command found in the docs: the block parser is broken")
	}
}

// parseOnly parses args as the command line would, without running the
// command.
func parseOnly(args []string) (err error) {
	app := newCommandLine(io.Discard, io.Discard).app
	defer func() {
		if r := recover(); r != nil {
			if code, ok := r.(terminated); !ok || code != 0 {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	_, err = app.Parse(doubleDash(app, args))
	return err
}

// cachewatchCommands finds the arguments of every cachewatch command (or
// go run ./cmd/cachewatch) in a shell block: continuation lines joined,
// comments and pipes cut, shell quoting removed.
func cachewatchCommands(block string) [][]string {
	var out [][]string
	for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		for _, part := range strings.FieldsFunc(stripComment(line), func(r rune) bool { return r == '|' || r == ';' || r == '&' }) {
			words := shellWords(part)
			for len(words) > 0 && strings.Contains(words[0], "=") { // VAR=value before the command
				words = words[1:]
			}
			switch {
			case len(words) > 0 && words[0] == "cachewatch":
				out = append(out, words[1:])
			case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/cachewatch":
				out = append(out, words[3:])
			}
		}
	}
	return out
}

// stripComment cuts a shell comment: a # at the start of a word, outside
// quotes.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// shellWords splits a command into words as a shell would for plain words
// and quoted strings (no expansion).
func shellWords(s string) []string {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// The blocks marked <!-- run --> are run as a reader would run them: each
// page's in order, in one new directory, with cachewatch (this test
// binary), promtool and amtool on PATH.
func TestDocsRunBlocks(t *testing.T) {
	_, all := docBlocks(t)
	byPage := map[string][]doccheck.Block{}
	for _, b := range all {
		if b.Marker == "run" {
			if b.Lang != "sh" {
				t.Errorf("%s: only sh blocks can be run", b)
			}
			byPage[b.File] = append(byPage[b.File], b)
		}
	}
	if len(byPage) == 0 {
		t.Fatal("no block is marked <!-- run -->")
	}
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "cachewatch")); err != nil {
		t.Fatal(err)
	}
	path := bin
	for _, tool := range []struct{ name, pkg string }{{"promtool", "prometheus"}, {"amtool", "prometheus-alertmanager"}} {
		path += string(os.PathListSeparator) + filepath.Dir(metrictest.Tool(t, tool.name, tool.pkg))
	}
	for page, blocks := range byPage {
		t.Run(page, func(t *testing.T) {
			dir := t.TempDir()
			for _, b := range blocks {
				cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.Text)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), asCLI+"=1", "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s: %v\n%s", b, err, out.String())
				}
			}
		})
	}
}

// Every YAML block says what it is and loads as that: a --targets.file
// (strict: an unknown field is an error).
func TestDocsYAMLBlocksLoad(t *testing.T) {
	_, all := docBlocks(t)
	for _, b := range all {
		if b.Lang != "yaml" {
			continue
		}
		switch b.Marker {
		case "check: targets-file":
			dec := yaml.NewDecoder(strings.NewReader(b.Text))
			dec.KnownFields(true)
			var tf targetsFile
			if err := dec.Decode(&tf); err != nil {
				t.Errorf("%s: %v", b, err)
			}
			for _, tg := range tf.Targets {
				if tg.URL == "" {
					continue
				}
				if _, err := exporter.ParseURL(tg.URL); err != nil {
					t.Errorf("%s: target %s: %v", b, tg.Name, err)
				}
			}
		case "check: probe-modules":
			checkModulesBlock(t, b)
		case "check: prometheus-config":
			path := filepath.Join(t.TempDir(), "prometheus.yml")
			// Debian's Prometheus (scripts/test.sh) is built without
			// Kubernetes discovery: promtool checks the rest of the job.
			text := kubernetesSD.ReplaceAllString(b.Text, "static_configs:\n$1- targets: [redis:6379]\n")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			metrictest.RunTool(t, metrictest.Promtool(t), "check", "config", path)
		default:
			t.Errorf("%s: a YAML block needs <!-- check: targets-file -->, probe-modules or prometheus-config (or a check of its own here)", b)
		}
	}
}

// checkModulesBlock loads a modules file block as the exporter does, its
// password variables set.
func checkModulesBlock(t *testing.T, b doccheck.Block) {
	t.Helper()
	for _, m := range passwordEnv.FindAllStringSubmatch(b.Text, -1) {
		t.Setenv(m[1], "doc-password")
	}
	if _, err := probe.ParseModules([]byte(b.Text)); err != nil {
		t.Errorf("%s: %v", b, err)
	}
}

var (
	passwordEnv  = regexp.MustCompile(`password_env: (\S+)`)
	kubernetesSD = regexp.MustCompile(`kubernetes_sd_configs:\n( +)- role: \w+\n`)
)

// The Quick start promises the demo's own length.
func TestReadmeDemoDuration(t *testing.T) {
	root, _ := docBlocks(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("go run ./cmd/cachewatch demo   # a cache stampede, then the same load on cachewatch (%d s,", int(demo.DefaultDuration.Seconds()))
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md's Quick start does not promise the demo's length: want %q", want)
	}
}
