package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register("version", command{summary: "print the version and build information", run: runVersion})
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) int {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	fmt.Fprintf(stdout, "cachewatch %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
