package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// testBuildArgs are the --build-arg values the test builds with.
var testBuildArgs = map[string]string{
	"VERSION": "v9.8.7-test",
	"COMMIT":  "0123456789abcdef0123456789abcdef01234567",
	"DATE":    "2026-01-02T03:04:05Z",
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

// stage is one FROM … stage of a Dockerfile.
type stage struct {
	from, name string
	steps      []instruction
}

// parseDockerfile reads the root Dockerfile into its stages: comments and
// blank lines dropped, lines ending in \ joined.
func parseDockerfile() ([]stage, error) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	var stages []stage
	var line strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line.Len() == 0 && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		cmd, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			from, name, _ := strings.Cut(in.args, " AS ")
			stages = append(stages, stage{from: strings.TrimSpace(from), name: strings.TrimSpace(name)})
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("Dockerfile: %s before FROM", in.cmd)
		}
		stages[len(stages)-1].steps = append(stages[len(stages)-1].steps, in)
	}
	return stages, sc.Err()
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.steps {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// goBuild returns the build stage's `go build` command line.
func goBuild(stages []stage) (string, error) {
	for _, s := range stages {
		for _, run := range s.all("RUN") {
			if strings.Contains(run, "go build") {
				return run, nil
			}
		}
	}
	return "", fmt.Errorf("Dockerfile: no RUN … go build")
}

var outFlag = regexp.MustCompile(`-o (\S+)`)

// buildAsDockerfile runs the Dockerfile's `go build` command line as it is
// written, with ${ARG}s set to args, writing the binary to out.
func buildAsDockerfile(out string, args map[string]string) (string, error) {
	stages, err := parseDockerfile()
	if err != nil {
		return "", err
	}
	line, err := goBuild(stages)
	if err != nil {
		return "", err
	}
	line = os.Expand(line, func(name string) string { return args[name] })
	if !outFlag.MatchString(line) {
		return "", fmt.Errorf("Dockerfile: go build has no -o: %s", line)
	}
	line = outFlag.ReplaceAllString(line, "-o "+out)
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", line, err, b)
	}
	return out, nil
}

// TestImageBuild checks the binary built exactly as the Dockerfile's build
// stage builds it: static, and reporting the injected version, commit and
// date.
func TestImageBuild(t *testing.T) {
	bin := binary(t)
	stages, err := parseDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := goBuild(stages)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "${VERSION}", "${COMMIT}", "${DATE}", "./cmd/cachewatch"} {
		if !strings.Contains(line, want) {
			t.Errorf("the Dockerfile's go build lacks %s: %s", want, line)
		}
	}
	out := string(run(t, "--version"))
	want := fmt.Sprintf("cachewatch %s (commit %s, built %s) ", testBuildArgs["VERSION"], testBuildArgs["COMMIT"], testBuildArgs["DATE"])
	if !strings.HasPrefix(out, want) {
		t.Errorf("--version = %q, want it to start with %q", out, want)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader: it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v", libs)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("binary size %d bytes (%.1f MiB)", st.Size(), float64(st.Size())/(1<<20))
}

// TestImageMatchesDocsAndChart checks the Dockerfile's base images, user,
// port and entry point against docs/exporter.md, go.mod and the chart.
func TestImageMatchesDocsAndChart(t *testing.T) {
	stages, err := parseDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("want a build and a runtime stage, got %d stages", len(stages))
	}
	build, final := stages[0], stages[1]
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(readFile(t, filepath.Join(root, "go.mod")))
	if want := "golang:" + string(goVersion[1]) + "-"; !strings.HasPrefix(build.from, want) {
		t.Errorf("build stage FROM %s, want the go.mod's Go: %s…", build.from, want)
	}
	docs := string(readFile(t, filepath.Join(root, "docs", "exporter.md")))
	_, section, _ := strings.Cut(docs, "## Container image")
	section, _, _ = strings.Cut(section, "\n## ")
	user := final.all("USER")
	expose := final.all("EXPOSE")
	if len(user) != 1 || len(expose) != 1 {
		t.Fatalf("runtime stage: USER %v, EXPOSE %v; want one of each", user, expose)
	}
	uid, _, _ := strings.Cut(user[0], ":")
	for what, want := range map[string]string{"base image": final.from, "user": user[0], "port": expose[0]} {
		if !strings.Contains(section, "`"+want+"`") {
			t.Errorf("docs/exporter.md's Container image section does not give the %s `%s`", what, want)
		}
	}
	if !strings.HasPrefix(final.from, "gcr.io/distroless/") && final.from != "scratch" {
		t.Errorf("runtime stage FROM %s: want distroless or scratch", final.from)
	}
	if uid == "0" || uid == "root" {
		t.Errorf("runtime stage runs as %s", user[0])
	}
	if ep := final.all("ENTRYPOINT"); len(ep) != 1 || !strings.Contains(ep[0], "/cachewatch") {
		t.Errorf("ENTRYPOINT %v: want the cachewatch binary", ep)
	}

	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
		PodSecurityContext struct {
			RunAsUser int `json:"runAsUser"`
		} `json:"podSecurityContext"`
		Web struct {
			Port int `json:"port"`
		} `json:"web"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(values.PodSecurityContext.RunAsUser) != uid {
		t.Errorf("chart runAsUser %d, image user %s", values.PodSecurityContext.RunAsUser, uid)
	}
	if fmt.Sprint(values.Web.Port) != expose[0] {
		t.Errorf("chart web.port %d, image EXPOSE %s", values.Web.Port, expose[0])
	}
	if !strings.Contains(section, "`"+values.Image.Repository+"`") {
		t.Errorf("docs/exporter.md's Container image section does not name the chart's image %s", values.Image.Repository)
	}
}
