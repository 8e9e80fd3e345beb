package demo

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
)

//go:embed report.html.tmpl
var reportHTML string

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"cell": func(v *float64, format string) string { return cell(v, format) },
	"pct":  func(f Figure) Figure { return percent(f) },
}).Parse(reportHTML))

// WriteHTML writes the report as one self-contained page: the table, and
// charts of caller latency and loader calls over time drawn by inline
// script from the embedded data. It loads nothing from the network.
func (r *Report) WriteHTML(w io.Writer) error {
	err := reportTemplate.Execute(w, struct {
		*Report
		// Data is the report again, for the charts' script: html/template
		// writes a value in a script element as escaped JSON.
		Data *Report
	}{r, r})
	if err != nil {
		return fmt.Errorf("write HTML report: %w", err)
	}
	return nil
}
