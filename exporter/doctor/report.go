package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// WriteJSON writes the report as one indented JSON document. Beyond what
// encoding/json escapes, DEL, C1 controls and Unicode format characters
// (bidi overrides) are written as \u escapes, so that printing the document
// on a terminal cannot run escape sequences hidden in key names.
func (r *Report) WriteJSON(w io.Writer) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if r.Findings == nil {
		r.Findings = []Finding{} // "findings": [] rather than null
	}
	if err := enc.Encode(r); err != nil {
		return err
	}
	_, err := w.Write(escapeJSON(buf.Bytes()))
	return err
}

// escapeJSON escapes the runes a terminal interprets that encoding/json
// leaves raw (DEL and beyond). They can only occur inside JSON strings,
// where \u escapes are valid.
func escapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r < utf8.RuneSelf-1 || !unsafeRune(r) || r == utf8.RuneError { // C0 is escaped already, or JSON whitespace
			out = append(out, b[:size]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[size:]
	}
	return out
}

// unsafeRune reports whether a terminal could act on r rather than show it:
// control characters (C0, DEL, C1) and format characters such as bidi
// overrides, which reorder what is shown.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// printable returns s with control and format characters and bytes that
// are not UTF-8 escaped Go-style (\x1b, \n, \u202e): a key name cannot clear
// the screen, move the cursor or start a line of its own. A backslash is
// escaped too (\\), so that an escape in the output always stands for the
// character it names. Clean text is returned unchanged.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || r == '\\' || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// subject names what a finding is about: key group, queue, consumer group
// and command, those that are set.
func (f *Finding) subject() string {
	var parts []string
	for _, p := range []string{f.KeyGroup, f.Queue, f.ConsumerGroup, f.Command} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, " ")
}

// WriteText writes the report for a terminal: a summary line, what could
// not be sampled, then each finding with its evidence and fix, most severe
// first. Everything that comes from Redis (key names, errors) is escaped.
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
	if len(r.Incomplete) > 0 {
		b.WriteString("\nINCOMPLETE: the findings below cover only what was sampled:\n")
		for _, reason := range r.Incomplete {
			fmt.Fprintf(&b, "  - %s\n", printable(reason))
		}
	}
	if len(r.Findings) == 0 {
		b.WriteString("\nno findings\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "\n%-8s  %s  %s\n  evidence: %s\n  fix:      %s\n", strings.ToUpper(string(f.Severity)), f.Check,
			printable(f.subject()), printable(f.Evidence), printable(f.Fix))
		writeHolders(&b, f.Locks)
	}
	if len(r.HotKeys) > 0 {
		b.WriteString("\nhottest keys (OBJECT FREQ):\n")
		for _, hk := range r.HotKeys {
			ttl := ""
			if hk.NoTTL {
				ttl = "  (no TTL)"
			}
			fmt.Fprintf(&b, "  %4d  %s  [%s]%s\n", hk.Freq, printable(hk.Key), printable(hk.Group), ttl)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
