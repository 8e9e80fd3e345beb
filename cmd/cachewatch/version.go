package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
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
// page show: version, commit and build date, Go version and platform.
//
// A release build injects them as Prometheus exporters do (the Dockerfile's
// -ldflags "-X github.com/prometheus/common/version.Version=…", .Revision,
// .BuildDate); a plain `go build` or `go install` falls back to what the Go
// toolchain recorded: the module version and the VCS revision and time.
func versionString() string {
	v, rev, date := version.Version, version.Revision, version.BuildDate
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.time" && date == "":
				date = s.Value
			}
		}
	}
	return fmt.Sprintf("cachewatch %s (commit %s, built %s) %s %s/%s",
		orUnknown(v, "(devel)"), orUnknown(rev, "unknown"), orUnknown(date, "unknown"), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func orUnknown(s, unknown string) string {
	if s == "" {
		return unknown
	}
	return s
}
