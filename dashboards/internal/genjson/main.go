// Command genjson writes the dashboards' JSON, for `go generate`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cachewatch/cachewatch/dashboards"
)

func main() {
	out := flag.String("out", "json", "directory to write <uid>.json files to")
	flag.Parse()
	if err := dashboards.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "genjson:", err)
		os.Exit(1)
	}
}
