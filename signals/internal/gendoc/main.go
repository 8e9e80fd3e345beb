// Command gendoc writes docs/metrics.md from the signal catalog, and the
// service-level indicators package alerts generates from it.
package main

import (
	"bytes"
	"flag"
	"log"
	"os"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/signals"
)

func main() {
	out := flag.String("out", "docs/metrics.md", "file to write")
	flag.Parse()
	var buf bytes.Buffer
	if err := signals.WriteMarkdown(&buf); err != nil {
		log.Fatal(err)
	}
	buf.Write(alerts.SLIMarkdown(alerts.DefaultConfig()))
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
