package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kingpin/v2"
)

func init() {
	register(command{name: "version", help: "Print the version and build information.", define: defineVersion})
}

func defineVersion(*kingpin.CmdClause) action {
	return func(_ context.Context, c *cli) int {
		fmt.Fprintln(c.stdout, versionString())
		return 0
	}
}

// versionString is what --version, the version command and the landing
// page show: the module version, Go version and platform.
func versionString() string {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	return fmt.Sprintf("cachewatch %s %s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
