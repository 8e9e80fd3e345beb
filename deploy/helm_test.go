package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"sigs.k8s.io/yaml"
)

// The chart is linted and rendered by Helm's own packages, the code that
// `helm lint --strict` and `helm template` run, without building the helm
// command (which also carries kubectl, registry and plugin clients).

// releaseName and releaseNamespace are the release the tests render.
const (
	releaseName      = "cw"
	releaseNamespace = "cache"
)

// kubeVersion is the Kubernetes version `helm template` and `helm lint`
// assume without a cluster: the version of the client-go they are built
// with (v0.37.2 → v1.37.2), here the one go.mod requires. (In a test
// binary, which has no module information, Helm's packages assume v1.20.)
func kubeVersion() (*common.KubeVersion, error) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		return nil, err
	}
	m := clientGoRequire.FindSubmatch(mod)
	if m == nil {
		return nil, errors.New("go.mod does not require k8s.io/client-go")
	}
	return common.ParseKubeVersion("v1" + string(m[1]))
}

var clientGoRequire = regexp.MustCompile(`(?m)^\s*k8s\.io/client-go v0(\.\d+\.\d+)`)

// readValues turns values into what `helm -f values.yaml` reads: the same
// YAML round trip (numbers become float64, as from a file).
func readValues(t *testing.T, values map[string]any) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := common.ReadValues(data)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// helmLintStrict is `helm lint --strict chartDir -f values`: every
// message of warning severity or above is an error.
// Like helm's, this lint renders with fail and required turned off: only
// helm template reports them.
func helmLintStrict(vals map[string]any) error {
	kv, err := kubeVersion()
	if err != nil {
		return err
	}
	linter := lint.RunAll(chartDir, vals, releaseNamespace, lint.WithKubeVersion(kv))
	var msgs []string
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			msgs = append(msgs, m.Error())
		}
	}
	if len(msgs) > 0 {
		return errors.New(strings.Join(msgs, "\n"))
	}
	return nil
}

// helmTemplate is `helm template cw chartDir --namespace cache -f values`:
// the values coalesced with the chart's and checked against its schema,
// every template rendered, and the manifests printed in install order.
func helmTemplate(vals map[string]any) ([]byte, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	kv, err := kubeVersion()
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, incompatible with %s", ch.Metadata.KubeVersion, caps.KubeVersion.Version)
	}
	options := common.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true}
	toRender, err := commonutil.ToRenderValuesWithSchemaValidation(ch, vals, options, caps, false)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, toRender)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if path.Base(name) == "NOTES.txt" {
			delete(files, name)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	return out.Bytes(), nil
}
