package locks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the listing as one JSON document.
func (l *Listing) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l)
}

// WriteTable writes the listing as a table, longest-held first: at most
// limit rows (0: all), then how many were left out.
func (l *Listing) WriteTable(w io.Writer, limit int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%d locks at %s\n", len(l.Locks), l.At.UTC().Format(time.RFC3339))
	fmt.Fprintln(tw, "KEY\tGROUP\tSERVICE\tHOST\tPID\tALIVE?\tHELD FOR\tTTL LEFT\tNODE")
	rows := l.Locks
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	for _, lk := range rows {
		service, pid := lk.Service, ""
		if lk.Format == "opaque" {
			service = "opaque"
		}
		if lk.PID > 0 {
			pid = strconv.Itoa(lk.PID)
		}
		held := duration(lk.HeldFor)
		if lk.HeldAtLeast {
			held = "≥" + held
		}
		ttl := "none"
		if lk.TTL >= 0 {
			ttl = duration(lk.TTL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(lk.Key), printable(lk.Group), printable(service),
			printable(lk.Host), pid, lk.Alive, held, ttl, lk.Node)
	}
	if n := len(l.Locks) - len(rows); n > 0 {
		fmt.Fprintf(tw, "… and %d more (--limit)\n", n)
	}
	if l.Truncated {
		fmt.Fprintln(tw, "more locks matched than listed (--locks.max-tracked)")
	}
	return tw.Flush()
}

// duration prints seconds to the tenth, as 1h2m3s above a minute.
func duration(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// printable quotes what a terminal must not interpret: a key or a holder
// is whatever its writer stored, escape sequences included.
func printable(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' || r == '\t' {
			return strconv.Quote(s)
		}
	}
	return s
}

// clearScreen moves the cursor home and clears a terminal.
const clearScreen = "\x1b[H\x1b[2J"

// WatchOptions say how Watch prints.
type WatchOptions struct {
	// JSON prints each listing as JSON instead of a table.
	JSON bool
	// Limit bounds the table's rows (0: all).
	Limit int
	// Once prints one listing and returns.
	Once bool
	// Refresh is the time between listings; default DefaultRefresh.
	Refresh time.Duration
	// Clear clears the screen before each listing (a terminal).
	Clear bool
}

// Watch prints a listing every Refresh, like top, until ctx ends (nil
// then), or once. A listing that failed prints what it found and the
// error; with Once the error is returned.
func (r *Reader) Watch(ctx context.Context, w io.Writer, o WatchOptions) error {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	for {
		l, err := r.Read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if o.Clear {
			io.WriteString(w, clearScreen)
		}
		werr := l.write(w, o)
		if err != nil && !o.Once {
			fmt.Fprintf(w, "error: %s\n", strings.TrimSpace(err.Error()))
		}
		if o.Once || werr != nil {
			return errors.Join(err, werr)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.opts.Clock.After(o.Refresh):
		}
	}
}

func (l *Listing) write(w io.Writer, o WatchOptions) error {
	if o.JSON {
		return l.WriteJSON(w)
	}
	return l.WriteTable(w, o.Limit)
}
