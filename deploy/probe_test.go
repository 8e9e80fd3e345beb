package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
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
