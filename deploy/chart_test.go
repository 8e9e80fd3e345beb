package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cachewatch/cachewatch/alerts"
)

// valuesCase is one set of chart values the tests render.
type valuesCase struct {
	name   string
	values map[string]any
	// config is the alerts Config prometheusRule.config stands for.
	config alerts.Config
	// args are exporter arguments the Deployment must pass.
	args []string
}

func valuesMatrix(t *testing.T) []valuesCase {
	snake, cfg := distinctConfig(t)
	secretRefs := map[string]any{
		"redis": map[string]any{
			"url": "rediss://sampler@redis.cache.svc:6380", "user": "sampler",
			"existingSecret": "redis-auth", "existingSecretPasswordKey": "redis-password",
			"tls": map[string]any{"enabled": true, "caSecret": "redis-ca", "caSecretKey": "ca.pem", "serverName": "redis.cache.svc"},
		},
		"web": map[string]any{
			"tls":          map[string]any{"enabled": true, "existingSecret": "exporter-tls"},
			"configSecret": "exporter-web-config", "configSecretKey": "web.yml",
		},
		"serviceMonitor": map[string]any{
			"enabled":   true,
			"tlsConfig": map[string]any{"ca": map[string]any{"secret": map[string]any{"name": "exporter-tls", "key": "ca.crt"}}, "serverName": "cachewatch-exporter"},
			"basicAuth": map[string]any{"existingSecret": "exporter-scrape-auth"},
		},
		"prometheusRule": map[string]any{"enabled": true},
	}
	everything := map[string]any{
		"image":            map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"redis":            map[string]any{"url": "redis://redis.cache.svc:6379/2", "mode": "standalone"},
		"sample":           map[string]any{"interval": "30s", "maxKeys": 50000, "maxDuration": "20s", "scanCount": 100, "batch": 50, "keysPerSecond": 2500},
		"locks": map[string]any{"patterns": []any{"lock:*", "mutex:{*}"}, "longHeld": "5m", "notifications": "enable", "reconcile": "20m",
			"scanBudget": 0.5, "maxTracked": 50000, "maxGroups": 50},
		"queues":         []any{"orders", "jobs:delayed"},
		"queue":          map[string]any{"maxReplyBytes": 1024},
		"keys":           map[string]any{"memorySample": 100},
		"keygroup":       map[string]any{"rules": []any{"session:*=session", "user:*:cart=cart"}, "maxGroups": 500},
		"server":         map[string]any{"missBurst": 1000},
		"log":            map[string]any{"level": "debug", "format": "json"},
		"extraArgs":      []any{"--sample.scan-count=200"},
		"web":            map[string]any{"port": 9700, "telemetryPath": "/probe-metrics"},
		"service":        map[string]any{"type": "ClusterIP", "port": 9700, "annotations": map[string]any{"a": "b"}, "labels": map[string]any{"team": "cache"}},
		"serviceAccount": map[string]any{"name": "cw", "annotations": map[string]any{"x": "y"}},
		"podAnnotations": map[string]any{"p": "q"}, "podLabels": map[string]any{"tier": "monitoring"},
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "monitoring", "effect": "NoSchedule"}},
		"affinity":          map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"infra"}}}}}}}},
		"priorityClassName": "system-cluster-critical",
		"serviceMonitor": map[string]any{
			"enabled": true, "namespace": "monitoring", "labels": map[string]any{"release": "kube-prometheus-stack"},
			"interval": "15s", "scrapeTimeout": "12s",
			"relabelings":       []any{map[string]any{"targetLabel": "cluster", "replacement": "eu-1"}},
			"metricRelabelings": []any{map[string]any{"sourceLabels": []any{"__name__"}, "regex": "go_.*", "action": "drop"}},
		},
		"prometheusRule": map[string]any{"enabled": true, "namespace": "monitoring", "labels": map[string]any{"release": "kube-prometheus-stack"}, "config": snake},
		"dashboards":     map[string]any{"enabled": true, "namespace": "grafana", "labels": map[string]any{"team": "cache"}, "folder": "Redis"},
		"networkPolicy": map[string]any{
			"enabled":     true,
			"ingressFrom": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
			"redisPorts":  []any{6379, 16379},
			"redisTo":     []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.20.0.0/16"}}},
		},
	}
	targets := map[string]any{
		"targets": []any{
			map[string]any{"name": "orders", "url": "rediss://sampler@orders-redis:6380/0", "existingSecret": "orders-redis",
				"caSecret": "orders-ca", "caSecretKey": "ca.pem", "queues": []any{"orders"}},
			map[string]any{"name": "sessions", "addrs": []any{"sessions-0:6379", "sessions-1:6379"}, "mode": "cluster", "user": "sampler",
				"existingSecret": "sessions-redis", "existingSecretPasswordKey": "redis-password", "lockPatterns": []any{"lock:*", "mutex:*"},
				"keysPerSecond": 5000},
		},
	}
	return []valuesCase{
		{name: "minimal", values: map[string]any{"redis": map[string]any{"url": "redis://redis.cache.svc:6379"}}, config: alerts.DefaultConfig(),
			args: []string{"exporter", "--redis.url=redis://redis.cache.svc:6379", "--redis.mode=auto", "--web.listen-address=:9643",
				"--sample.interval=15s", "--locks.pattern=lock:*", "--locks.notifications=auto", "--locks.max-tracked=1000000"}},
		{name: "targets", values: targets, config: alerts.DefaultConfig(), args: []string{"--targets.file=/etc/cachewatch/targets/targets.yml"}},
		{name: "everything", values: everything, config: cfg,
			args: []string{"--redis.url=redis://redis.cache.svc:6379/2", "--redis.mode=standalone", "--web.listen-address=:9700",
				"--web.telemetry-path=/probe-metrics", "--sample.interval=30s", "--sample.max-keys=50000", "--sample.max-duration=20s",
				"--sample.scan-count=100", "--sample.batch=50", "--sample.keys-per-second=2500", "--locks.pattern=mutex:{*}",
				"--locks.long-held=5m", "--queue=orders", "--queue=jobs:delayed", "--keygroup.rule=user:*:cart=cart",
				"--keygroup.max-groups=500", "--server.miss-burst=1000", "--log.level=debug", "--log.format=json", "--sample.scan-count=200",
				"--locks.notifications=enable", "--locks.reconcile=20m", "--locks.scan-budget=0.5", "--locks.max-tracked=50000",
				"--locks.max-groups=50", "--queue.max-reply-bytes=1024", "--keys.memory-sample=100"}},
		{name: "tls-basic-auth-secrets", values: secretRefs, config: alerts.DefaultConfig(),
			args: []string{"--redis.url=rediss://sampler@redis.cache.svc:6380", "--redis.user=sampler",
				"--redis.password-file=/etc/cachewatch/redis/password", "--redis.tls", "--redis.tls-ca-file=/etc/cachewatch/redis-tls/ca.pem",
				"--redis.tls-server-name=redis.cache.svc", "--web.config.file=/etc/cachewatch/web/config/web.yml"}},
		{name: "tls-only", values: map[string]any{"redis": map[string]any{"addrs": []any{"redis:6379"}},
			"web":            map[string]any{"tls": map[string]any{"enabled": true, "existingSecret": "exporter-tls"}},
			"serviceMonitor": map[string]any{"enabled": true}}, config: alerts.DefaultConfig(),
			args: []string{"--web.config.file=/etc/cachewatch/web/config/web-config.yml"}},
		{name: "cluster", values: map[string]any{"redis": map[string]any{"mode": "cluster", "existingSecret": "redis-cluster",
			"addrs": []any{"redis-cluster-0.redis-cluster-headless:6379", "redis-cluster-1.redis-cluster-headless:6379", "redis-cluster-2.redis-cluster-headless:6379"}},
			"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}}, config: alerts.DefaultConfig(),
			args: []string{"--redis.mode=cluster", "--redis.addr=redis-cluster-0.redis-cluster-headless:6379",
				"--redis.addr=redis-cluster-2.redis-cluster-headless:6379", "--redis.password-file=/etc/cachewatch/redis/password"}},
	}
}

// distinctConfig gives every key of the rules template a value other than
// its default and other than every other key's, as chart values (snake
// case; camelKeys makes them the mixin's _config) and the alerts Config
// they stand for. Numbers are binary fractions and durations whole seconds,
// so that Go, Helm and jsonnet write them alike.
func distinctConfig(t *testing.T) (snake map[string]any, cfg alerts.Config) {
	t.Helper()
	var tmpl struct {
		Config map[string]alerts.TemplateKey `json:"config"`
	}
	raw := readFile(t, filepath.Join(chartDir, "files", alerts.RulesTemplateFile))
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	snake, cfg = map[string]any{}, alerts.DefaultConfig()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range tmpl.Config {
			if strings.Contains(string(raw), "${"+k) && !yield(k) {
				return
			}
		}
	})
	for i, key := range keys {
		var v any
		switch k := tmpl.Config[key]; {
		case len(k.Values) > 0: // the only values it takes
			v = k.Values[i%len(k.Values)]
		case k.Kind == alerts.KindDuration:
			v = fmt.Sprintf("%dm%ds", i+1, 7)
		case k.Kind == alerts.KindRatio:
			v = float64(i+1) / 128
		case k.Kind == alerts.KindNumber:
			v = float64(i+1) * 1.5
		case k.Kind == alerts.KindSelector:
			v = fmt.Sprintf(`job=~"svc-%d|other", namespace!="kube-system"`, i)
		default:
			v = fmt.Sprintf("https://wiki.example/cachewatch-%d", i)
		}
		snake[key] = v
		if err := cfg.Set(key, fmt.Sprint(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return snake, cfg
}

// camelKeys is values with their keys in camelCase, as the mixin's _config
// names them.
func camelKeys(values map[string]any) map[string]any {
	camel := make(map[string]any, len(values))
	for k, v := range values {
		camel[camelCase(k)] = v
	}
	return camel
}

func camelCase(key string) string {
	parts := strings.Split(key, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// renderChart runs helm lint --strict and helm template with values.
func renderChart(t *testing.T, values map[string]any) ([]byte, error) {
	t.Helper()
	vals := readValues(t, values)
	if err := helmLintStrict(vals); err != nil {
		return nil, fmt.Errorf("helm lint --strict: %w", err)
	}
	out, err := helmTemplate(vals)
	if err != nil {
		return nil, fmt.Errorf("helm template: %w", err)
	}
	return out, nil
}

// TestChartValuesMatrix lints and renders the chart for each set of values,
// decodes every object strictly into its Kubernetes or operator type, and
// checks what each object must carry.
func TestChartValuesMatrix(t *testing.T) {
	flags := exporterFlags(t)
	for _, vc := range valuesMatrix(t) {
		t.Run(vc.name, func(t *testing.T) {
			out, err := renderChart(t, vc.values)
			if err != nil {
				t.Fatal(err)
			}
			o := decodeAll(t, out)
			t.Logf("%s: %d objects (%d Deployment, %d Service, %d ServiceAccount, %d ConfigMap, %d NetworkPolicy, %d ServiceMonitor, %d PrometheusRule)",
				vc.name, len(splitDocs(out)), len(o.Deployments), len(o.Services), len(o.ServiceAccounts), len(o.ConfigMaps),
				len(o.NetworkPolicies), len(o.ServiceMonitors), len(o.PrometheusRules))
			checkDeployment(t, o, vc, flags)
			checkNoSecretValues(t, out, o)
			checkTargets(t, o, vc)
			checkServiceMonitor(t, o, vc)
			checkRules(t, o, vc)
			checkDashboards(t, o, vc)
			wantOne(t, vc, "networkPolicy", len(o.NetworkPolicies))
		})
	}
}

func enabled(values map[string]any, section string) bool {
	m, _ := values[section].(map[string]any)
	on, _ := m["enabled"].(bool)
	return on
}

func checkDeployment(t *testing.T, o objects, vc valuesCase, flags map[string]bool) {
	t.Helper()
	if len(o.Deployments) != 1 || len(o.Services) != 1 {
		t.Fatalf("%d Deployments, %d Services; want one of each", len(o.Deployments), len(o.Services))
	}
	pod := o.Deployments[0].Spec.Template.Spec
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container security context %+v", sc)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v", psc)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q is no flag of cachewatch exporter", a)
		}
	}
	for _, want := range vc.args {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %q", c.Args, want)
		}
	}
	mounted := map[string]bool{}
	for _, v := range pod.Volumes {
		mounted[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !mounted[m.Name] || !m.ReadOnly && m.MountPath != "/tmp" {
			t.Errorf("mount %+v: no such volume, or writable", m)
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it does not need")
	}
	if c.Ports[0].ContainerPort != o.Services[0].Spec.Ports[0].TargetPort.IntVal && o.Services[0].Spec.Ports[0].TargetPort.StrVal != c.Ports[0].Name {
		t.Errorf("the Service targets %v, the container listens on %v", o.Services[0].Spec.Ports[0].TargetPort, c.Ports[0])
	}
}

// secretMarkers are what a secret's value looks like in a manifest.
var secretMarkers = regexp.MustCompile(`(?i)PRIVATE KEY|BEGIN CERTIFICATE|\$2[aby]\$|basic_auth_users|password:[ \t]+\S|requirepass`)

// checkNoSecretValues checks the chart renders no Secret, no environment
// value and no text that holds a secret: secrets are referenced by the
// name of a Secret that already exists, never carried.
func checkNoSecretValues(t *testing.T, out []byte, o objects) {
	t.Helper()
	if m := secretMarkers.Find(out); m != nil {
		t.Errorf("a rendered manifest carries %q", m)
	}
	for _, c := range o.Deployments[0].Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Value != "" {
				t.Errorf("env %s has a value in the manifest", e.Name)
			}
		}
	}
	for _, cm := range o.ConfigMaps {
		for k, v := range cm.Data {
			if secretMarkers.MatchString(v) {
				t.Errorf("ConfigMap %s key %s holds a secret", cm.Name, k)
			}
		}
	}
}

// wantOne checks that the chart rendered one object of a section when
// section.enabled is true and none otherwise, and says whether it is on.
func wantOne(t *testing.T, vc valuesCase, section string, n int) bool {
	t.Helper()
	on := enabled(vc.values, section)
	if want := map[bool]int{true: 1}[on]; n != want {
		t.Fatalf("%s.enabled=%v: %d objects, want %d", section, on, n, want)
	}
	return on
}

func checkServiceMonitor(t *testing.T, o objects, vc valuesCase) {
	t.Helper()
	if !wantOne(t, vc, "serviceMonitor", len(o.ServiceMonitors)) {
		return
	}
	sm := o.ServiceMonitors[0]
	ep := sm.Spec.Endpoints[0]
	if sm.Spec.JobLabel != "app.kubernetes.io/name" || o.Services[0].Labels[sm.Spec.JobLabel] != "cachewatch-exporter" {
		t.Errorf("job label %q: the exporter's job must be cachewatch-exporter, which the default exporter_selector matches", sm.Spec.JobLabel)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if o.Services[0].Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, the Service has %q", k, v, o.Services[0].Labels[k])
		}
	}
	web, _ := vc.values["web"].(map[string]any)
	tlsOn := enabled(web, "tls")
	if scheme := ep.Scheme; (scheme != nil && scheme.String() == "https") != tlsOn {
		t.Errorf("scheme %v with web.tls.enabled=%v", scheme, tlsOn)
	}
	if vc.name == "tls-basic-auth-secrets" {
		if ep.BasicAuth == nil || ep.BasicAuth.Username.Name != "exporter-scrape-auth" || ep.BasicAuth.Password.Key != "password" {
			t.Errorf("basicAuth %+v", ep.BasicAuth)
		}
		if ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Name != "exporter-tls" {
			t.Errorf("tlsConfig %+v", ep.TLSConfig)
		}
	}
	if vc.name == "everything" && (sm.Labels["release"] != "kube-prometheus-stack" || sm.Namespace != "monitoring" ||
		ep.Interval != "15s" || ep.ScrapeTimeout != "12s" || len(ep.RelabelConfigs) != 1 || len(ep.MetricRelabelConfigs) != 1) {
		t.Errorf("ServiceMonitor %+v, endpoint %+v", sm.ObjectMeta, ep)
	}
}

// checkRules compares the PrometheusRule's groups with what `cachewatch
// alerts` renders for the same config, and runs promtool on them.
func checkRules(t *testing.T, o objects, vc valuesCase) {
	t.Helper()
	if !wantOne(t, vc, "prometheusRule", len(o.PrometheusRules)) {
		return
	}
	want := goRuleGroups(t, vc.config)
	got := o.PrometheusRules[0].Spec.Groups
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the chart's rules differ from cachewatch alerts' for the same config:\n%s", firstRuleDiff(got, want))
	}
	promtoolCheckRules(t, got)
}

// goRuleGroups renders cfg's rules with package alerts, as the operator's
// types.
func goRuleGroups(t *testing.T, cfg alerts.Config) []monitoringv1.RuleGroup {
	t.Helper()
	groups, err := alerts.Rules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := alerts.PrometheusRules(groups)
	if err != nil {
		t.Fatal(err)
	}
	return ruleFileGroups(t, data)
}

func firstRuleDiff(got, want []monitoringv1.RuleGroup) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d groups, want %d", len(got), len(want))
	}
	for i := range got {
		for j := range min(len(got[i].Rules), len(want[i].Rules)) {
			if !reflect.DeepEqual(got[i].Rules[j], want[i].Rules[j]) {
				g, _ := yaml.Marshal(got[i].Rules[j])
				w, _ := yaml.Marshal(want[i].Rules[j])
				return fmt.Sprintf("group %s rule %d:\n%s\nwant:\n%s", got[i].Name, j, g, w)
			}
		}
	}
	return "groups differ outside their rules"
}

func checkDashboards(t *testing.T, o objects, vc valuesCase) {
	t.Helper()
	var boards []corev1.ConfigMap
	for _, cm := range o.ConfigMaps {
		if _, ok := cm.Labels["grafana_dashboard"]; ok {
			boards = append(boards, cm)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "dashboards", "json", "*.json"))
	if !enabled(vc.values, "dashboards") {
		if len(boards) != 0 {
			t.Error("dashboard ConfigMaps although dashboards.enabled is false")
		}
		return
	}
	if len(boards) != len(files) {
		t.Fatalf("%d dashboard ConfigMaps for %d boards", len(boards), len(files))
	}
	for _, cm := range boards {
		if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Redis" || cm.Namespace != "grafana" || cm.Labels["team"] != "cache" {
			t.Errorf("%s: labels %v, annotations %v, namespace %s", cm.Name, cm.Labels, cm.Annotations, cm.Namespace)
		}
		checkBoardData(t, cm.Name, cm.Data, files)
	}
}

// TestChartRefusesBadValues checks that helm lint --strict and helm
// template fail, naming the value and never repeating a password, without
// a Redis to sample, with a secret in the values (redis.password, a
// password in a URL, a secret-looking extraArgs entry), an unknown value or
// one of the wrong type, and with an unknown or bad threshold.
func TestChartRefusesBadValues(t *testing.T) {
	url := func(u string) map[string]any { return map[string]any{"url": u} }
	withRedis := func(values map[string]any) map[string]any {
		if _, ok := values["redis"]; !ok {
			values["redis"] = url("redis://redis.cache.svc:6379")
		}
		return values
	}
	target := func(kv ...any) map[string]any {
		m := map[string]any{"name": "orders"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"targets": []any{m}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no Redis address", map[string]any{}, "redis.url (or redis.addrs, or targets) is required"},
		{"url and addrs", map[string]any{"redis": map[string]any{"url": "redis://a:6379", "addrs": []any{"b:6379"}}}, "redis.url and redis.addrs: set one"},
		{"password in values", map[string]any{"redis": map[string]any{"url": "redis://r:6379", "password": "hunter2"}}, "redis.password is not a value: a password in values is stored in the release; put it in a Secret and set redis.existingSecret"},
		{"password in the URL", map[string]any{"redis": url("redis://:hunter2@redis:6379")}, "redis.url: a password in the URL is refused"},
		{"user and password in the URL", map[string]any{"redis": url("rediss://sampler:hunter2@redis:6380/1")}, "redis.url: a password in the URL is refused"},
		{"password parameter", map[string]any{"redis": url("redis://redis:6379/0?password=hunter2")}, "redis.url: a password parameter in the URL is refused"},
		{"auth parameter", map[string]any{"redis": url("redis://redis:6379?dial_timeout=2s&auth=hunter2")}, "redis.url: a password parameter"},
		{"password in a target's URL", target("url", "redis://:hunter2@orders:6379"), "targets[0].url: a password in the URL is refused (it would be stored in the Deployment); put it in a Secret and set targets[0].existingSecret"},
		{"password in a target", target("url", "redis://orders:6379", "password", "hunter2"), "additional properties 'password' not allowed"},
		{"target without address", target(), "targets[0] (orders): set one of url and addrs"},
		{"targets and redis.url", map[string]any{"redis": url("redis://r:6379"), "targets": target("url", "redis://o:6379")["targets"]}, "targets and redis.url"},
		{"password flag in extraArgs", withRedis(map[string]any{"extraArgs": []any{"--redis.password=hunter2"}}), "extraArgs[0] (--redis.password): a secret"},
		{"password flag and value in extraArgs", withRedis(map[string]any{"extraArgs": []any{"--log.level=debug", "--redis.password", "hunter2"}}), "extraArgs[1] (--redis.password)"},
		{"password URL in extraArgs", withRedis(map[string]any{"extraArgs": []any{"--redis.url=redis://:hunter2@r:6379"}}), "extraArgs[0]: a password in the URL"},
		{"unknown value", withRedis(map[string]any{"sampel": map[string]any{"interval": "30s"}}), "additional properties 'sampel' not allowed"},
		{"unknown nested value", withRedis(map[string]any{"sample": map[string]any{"intervall": "30s"}}), "additional properties 'intervall' not allowed"},
		{"wrong type", withRedis(map[string]any{"sample": map[string]any{"maxKeys": "many"}}), "/sample/maxKeys"},
		{"bad enum", map[string]any{"redis": map[string]any{"url": "redis://r:6379", "mode": "sentinel"}}, "/redis/mode"},
		{"bad duration", withRedis(map[string]any{"locks": map[string]any{"longHeld": "soon"}}), "/locks/longHeld"},
		{"share above 1", withRedis(map[string]any{"locks": map[string]any{"scanBudget": 2}}), "/locks/scanBudget"},
		{"unknown threshold", withRedis(map[string]any{"prometheusRule": map[string]any{"enabled": true, "config": map[string]any{"lock_contension_warning": 0.1}}}), "prometheusRule.config.lock_contension_warning: unknown key"},
		{"ratio above 1", withRedis(map[string]any{"prometheusRule": map[string]any{"enabled": true, "config": map[string]any{"lock_contention_warning": 5}}}), "prometheusRule.config.lock_contention_warning: is a ratio"},
		{"bad threshold duration", withRedis(map[string]any{"prometheusRule": map[string]any{"enabled": true, "config": map[string]any{"lock_acquire_for": "soon"}}}), "prometheusRule.config.lock_acquire_for: \"soon\" is not a duration"},
		{"bad selector", withRedis(map[string]any{"prometheusRule": map[string]any{"enabled": true, "config": map[string]any{"service_selector": "job=api"}}}), "prometheusRule.config.service_selector"},
		{"TLS without its Secret", withRedis(map[string]any{"web": map[string]any{"tls": map[string]any{"enabled": true}}}), "web.tls.existingSecret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := readValues(t, tc.values)
			out, templateErr := helmTemplate(vals)
			checked := map[string]error{"helm template": templateErr}
			// helm lint reports what the schema refuses, not fail or required.
			if strings.HasPrefix(tc.want, "/") || strings.HasPrefix(tc.want, "additional properties") {
				checked["helm lint --strict"] = helmLintStrict(vals)
			}
			for cmd, err := range checked {
				if err == nil {
					t.Fatalf("%s passed; rendered:\n%.300s", cmd, out)
				}
				t.Logf("%s: %v", cmd, err)
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %v, want it to say %q", cmd, err, tc.want)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("%s: the error repeats the password", cmd)
				}
			}
		})
	}
}

// TestDocsListEveryChartValue checks docs/exporter.md's Helm chart section
// names every value of values.yaml (a map such as resources by its own
// name; the thresholds as prometheusRule.config.<key>).
func TestDocsListEveryChartValue(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	docs := string(readFile(t, filepath.Join(root, "docs", "exporter.md")))
	_, section, _ := strings.Cut(docs, "## Helm chart")
	section, _, _ = strings.Cut(section, "\n## ")
	var paths []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 || strings.HasPrefix(prefix, "prometheusRule.config") {
			paths = append(paths, prefix)
			return
		}
		for k, e := range m {
			walk(strings.TrimPrefix(prefix+"."+k, "."), e)
		}
	}
	walk("", values)
	for _, p := range paths {
		if strings.HasPrefix(p, "prometheusRule.config") {
			p = "prometheusRule.config.<key>"
		}
		documented := false
		for q := p; q != "" && !documented; {
			documented = strings.Contains(section, "`"+q+"`")
			i := strings.LastIndex(q, ".")
			if i < 0 {
				break
			}
			q = q[:i]
		}
		if !documented {
			t.Errorf("docs/exporter.md's Helm chart section does not list %s", p)
		}
	}
	t.Logf("%d values listed", len(paths))
}
