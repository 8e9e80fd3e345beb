package dashboards_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/signals"
)

// TestJSONFresh fails while a committed dashboards/json/<uid>.json differs
// from what the code generates, or a file there belongs to no board.
func TestJSONFresh(t *testing.T) {
	ds, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, d := range ds {
		name := d.UID + ".json"
		want[name] = true
		b, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("json", name))
		if err != nil {
			t.Errorf("read committed %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("dashboards/json/%s is stale: run `go generate ./dashboards` and commit the result", name)
		}
	}
	files, err := os.ReadDir("json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !want[f.Name()] {
			t.Errorf("dashboards/json/%s belongs to no board: delete it", f.Name())
		}
	}
}

// TestWrite writes the boards to a fresh directory and reads back the
// committed bytes.
func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := dashboards.Write(dir); err != nil {
		t.Fatal(err)
	}
	for uid := range wantBoards {
		got, err := os.ReadFile(filepath.Join(dir, uid+".json"))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join("json", uid+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, committed) {
			t.Errorf("%s: Write and the committed file differ", uid)
		}
	}
}

// TestJSONImportsIntoGrafanaModel decodes each committed file into the
// SDK's dashboard model (panel options and queries into their plugins'
// types), validates it and encodes it again: the bytes must not change, so
// no field is unknown to the model, mistyped or lost.
func TestJSONImportsIntoGrafanaModel(t *testing.T) {
	for uid := range wantBoards {
		raw, err := os.ReadFile(filepath.Join("json", uid+".json"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := roundTrip(raw)
		if err != nil {
			t.Errorf("%s: %v", uid, err)
			continue
		}
		if !bytes.Equal(again, raw) {
			t.Errorf("%s: decoding into the model and encoding again changes the JSON: a field is unknown to Grafana's model", uid)
		}
	}
}

// roundTrip decodes raw into the SDK's dashboard model, validates it, and
// encodes it as Dashboard.JSON does. (The SDK v0.0.22 strict decoder drops
// every panel, so the typed decoder plus the byte comparison stands in.)
func roundTrip(raw []byte) ([]byte, error) {
	plugins.RegisterDefaultPlugins()
	var model dashboard.Dashboard
	if err := json.Unmarshal(raw, &model); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := model.Validate(); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	if len(model.Panels) == 0 || model.Panels[1].Panel == nil || len(model.Panels[1].Panel.Targets) == 0 {
		return nil, fmt.Errorf("the model lost the panels or their queries")
	}
	if _, ok := model.Panels[1].Panel.Targets[0].(*prometheus.Dataquery); !ok {
		return nil, fmt.Errorf("queries decode as %T, not Prometheus queries", model.Panels[1].Panel.Targets[0])
	}
	return dashboards.Dashboard{Model: model}.JSON()
}

// TestRoundTripCanFail shows the round trip catches a field the model does
// not know and a mistyped one.
func TestRoundTripCanFail(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("json", dashboards.RedisUID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	unknown := strings.Replace(string(raw), `"transparent": false,`, `"transparent": false, "colour": "red",`, 1)
	if again, err := roundTrip([]byte(unknown)); err != nil || bytes.Equal(again, []byte(unknown)) {
		t.Errorf("an unknown panel field survived the round trip (err %v)", err)
	}
	mistyped := strings.Replace(string(raw), `"editable": false`, `"editable": "no"`, 1)
	if _, err := roundTrip([]byte(mistyped)); err == nil {
		t.Error("a string for editable decoded")
	}
}

// The catalog's names cannot be changed at run time any more (they are
// signals.ID constants), so a rename is an edit of the constant, and
// TestNoHandTypedMetricNames keeps every query on the constants: queries
// reference the definitions, not copies.
func TestQueriesUseCatalogNames(t *testing.T) {
	var attempts int
	for _, q := range dashboards.Queries() {
		if strings.Contains(q.Expr, signals.LockAttempts.String()) {
			attempts++
		}
	}
	if attempts < 2 {
		t.Errorf("%d queries read %s, want the contention panels", attempts, signals.LockAttempts)
	}
}

// TestNoHandTypedMetricNames fails when the package's code spells a metric
// name instead of taking it from the catalog.
func TestNoHandTypedMetricNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	spelt := regexp.MustCompile(`"[^"]*cachewatch_[a-z_]+`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := spelt.Find(src); m != nil {
			t.Errorf("%s spells a metric name: %s", f, m)
		}
	}
}

// TestQueriesCoverEveryPanel checks Queries is the panels' queries, with
// board and panel named, so the end-to-end test runs all of them.
func TestQueriesCoverEveryPanel(t *testing.T) {
	var want int
	for _, b := range generated(t) {
		for _, p := range b.panels() {
			want += len(objects(p["targets"]))
		}
	}
	qs := dashboards.Queries()
	if len(qs) != want {
		t.Fatalf("Queries() = %d queries, the boards have %d targets", len(qs), want)
	}
	for _, q := range qs {
		if _, ok := wantBoards[q.Board]; !ok || q.Panel == "" || q.Expr == "" {
			t.Errorf("incomplete query %+v", q)
		}
	}
}
