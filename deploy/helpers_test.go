package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository root.
const root = ".."

// chartDir is the Helm chart.
const chartDir = "helm/cachewatch-exporter"

// cachewatch is the binary TestMain builds as the Dockerfile's build stage
// does; empty when the build failed (TestImageBuild reports why).
var cachewatch string

// buildErr is why the build failed.
var buildErr error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cachewatch-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cachewatch, buildErr = buildAsDockerfile(filepath.Join(dir, "cachewatch"), testBuildArgs)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the built cachewatch binary or stops the test.
func binary(t *testing.T) string {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("building cachewatch as the Dockerfile does: %v", buildErr)
	}
	return cachewatch
}

// run runs the binary and returns its stdout, failing on a non-zero exit.
func run(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cachewatch %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// splitDocs splits a YAML stream into its non-empty documents.
func splitDocs(stream []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		trimmed := regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")
		if strings.TrimSpace(trimmed) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// decodeStrict decodes one YAML document into v, failing on a duplicate
// or unknown field: a typo in a manifest is a test failure, not a field
// the API server silently drops.
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// typeMeta reads a document's apiVersion and kind.
func typeMeta(doc []byte) (apiVersion, kind string, err error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	err = yaml.Unmarshal(doc, &tm)
	return tm.APIVersion, tm.Kind, err
}

// objects are the decoded documents of a rendered chart or a command's
// output, by kind.
type objects struct {
	Deployments     []appsv1.Deployment
	StatefulSets    []appsv1.StatefulSet
	Probes          []monitoringv1.Probe
	ScrapeConfigs   []monitoringv1alpha1.ScrapeConfig
	Services        []corev1.Service
	ServiceAccounts []corev1.ServiceAccount
	ConfigMaps      []corev1.ConfigMap
	NetworkPolicies []networkingv1.NetworkPolicy
	ServiceMonitors []monitoringv1.ServiceMonitor
	PrometheusRules []monitoringv1.PrometheusRule
}

// decodeAll decodes every document of stream strictly into the Go type of
// its apiVersion and kind; a kind the chart should not render is an error.
func decodeAll(t *testing.T, stream []byte) objects {
	t.Helper()
	var o objects
	for _, doc := range splitDocs(stream) {
		apiVersion, kind, err := typeMeta(doc)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		var target any
		switch apiVersion + " " + kind {
		case "apps/v1 Deployment":
			target = slot(&o.Deployments)
		case "apps/v1 StatefulSet":
			target = slot(&o.StatefulSets)
		case "monitoring.coreos.com/v1 Probe":
			target = slot(&o.Probes)
		case "monitoring.coreos.com/v1alpha1 ScrapeConfig":
			target = slot(&o.ScrapeConfigs)
		case "v1 Service":
			target = slot(&o.Services)
		case "v1 ServiceAccount":
			target = slot(&o.ServiceAccounts)
		case "v1 ConfigMap":
			target = slot(&o.ConfigMaps)
		case "networking.k8s.io/v1 NetworkPolicy":
			target = slot(&o.NetworkPolicies)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			target = slot(&o.ServiceMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			target = slot(&o.PrometheusRules)
		default:
			t.Fatalf("unexpected object %s %s:\n%s", apiVersion, kind, doc)
		}
		if err := decodeStrict(doc, target); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v\n%s", apiVersion, kind, err, doc)
		}
	}
	return o
}

// slot appends a zero T to list and returns it, for decoding into.
func slot[T any](list *[]T) *T {
	var zero T
	*list = append(*list, zero)
	return &(*list)[len(*list)-1]
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// podSpec is the exporter's pod: the Deployment's, or in probe mode the
// StatefulSet's.
func podSpec(t *testing.T, o objects) corev1.PodSpec {
	t.Helper()
	switch {
	case len(o.Deployments) == 1 && len(o.StatefulSets) == 0:
		return o.Deployments[0].Spec.Template.Spec
	case len(o.StatefulSets) == 1 && len(o.Deployments) == 0:
		return o.StatefulSets[0].Spec.Template.Spec
	}
	t.Fatalf("%d Deployments and %d StatefulSets, want one of either", len(o.Deployments), len(o.StatefulSets))
	return corev1.PodSpec{}
}
