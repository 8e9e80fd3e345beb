package demo

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/internal/childproc"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// chromiumFlags run Debian's chromium headless and offline, with a fresh
// profile per call.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--hide-scrollbars", "--window-size=1200,1800", "--virtual-time-budget=5000",
}

// checkHTMLInBrowser renders the report in real headless chromium and fails
// on a script error, on a page whose script did not finish drawing, and on
// a blank screenshot. Without chromium it skips with how to get it
// (CACHEWATCH_REQUIRE_REDIS=1 makes that a failure, as for redis-server).
func checkHTMLInBrowser(t *testing.T, file string) {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		const how = "chromium not found: install it (apt-get install chromium, as scripts/test.sh does) to check the HTML report in a headless browser"
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatal(how)
		}
		t.Skip(how)
	}
	url := "file://" + file

	dom, logs := runChromium(t, bin, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
	if errs := between(dom, `<pre id="js-errors">`, "</pre>"); strings.Contains(dom, `data-status="error"`) || errs != "" {
		t.Fatalf("the report page had a script error:\n%s", errs)
	}
	if strings.Contains(logs, "Uncaught") {
		t.Fatalf("chromium logged an uncaught script error:\n%s", logs)
	}
	if !strings.Contains(dom, `data-rendered="ok"`) {
		t.Fatal("the report page's script did not finish drawing the charts")
	}
	if n := strings.Count(dom, "<polyline"); n < 4 {
		t.Fatalf("the charts have %d lines, want at least 4", n)
	}

	shot := filepath.Join(filepath.Dir(file), "report.png")
	runChromium(t, bin, "--screenshot="+shot, url)
	if err := notBlank(shot); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("CACHEWATCH_DEMO_SCREENSHOT_DIR"); dir != "" {
		if b, err := os.ReadFile(shot); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "demo-report.png"), b, 0o644)
		}
	}
}

// runChromium runs one headless chromium call with a fresh profile and
// returns its stdout and stderr.
func runChromium(t *testing.T, bin string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append([]string{"--user-data-dir=" + t.TempDir()}, chromiumFlags...), args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := childproc.Start(cmd) // a headless browser left running would outlive a killed test binary
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// notBlank fails for a screenshot of one colour (nothing rendered).
func notBlank(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return err
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 8 {
		return &blankError{b}
	}
	return nil
}

type blankError struct{ bounds image.Rectangle }

func (e *blankError) Error() string {
	return "the report screenshot is blank (" + e.bounds.String() + ")"
}

func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return "missing " + from
	}
	before, _, _ := strings.Cut(after, to)
	return before
}
