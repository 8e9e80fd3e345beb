package demo

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// ProgressPrinter returns a Progress callback writing to w: one line
// rewritten in place when w is a terminal (cut to width columns when width
// is positive, so that it never wraps), otherwise a plain line every two
// seconds and at each phase change (logs and pipes get no control codes).
func ProgressPrinter(w io.Writer, terminal bool, width int) func(Progress) {
	var (
		mu        sync.Mutex
		lastPhase int
		lastLine  time.Time
	)
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		line := progressLine(p)
		switch {
		case terminal:
			if lastPhase != 0 && p.PhaseIndex != lastPhase {
				fmt.Fprintln(w) // keep the finished phase's last line
			}
			if width > 1 && len(line) >= width {
				line = line[:width-1]
			}
			fmt.Fprintf(w, "\r\033[K%s", line)
		case p.PhaseIndex != lastPhase || time.Since(lastLine) >= 2*time.Second:
			fmt.Fprintln(w, line)
			lastLine = time.Now()
		}
		lastPhase = p.PhaseIndex
	}
}

// EndProgress finishes the in-place line of a terminal.
func EndProgress(w io.Writer, terminal bool) {
	if terminal {
		fmt.Fprintln(w)
	}
}

// progressLine is one line of at most 80 columns for the default run,
// each figure named as the report's row: loader calls per refresh,
// first-try lock contention of waiting callers, locks lost, older writes
// that landed.
func progressLine(p Progress) string {
	perRefresh := 0.0
	if p.Refreshes > 0 {
		perRefresh = float64(p.DatabaseCalls) / float64(p.Refreshes)
	}
	contention := 0.0
	if p.WaitFirst > 0 {
		contention = 100 * float64(p.WaitBusy) / float64(p.WaitFirst)
	}
	return fmt.Sprintf("%-11s %2.0f/%.0fs  db/refresh %.1f  contention %.0f%%  lost %d  older landed %d",
		p.Phase, p.Elapsed.Seconds(), p.Total.Seconds(), perRefresh, contention, p.LocksLost, p.OlderLanded)
}
