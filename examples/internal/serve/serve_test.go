package serve

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The examples read the password from the variable the cachewatch command
// reads; the older name still works, with a line saying to rename it.
func TestPasswordEnv(t *testing.T) {
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))

	t.Setenv(PasswordEnv, "")
	t.Setenv(oldPasswordEnv, "old")
	if got := password("swr"); got != "old" || !strings.Contains(logged.String(), "deprecated: set $"+PasswordEnv) {
		t.Errorf("old name: password %q, log %q", got, logged.String())
	}
	logged.Reset()
	t.Setenv(PasswordEnv, "new")
	if got := password("swr"); got != "new" || logged.Len() != 0 {
		t.Errorf("new name: password %q, log %q", got, logged.String())
	}
}
