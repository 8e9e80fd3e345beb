package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "cachewatch ") {
		t.Fatalf("version: code %d, out %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: code %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "version") {
		t.Fatalf("help: code %d, out %q", code, out.String())
	}
}
