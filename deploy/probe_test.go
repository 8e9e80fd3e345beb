package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
)

// moduleEntry is one module of the exporter's --probe.modules-file, as
// docs/exporter.md describes it.
type moduleEntry struct {
	Username      string   `json:"username,omitempty"`
	PasswordFile  string   `json:"password_file,omitempty"`
	Mode          string   `json:"mode,omitempty"`
	TLS           bool     `json:"tls,omitempty"`
	TLSCAFile     string   `json:"tls_ca_file,omitempty"`
	TLSServerName string   `json:"tls_server_name,omitempty"`
	LockPatterns  []string `json:"lock_patterns,omitempty"`
	Queues        []string `json:"queues,omitempty"`
	Interval      string   `json:"interval,omitempty"`
	KeysPerSecond *float64 `json:"keys_per_second,omitempty"`
}

// shardedValues probe 4 targets from 3 replicas, with a module of each
// kind of secret.
func shardedValues() map[string]any {
	return map[string]any{"probe": map[string]any{
		"enabled": true, "shards": 3, "module": "orders", "interval": "30s", "labels": map[string]any{"prometheus": "main"},
		"targets": []any{"redis://orders-0.redis:6379", "redis://orders-1.redis:6379", "rediss://sessions.redis:6380/2", "cache.redis:6379"},
		"modules": map[string]any{
			"default": map[string]any{},
			"orders": map[string]any{"username": "sampler", "existingSecret": "orders-redis", "caSecret": "orders-ca",
				"tls": true, "lockPatterns": []any{"lock:*", "mutex:*"}, "interval": "30s"},
		},
	}}
}

// With probe.shards 3 the chart renders a StatefulSet of 3 probing
// replicas behind a headless Service, and one Probe per replica: each lists
// every target and keeps, by the hashmod of the target over 3, its own
// share, at the replica's stable name. The modules file holds the modules
// given, their secrets as the paths where the Secrets are mounted.
func TestChartShardsProbes(t *testing.T) {
	out, err := renderChart(t, shardedValues())
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, out)
	if len(o.StatefulSets) != 1 || len(o.Deployments) != 0 {
		t.Fatalf("%d StatefulSets, %d Deployments: want the StatefulSet alone", len(o.StatefulSets), len(o.Deployments))
	}
	sts := o.StatefulSets[0]
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	headless := ""
	for _, s := range o.Services {
		if s.Spec.ClusterIP == "None" {
			headless = s.Name
		}
	}
	if headless == "" || sts.Spec.ServiceName != headless {
		t.Errorf("serviceName %q, headless Service %q", sts.Spec.ServiceName, headless)
	}
	args := sts.Spec.Template.Spec.Containers[0].Args
	for _, a := range args {
		if strings.HasPrefix(a, "--redis.") || strings.HasPrefix(a, "--targets.") {
			t.Errorf("%s in probe mode", a)
		}
	}
	if !slices.Contains(args, "--probe.modules-file=/etc/cachewatch/probe/modules.yml") {
		t.Errorf("no --probe.modules-file in %q", args)
	}
	checkModules(t, o)
	if len(o.Probes) != 3 {
		t.Fatalf("%d Probes, want 3", len(o.Probes))
	}
	for i, p := range o.Probes {
		checkProbe(t, i, p, fmt.Sprintf("%s-%d.%s.", sts.Name, i, headless))
	}
}

// checkProbe checks the Probe of replica i.
func checkProbe(t *testing.T, i int, p monitoringv1.Probe, prober string) {
	t.Helper()
	s := p.Spec
	if !strings.HasPrefix(s.ProberSpec.URL, prober) || s.ProberSpec.Path != "/probe" || s.Module != "orders" ||
		s.JobName != "cachewatch-exporter" || p.Labels["prometheus"] != "main" || s.Interval != "30s" {
		t.Errorf("Probe %d: prober %+v, module %q, job %q, labels %v, interval %q", i, s.ProberSpec, s.Module, s.JobName, p.Labels, s.Interval)
	}
	sc := s.Targets.StaticConfig
	if sc == nil || len(sc.Targets) != 4 {
		t.Fatalf("Probe %d: static targets %+v, want all 4", i, sc)
	}
	rl := sc.RelabelConfigs
	if len(rl) != 2 || strings.ToLower(rl[0].Action) != "hashmod" || rl[0].Modulus != 3 ||
		len(rl[0].SourceLabels) != 1 || rl[0].SourceLabels[0] != "__param_target" || rl[0].TargetLabel == "" ||
		strings.ToLower(rl[1].Action) != "keep" || rl[1].Regex != fmt.Sprint(i) ||
		len(rl[1].SourceLabels) != 1 || string(rl[1].SourceLabels[0]) != rl[0].TargetLabel {
		t.Errorf("Probe %d: relabelling %+v, want hashmod of __param_target over 3, keep %d", i, rl, i)
	}
}

// checkModules reads the modules file back: each module as given, its
// password and CA files mounted from its Secrets.
func checkModules(t *testing.T, o objects) {
	t.Helper()
	var data string
	for _, cm := range o.ConfigMaps {
		if d, ok := cm.Data["modules.yml"]; ok {
			data = d
		}
	}
	var mf struct {
		Modules map[string]moduleEntry `json:"modules"`
	}
	if err := decodeStrict([]byte(data), &mf); err != nil {
		t.Fatalf("modules.yml: %v\n%s", err, data)
	}
	orders, ok := mf.Modules["orders"]
	if _, def := mf.Modules["default"]; !ok || !def || len(mf.Modules) != 2 {
		t.Fatalf("modules %v, want default and orders", mf.Modules)
	}
	if orders.Username != "sampler" || !orders.TLS || !slices.Equal(orders.LockPatterns, []string{"lock:*", "mutex:*"}) || orders.Interval != "30s" {
		t.Errorf("module orders: %+v", orders)
	}
	mounts := secretMounts(t, o)
	checkMounted(t, mounts, orders.PasswordFile, "orders-redis")
	checkMounted(t, mounts, orders.TLSCAFile, "orders-ca")
}

// Probe mode refuses a connection of its own, and a Probe module that is
// not a module.
func TestChartProbeRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(v map[string]any)
		want string
	}{
		"redis.url": {func(v map[string]any) { v["redis"] = map[string]any{"url": "redis://r:6379"} }, "a probing exporter samples only the targets Prometheus names"},
		"targets":   {func(v map[string]any) { v["targets"] = []any{map[string]any{"name": "a", "url": "redis://a:6379"}} }, "probe.enabled and targets"},
		"module": {func(v map[string]any) { v["probe"].(map[string]any)["module"] = "nope" },
			"probe.module nope is not one of probe.modules"},
		"password in a module": {func(v map[string]any) {
			v["probe"].(map[string]any)["modules"] = map[string]any{"orders": map[string]any{"password": "hunter2"}}
		}, "additional properties 'password' not allowed"},
		"shards 0": {func(v map[string]any) { v["probe"].(map[string]any)["shards"] = 0 }, "/probe/shards"},
	} {
		v := shardedValues()
		c.edit(v)
		_, err := renderChart(t, v)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// With probe.discoverServices the chart renders one ScrapeConfig per
// replica that discovers Services. Run through Prometheus's own relabelling
// over 30 discovered Services, each annotated one is probed by exactly one
// replica, at that replica's address, as redis://<service>.<namespace>.svc:<port>,
// and the others by none.
func TestChartShardsDiscoverServices(t *testing.T) {
	v := shardedValues()
	v["probe"].(map[string]any)["discoverServices"] = true
	out, err := renderChart(t, v)
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, out)
	if len(o.ScrapeConfigs) != 3 {
		t.Fatalf("%d ScrapeConfigs, want one per replica (3)", len(o.ScrapeConfigs))
	}
	sts := o.StatefulSets[0]
	probedBy := map[string][]int{}
	for i, sc := range o.ScrapeConfigs {
		checkScrapeConfig(t, i, sc)
		for k := range 30 {
			svc := discoveredService(k)
			lb := labels.NewBuilder(labels.FromMap(svc))
			if !relabel.ProcessBuilder(lb, relabelConfigs(t, sc.Spec.RelabelConfigs)...) {
				continue
			}
			target := lb.Get("__param_target")
			want := fmt.Sprintf("redis://%s.%s.svc:6379", svc["__meta_kubernetes_service_name"], svc["__meta_kubernetes_namespace"])
			if target != want || lb.Get("instance") != target || !strings.HasPrefix(lb.Get("__address__"), fmt.Sprintf("%s-%d.", sts.Name, i)) {
				t.Errorf("replica %d: service %d → target %q, instance %q, address %q; want %q at replica %d",
					i, k, target, lb.Get("instance"), lb.Get("__address__"), want, i)
			}
			probedBy[target] = append(probedBy[target], i)
		}
	}
	annotated := 0
	for k := range 30 {
		if discoveredService(k)["__meta_kubernetes_service_annotation_cachewatch_io_probe"] == "true" {
			annotated++
		}
	}
	if len(probedBy) != annotated {
		t.Errorf("%d targets probed, want the %d annotated Services", len(probedBy), annotated)
	}
	for target, replicas := range probedBy {
		if len(replicas) != 1 {
			t.Errorf("%s probed by replicas %v, want exactly one", target, replicas)
		}
	}
}

// discoveredService is the label set Kubernetes service discovery gives
// Service k: one in five is not annotated for probing.
func discoveredService(k int) map[string]string {
	svc := map[string]string{
		"__address__":                                fmt.Sprintf("redis-%d.ns-%d.svc:6379", k, k%3),
		"__meta_kubernetes_service_name":             fmt.Sprintf("redis-%d", k),
		"__meta_kubernetes_namespace":                fmt.Sprintf("ns-%d", k%3),
		"__meta_kubernetes_service_port_number":      "6379",
		"__meta_kubernetes_service_annotation_other": "x",
	}
	if k%5 != 0 {
		svc["__meta_kubernetes_service_annotation_cachewatch_io_probe"] = "true"
	}
	return svc
}

func checkScrapeConfig(t *testing.T, i int, sc monitoringv1alpha1.ScrapeConfig) {
	t.Helper()
	s := sc.Spec
	if s.MetricsPath == nil || *s.MetricsPath != "/probe" || s.JobName == nil || *s.JobName != "cachewatch-exporter" ||
		!slices.Equal(s.Params["module"], []string{"orders"}) || sc.Labels["prometheus"] != "main" ||
		len(s.KubernetesSDConfigs) != 1 || s.KubernetesSDConfigs[0].Role != "Service" {
		t.Errorf("ScrapeConfig %d: path %v, job %v, params %v, labels %v, SD %+v", i, s.MetricsPath, s.JobName, s.Params, sc.Labels, s.KubernetesSDConfigs)
	}
}

// relabelConfigs turns the operator's relabellings into Prometheus's, with
// Prometheus's defaults for what is left out.
func relabelConfigs(t *testing.T, in []monitoringv1.RelabelConfig) []*relabel.Config {
	t.Helper()
	var out []*relabel.Config
	for _, r := range in {
		c := relabel.DefaultRelabelConfig
		c.NameValidationScheme = model.UTF8Validation
		for _, l := range r.SourceLabels {
			c.SourceLabels = append(c.SourceLabels, model.LabelName(l))
		}
		if r.Separator != nil {
			c.Separator = *r.Separator
		}
		if r.Regex != "" {
			c.Regex = relabel.MustNewRegexp(r.Regex)
		}
		if r.Replacement != nil {
			c.Replacement = *r.Replacement
		}
		if r.Action != "" {
			c.Action = relabel.Action(strings.ToLower(r.Action))
		}
		c.TargetLabel, c.Modulus = r.TargetLabel, uint64(r.Modulus)
		if err := c.Validate(model.UTF8Validation); err != nil {
			t.Fatalf("relabelling %+v: %v", r, err)
		}
		out = append(out, &c)
	}
	return out
}
