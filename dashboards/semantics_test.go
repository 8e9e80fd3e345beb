package dashboards_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/signals"
)

// The derived panels (ratios, "absent means 0", amplification) are checked
// for what they compute, not only that they parse: promtool test rules
// evaluates them over made-up series in the real PromQL engine.

type series struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type sample struct {
	Labels string  `json:"labels"`
	Value  float64 `json:"value"`
}

type exprTest struct {
	Expr       string   `json:"expr"`
	EvalTime   string   `json:"eval_time"`
	ExpSamples []sample `json:"exp_samples"`
}

// panelExpr is the first query of the panel with this title, made concrete.
func panelExpr(t *testing.T, title string) string {
	t.Helper()
	for _, q := range dashboards.Queries() {
		if q.Panel == title {
			return concrete.Replace(q.Expr)
		}
	}
	t.Fatalf("no panel %q", title)
	return ""
}

// counter is a series of m growing by perSample every 15 s for 20 minutes.
func counter(m signals.ID, labels string, perSample int) series {
	return series{m.String() + `{job="svc", instance="a:1", ` + labels + `}`, "0+" + itoa(perSample) + "x80"}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestDerivedPanelsCompute(t *testing.T) {
	promtool := metrictest.Promtool(t)
	input := []series{
		// Contention: group g has 2 busy of 8 first attempts of waiting
		// callers, from two clients whose series the panel adds up; group
		// h none busy. A run-once job's try-once attempts lose half their
		// races, which the contention panel leaves out and the try-once
		// panel shows.
		counter(signals.LockAttempts, `client="b", key_group="g", mode="wait", attempt="first", result="acquired"`, 4),
		counter(signals.LockAttempts, `client="a", key_group="g", mode="wait", attempt="first", result="acquired"`, 2),
		counter(signals.LockAttempts, `client="a", key_group="g", mode="wait", attempt="first", result="busy"`, 2),
		counter(signals.LockAttempts, `client="a", key_group="g", mode="wait", attempt="retry", result="busy"`, 50),
		counter(signals.LockAttempts, `client="a", key_group="h", mode="wait", attempt="first", result="acquired"`, 3),
		counter(signals.LockAttempts, `client="a", key_group="g", mode="try_once", attempt="first", result="busy"`, 5),
		counter(signals.LockAttempts, `client="a", key_group="g", mode="try_once", attempt="first", result="acquired"`, 5),
		// Amplification: group g threw one of two loads away; h none.
		counter(signals.LoaderCalls, `client="a", key_group="g", result="success"`, 2),
		counter(signals.LoaderCalls, `client="a", key_group="g", result="rejected"`, 7),
		counter(signals.StaleWritesRefused, `client="a", key_group="g"`, 1),
		counter(signals.LoaderCalls, `client="a", key_group="h", result="success"`, 4),
		// Lookup shares.
		counter(signals.CacheLookups, `client="a", key_group="g", result="hit"`, 3),
		counter(signals.CacheLookups, `client="a", key_group="g", result="miss"`, 1),
		// Group h: one lookup of two ends in an error.
		counter(signals.CacheLookups, `client="a", key_group="h", result="hit"`, 1),
		counter(signals.CacheLookups, `client="a", key_group="h", result="error"`, 1),
		// Command errors: 1 of 4 GETs failed, no SET did.
		{signals.CommandDuration.String() + `_count{job="svc", instance="a:1", client="c", command="get"}`, "0+4x80"},
		{signals.CommandDuration.String() + `_count{job="svc", instance="a:1", client="c", command="set"}`, "0+2x80"},
		counter(signals.CommandErrors, `client="c", command="get", error_class="timeout"`, 1),
	}
	tests := []exprTest{
		{panelExpr(t, "Contention rate (busy first attempts / first attempts)"), "10m", []sample{
			{`{key_group="g"}`, 0.25}, {`{key_group="h"}`, 0}}},
		{panelExpr(t, "First-try contention (worst key group)"), "10m", []sample{{`{}`, 0.25}}},
		{panelExpr(t, "Busy share of try-once acquisitions"), "10m", []sample{{`{key_group="g"}`, 0.5}}},
		{panelExpr(t, "Loader amplification (loader calls per kept result)"), "10m", []sample{
			{`{key_group="g"}`, 2}, {`{key_group="h"}`, 1}}},
		{panelExpr(t, "Cache lookups by result (share)"), "10m", []sample{
			{`{key_group="g", result="hit"}`, 0.75}, {`{key_group="g", result="miss"}`, 0.25},
			{`{key_group="h", result="hit"}`, 0.5}, {`{key_group="h", result="error"}`, 0.5}}},
		{panelExpr(t, "Callers getting errors (worst key group)"), "10m", []sample{{`{}`, 0.5}}},
		{panelExpr(t, "Stale share (worst key group)"), "10m", []sample{{`{}`, 0}}},
		{panelExpr(t, "Command error ratio by command"), "10m", []sample{
			{`{client="c", command="get"}`, 0.25}, {`{client="c", command="set"}`, 0}}},
		// 1 of the client's 6 commands a sample failed.
		{panelExpr(t, "Command error share (worst client)"), "10m", []sample{{`{}`, 1.0 / 6}}},
	}
	if err := promtoolTest(t, promtool, input, tests); err != nil {
		t.Fatal(err)
	}
}

// promtoolTest evaluates the expression tests over the input series (15 s
// apart) with promtool test rules, and returns its complaint, if any.
func promtoolTest(t *testing.T, promtool string, input []series, tests []exprTest) error {
	t.Helper()
	file := map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "15s",
		"tests":               []any{map[string]any{"interval": "15s", "input_series": input, "promql_expr_test": tests}},
	}
	raw, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "expr_test.yml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		return fmt.Errorf("promtool test rules: %w\n%s", err, out)
	}
	return nil
}
