// Command gen writes the generated files of the Helm chart and the mixin,
// for `go generate`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cachewatch/cachewatch/deploy/internal/deploygen"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := deploygen.Write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
