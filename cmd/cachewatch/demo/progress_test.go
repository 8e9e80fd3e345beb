package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressPrinter(t *testing.T) {
	p := Progress{Phase: PhaseUnprotected, PhaseIndex: 1, Elapsed: 3 * time.Second, Total: 36 * time.Second,
		Requests: 1000, DatabaseCalls: 40, Refreshes: 8}

	var plain bytes.Buffer
	print := ProgressPrinter(&plain, false, 0)
	print(p)
	print(p) // within two seconds of the last line: not repeated
	p2 := p
	p2.Phase, p2.PhaseIndex = PhaseCachewatch, 2
	print(p2) // a new phase is always shown
	if got := strings.Count(plain.String(), "\n"); got != 2 || strings.ContainsAny(plain.String(), "\r\033") {
		t.Errorf("plain output %q: want 2 lines without control codes", plain.String())
	}
	if !strings.Contains(plain.String(), "5.0/refresh") {
		t.Errorf("plain output %q lacks the calls per refresh", plain.String())
	}

	var tty bytes.Buffer
	ProgressPrinter(&tty, true, 40)(p)
	line := strings.TrimPrefix(tty.String(), "\r\033[K")
	if line == tty.String() || len(line) >= 40 || strings.Contains(line, "\n") {
		t.Errorf("terminal output %q: want one rewritten line under 40 columns", tty.String())
	}
}
