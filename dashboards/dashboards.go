// Package dashboards builds cachewatch's Grafana dashboards from the signal
// catalog with the Grafana Foundation SDK.
//
// Three boards, each read top to bottom from a symptom to its cause:
//
//   - cachewatch / Service contention (uid cachewatch-contention): locks and
//     the cache as the instrumented client and the hook see them, per key group;
//   - cachewatch / Redis commands & pool (uid cachewatch-redis): the hook's
//     view of the wire: command and script latency, errors, pipelines, pool;
//   - cachewatch / Keyspace & locks (uid cachewatch-keyspace): the exporter's
//     view of the server: locks, expiry shape, server stats, queues, and the
//     sampler's own health.
//
// Each board opens with a row of stat panels, the figures an on-call
// engineer checks first. A panel that plots the value an alert of package
// alerts compares carries that alert's thresholds (default configuration;
// warning orange, critical red), every panel links to its runbook section,
// and the firing cachewatch alerts (Prometheus's ALERTS series) are
// annotations. The exporter's figures are the max per node over the
// exporters sampling it, as in the alerts.
//
// Every metric and label name in a query comes from package signals, so a
// renamed metric renames its panels; a panel whose runbook names an alert
// package alerts does not define does not build. The generated JSON is committed in
// dashboards/json; `go generate ./...` rewrites it and a test fails while
// it is stale. Import it into Grafana by hand, provision it from files, or
// send it with [Push].
package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

//go:generate go run ./internal/genjson -out json

// The Helm chart's and the mixin's copies of the boards and the rules are
// written by the deploy module's generator, from this package and alerts.
//go:generate go -C ../deploy generate ./...

// Dashboard is one built board.
type Dashboard struct {
	UID   string
	Title string
	// Model is the board in the SDK's dashboard model, as Grafana imports it.
	Model dashboard.Dashboard
}

// JSON is the board as Grafana's dashboard JSON, indented, with a final
// newline: the content of dashboards/json/<uid>.json.
func (d Dashboard) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d.Model, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: encode %s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}

// Query is one PromQL expression of a panel, with the template variables
// ($job, $instance, $client, $key_group, $__rate_interval) still in it.
type Query struct {
	Board string // the board's UID
	Panel string // the panel's title
	Expr  string
}

// plans lists the boards in the order they are shown and linked.
var plans = []func() (*board, error){contention, redis, keyspace}

// Dashboards builds every board. An error means a query names a metric,
// label or value the catalog does not have.
func Dashboards() ([]Dashboard, error) {
	boards := make([]*board, 0, len(plans))
	var errs []error
	for _, plan := range plans {
		b, err := plan()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		boards = append(boards, b)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := make([]Dashboard, 0, len(boards))
	for _, b := range boards {
		var others []*board
		for _, o := range boards {
			if o != b {
				others = append(others, o)
			}
		}
		model, err := b.build(others)
		if err != nil {
			return nil, fmt.Errorf("dashboards: build %s: %w", b, err)
		}
		out = append(out, Dashboard{UID: b.uid, Title: b.title, Model: model})
	}
	return out, nil
}

// Queries returns every panel query of every board, in board and panel
// order. It panics if the boards do not build, which a test of this
// package rules out.
func Queries() []Query {
	ds, err := Dashboards()
	if err != nil {
		panic(err)
	}
	var out []Query
	for _, d := range ds {
		for _, p := range panels(d.Model) {
			for _, t := range p.Targets {
				if q, ok := t.(prometheus.Dataquery); ok {
					out = append(out, Query{Board: d.UID, Panel: deref(p.Title), Expr: q.Expr})
				}
			}
		}
	}
	return out
}

// panels lists a board's panels, those inside rows included.
func panels(d dashboard.Dashboard) []dashboard.Panel {
	var out []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			out = append(out, *p.Panel)
		case p.RowPanel != nil:
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Write writes every board to dir as <uid>.json, creating dir if needed.
// A file is rewritten only when its content changed.
func Write(dir string) error {
	return writeEach(dir, ".json", Dashboard.JSON)
}
