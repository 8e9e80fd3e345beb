package deploy

import (
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/strvals"

	"github.com/cachewatch/cachewatch/internal/doccheck"
)

// Every helm install or template of the chart in the docs renders: its
// --set values pass the schema, helm lint --strict and helm template.
func TestDocsHelmCommandsRender(t *testing.T) {
	all, err := doccheck.All(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range all {
		if b.Lang != "sh" {
			continue
		}
		for _, line := range strings.Split(strings.ReplaceAll(b.Text, "\\\n", " "), "\n") {
			words := strings.Fields(line)
			if len(words) < 2 || words[0] != "helm" || (words[1] != "install" && words[1] != "template") {
				continue
			}
			n++
			values := map[string]any{}
			for i, w := range words {
				if w == "--set" && i+1 < len(words) {
					if err := strvals.ParseInto(words[i+1], values); err != nil {
						t.Fatalf("%s: --set %s: %v", b, words[i+1], err)
					}
				}
			}
			if _, err := renderChart(t, values); err != nil {
				t.Errorf("%s: %s: %v", b, line, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no helm install in the docs: the Kubernetes page shows none")
	}
}
