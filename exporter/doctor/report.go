package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if r.Findings == nil {
		r.Findings = []Finding{} // "findings": [] rather than null
	}
	return enc.Encode(r)
}

// WriteText writes the report for a terminal: a summary line, then each
// finding with its evidence and fix, most severe first.
func (r *Report) WriteText(w io.Writer) error {
	var keys uint64
	up := 0
	for _, n := range r.Nodes {
		keys += n.Keys
		if n.Up {
			up++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cachewatch doctor: %d of %d node(s) sampled, %d keys, samples %gs apart: %d critical, %d warning, %d info\n",
		up, len(r.Nodes), keys, r.IntervalSeconds, r.Count(Critical), r.Count(Warning), r.Count(Info))
	if len(r.Findings) == 0 {
		b.WriteString("\nno findings\n")
	}
	for _, f := range r.Findings {
		subject := strings.TrimSpace(strings.Join([]string{f.KeyGroup, f.Queue, f.ConsumerGroup, f.Command}, " "))
		fmt.Fprintf(&b, "\n%-8s  %s  %s\n  evidence: %s\n  fix:      %s\n", strings.ToUpper(string(f.Severity)), f.Check, subject, f.Evidence, f.Fix)
	}
	if len(r.HotKeys) > 0 {
		b.WriteString("\nhottest keys (OBJECT FREQ):\n")
		for _, hk := range r.HotKeys {
			ttl := ""
			if hk.NoTTL {
				ttl = "  (no TTL)"
			}
			fmt.Fprintf(&b, "  %4d  %s  [%s]%s\n", hk.Freq, hk.Key, hk.Group, ttl)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
