package stack

import (
	"encoding/json"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/metrictest"
)

// compose is the part of docker-compose.yml the checks read.
type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image     string            `yaml:"image"`
	Build     *build            `yaml:"build"`
	Command   []string          `yaml:"command"`
	Volumes   []string          `yaml:"volumes"`
	Ports     []string          `yaml:"ports"`
	Env       map[string]string `yaml:"environment"`
	DependsOn yaml.Node         `yaml:"depends_on"`
}

type build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	var c compose
	readYAML(t, "docker-compose.yml", &c)
	for _, name := range []string{"redis", "demo", "exporter", "alerts", "prometheus", "alertmanager", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %q service", name)
		}
	}
	return c
}

func (c compose) service(t *testing.T, name string) service {
	t.Helper()
	s, ok := c.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no %q service", name)
	}
	return s
}

// hostPath maps a path inside the service's container to the file in the
// repository that compose mounts there (longest mount prefix wins), failing
// when no mount covers it.
func (s service) hostPath(t *testing.T, container string) string {
	t.Helper()
	best, bestLen := "", -1
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("volume %q: want host:container[:mode]", v)
		}
		host, target := parts[0], path.Clean(parts[1])
		if rel, ok := strings.CutPrefix(container, target); ok && (rel == "" || rel[0] == '/') && len(target) > bestLen {
			best, bestLen = filepath.Join(host, filepath.FromSlash(rel)), len(target)
		}
	}
	if bestLen < 0 {
		t.Fatalf("no volume mounts %s (volumes %q)", container, s.Volumes)
	}
	return best
}

// flagValue returns the value of --name in a command, given as --name=v or
// --name v.
func flagValue(t *testing.T, cmd []string, name string) string {
	t.Helper()
	for i, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	t.Fatalf("command %q has no --%s", cmd, name)
	return ""
}

// publishes fails unless the service publishes its port container on the
// host port the README names, on loopback unless CACHEWATCH_STACK_BIND says
// otherwise.
func (s service) publishes(t *testing.T, name, host, container string) {
	t.Helper()
	want := "${CACHEWATCH_STACK_BIND:-127.0.0.1}:" + host + ":" + container
	if !slices.Contains(s.Ports, want) {
		t.Errorf("service %s publishes %q, want %s", name, s.Ports, want)
	}
}

// takenPorts are host ports a developer's machine often has in use: the
// stack publishes none of them.
var takenPorts = []string{"6379", "9090", "9093", "3000", "9643", "8080"}

// sameFile fails unless got and want name the same file of the repository.
func sameFile(t *testing.T, what, got, want string) {
	t.Helper()
	g, err := filepath.Abs(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := filepath.Abs(want)
	if err != nil {
		t.Fatal(err)
	}
	if g != w {
		t.Errorf("%s is %s, want the generated %s", what, got, want)
	}
}

var generated = filepath.Join("..", "..", "alerts", "generated")

// volumeOf returns the named volume mounted at container in s, failing
// when none is.
func (c compose) volumeOf(t *testing.T, s service, container string) string {
	t.Helper()
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if _, named := c.Volumes[parts[0]]; named && path.Clean(parts[1]) == container {
			return parts[0]
		}
	}
	t.Fatalf("no named volume is mounted at %s (volumes %q)", container, s.Volumes)
	return ""
}

// stackRules writes what the alerts service writes at start, from the
// stack's own alerts.yaml, into dir/rules, beside a copy of prometheus.yml,
// and returns the settings.
func stackRules(t *testing.T, dir string) alerts.Config {
	t.Helper()
	cfg, err := alerts.LoadConfig("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := alerts.WriteFiles(filepath.Join(dir, "rules"), cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestAlertsService checks that the alerts service writes, from the
// alerts.yaml of the stack (a file the user owns, not a generated one),
// into the volume Prometheus and Alertmanager read, before they start.
func TestAlertsService(t *testing.T) {
	c := loadCompose(t)
	a := c.service(t, "alerts")
	sameFile(t, "the alert settings", a.hostPath(t, flagValue(t, a.Command, "config")), "alerts.yaml")
	out := flagValue(t, a.Command, "out")
	vol := c.volumeOf(t, a, out)
	for _, name := range []string{"prometheus", "alertmanager"} {
		s := c.service(t, name)
		if got := c.volumeOf(t, s, "/stack/rules"); got != vol {
			t.Errorf("%s reads volume %s at /stack/rules, the alerts service writes %s", name, got, vol)
		}
		var deps map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := s.DependsOn.Decode(&deps); err != nil || deps["alerts"].Condition != "service_completed_successfully" {
			t.Errorf("%s does not wait for the alerts service to succeed (depends_on %v)", name, err)
		}
	}
	if cfg, err := alerts.LoadConfig("alerts.yaml"); err != nil || cfg == alerts.DefaultConfig() {
		t.Errorf("alerts.yaml: %v; want settings of the stack's own", err)
	}
}

// promConfig is the part of prometheus.yml the checks read.
type promConfig struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
	} `yaml:"global"`
	RuleFiles []string `yaml:"rule_files"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"alertmanagers"`
	} `yaml:"alerting"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusConfig checks prometheus.yml with the real promtool (which
// also checks the rule files it loads) in the repository, and that the
// container loads the very same generated rule file through its mounts.
func TestPrometheusConfig(t *testing.T) {
	promtool := metrictest.Tool(t, "promtool", "prometheus")
	c := loadCompose(t)
	prom := c.service(t, "prometheus")
	configIn := flagValue(t, prom.Command, "config.file")
	configHost := prom.hostPath(t, configIn)
	sameFile(t, "the Prometheus config the container loads", configHost, "prometheus.yml")

	var cfg promConfig
	readYAML(t, "prometheus.yml", &cfg)
	if len(cfg.RuleFiles) != 1 {
		t.Fatalf("rule_files = %q, want the one rule file", cfg.RuleFiles)
	}
	inContainer := path.Join(path.Dir(configIn), cfg.RuleFiles[0])
	if path.Dir(inContainer) != "/stack/rules" || path.Base(inContainer) != alerts.RulesFile {
		t.Errorf("the rule file is %s, want %s in the rules volume at /stack/rules", inContainer, alerts.RulesFile)
	}
	dir := t.TempDir()
	stackRules(t, dir)
	out := metrictest.RunTool(t, promtool, "check", "config", filepath.Join(dir, "prometheus.yml"))
	if !strings.Contains(out, "SUCCESS: 1 rule files found") {
		t.Errorf("promtool check config found no rule file:\n%s", out)
	}

	// Targets are compose services listening on the port scraped.
	jobs := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				jobs[sc.JobName] = target
			}
		}
	}
	exporterJob := regexp.MustCompile(`^job="([^"]+)"$`).FindStringSubmatch(alerts.DefaultConfig().ExporterSelector)
	if exporterJob == nil {
		t.Fatalf("alerts.DefaultConfig().ExporterSelector = %q: test expects job=\"…\"", alerts.DefaultConfig().ExporterSelector)
	}
	checkTarget(t, c, jobs[exporterJob[1]], "exporter", "web.listen-address")
	checkTarget(t, c, jobs["cachewatch-demo"], "demo", "web.listen-address")
	if len(cfg.Alerting.Alertmanagers) != 1 || len(cfg.Alerting.Alertmanagers[0].StaticConfigs) != 1 {
		t.Fatalf("want one Alertmanager, got %+v", cfg.Alerting)
	}
	am := cfg.Alerting.Alertmanagers[0].StaticConfigs[0].Targets
	if !slices.Equal(am, []string{"alertmanager:9093"}) {
		t.Errorf("alerting targets = %q, want alertmanager:9093", am)
	}
}

// checkTarget fails unless target is host:port of the compose service
// wantService, which listens on that port (its listenFlag).
func checkTarget(t *testing.T, c compose, target, wantService, listenFlag string) {
	t.Helper()
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatalf("scrape target %q of %s: %v", target, wantService, err)
	}
	if host != wantService {
		t.Errorf("scrape target %q: want the %s service", target, wantService)
	}
	s := c.service(t, wantService)
	_, listenPort, err := net.SplitHostPort(flagValue(t, s.Command, listenFlag))
	if err != nil {
		t.Fatal(err)
	}
	if listenPort != port {
		t.Errorf("%s listens on port %s, Prometheus scrapes %s", wantService, listenPort, port)
	}
	s.publishes(t, wantService, "1"+port, port)
}

// TestAlertmanagerConfig checks, with the real amtool, the configuration
// the Alertmanager container loads: written from alerts.yaml, routing pages
// and tickets to the webhooks set there.
func TestAlertmanagerConfig(t *testing.T) {
	amtool := metrictest.Tool(t, "amtool", "prometheus-alertmanager")
	c := loadCompose(t)
	am := c.service(t, "alertmanager")
	if got := flagValue(t, am.Command, "config.file"); got != "/stack/rules/"+alerts.AlertmanagerFile {
		t.Errorf("Alertmanager loads %s, want the %s the alerts service writes", got, alerts.AlertmanagerFile)
	}
	dir := t.TempDir()
	cfg := stackRules(t, dir)
	file := filepath.Join(dir, "rules", alerts.AlertmanagerFile)
	out := metrictest.RunTool(t, amtool, "check-config", file)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("amtool check-config:\n%s", out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{cfg.PageWebhookURL, cfg.TicketWebhookURL} {
		if !strings.Contains(string(b), "url: "+url) {
			t.Errorf("%s does not route to %s, set in alerts.yaml", alerts.AlertmanagerFile, url)
		}
	}
	am.publishes(t, "alertmanager", "19093", "9093")
}

// TestComposeFiles checks that every host path compose mounts or builds
// from exists, and that the cachewatch commands use flags cachewatch has
// and reach the redis service.
func TestComposeFiles(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			host := strings.Split(v, ":")[0]
			if _, named := c.Volumes[host]; named {
				if !strings.HasSuffix(v, ":ro") && name != "alerts" {
					t.Errorf("service %s mounts %q read-write; only the alerts service writes the rules", name, v)
				}
				continue
			}
			if _, err := os.Stat(host); err != nil {
				t.Errorf("service %s mounts %s: %v", name, host, err)
			}
			if !strings.HasSuffix(v, ":ro") {
				t.Errorf("service %s mounts %q read-write; the repository's files are read-only inputs", name, v)
			}
		}
		for _, p := range s.Ports {
			for _, taken := range takenPorts {
				if strings.Contains(p, ":"+taken+":") {
					t.Errorf("service %s publishes host port %s, often taken on a developer's machine", name, taken)
				}
			}
		}
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
		}
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(s.Build.Context, "go.mod")); err != nil {
				t.Errorf("service %s: build context %s is not the repository root: %v", name, s.Build.Context, err)
			}
			if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
	}
	if p := c.service(t, "redis").Ports; len(p) != 0 {
		t.Errorf("redis publishes %q: the stack's Redis is for the stack alone", p)
	}

	demo, exp := c.service(t, "demo"), c.service(t, "exporter")
	if got := flagValue(t, demo.Command, "redis"); got != "redis://redis:6379" {
		t.Errorf("demo --redis %s, want redis://redis:6379", got)
	}
	if got := flagValue(t, exp.Command, "redis.url"); got != "redis://redis:6379" {
		t.Errorf("exporter --redis.url %s, want redis://redis:6379", got)
	}
	if host, _, _ := net.SplitHostPort(flagValue(t, demo.Command, "web.listen-address")); host != "0.0.0.0" && host != "" {
		t.Errorf("demo listens on %q: Prometheus in another container cannot reach it", host)
	}
	// The demo restarts when it ends: make each run long enough to watch.
	if d, err := time.ParseDuration(flagValue(t, demo.Command, "duration")); err != nil || d < 10*time.Minute {
		t.Errorf("demo --duration %v (%v): want at least 10m", d, err)
	}

	// cachewatch itself parses the commands (--help last: every flag
	// before it must exist, and nothing runs).
	bin := filepath.Join(t.TempDir(), "cachewatch")
	metrictest.RunTool(t, "go", "build", "-o", bin, "github.com/cachewatch/cachewatch/cmd/cachewatch")
	for _, s := range []service{demo, exp, c.service(t, "alerts")} {
		metrictest.RunTool(t, bin, append(slices.Clone(s.Command), "--help")...)
	}
}

// provisioned is a Grafana data source provisioning file.
type provisioned struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		UID       string `yaml:"uid"`
		Type      string `yaml:"type"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
		JSONData  struct {
			TimeInterval string `yaml:"timeInterval"`
		} `yaml:"jsonData"`
	} `yaml:"datasources"`
}

// providers is a Grafana dashboard provider provisioning file.
type providers struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name    string `yaml:"name"`
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestGrafanaProvisioning checks that Grafana gets the Prometheus of the
// stack as the data source the boards and the Grafana-managed rules use,
// and the generated dashboards through the provider's mounted path.
func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	g := c.service(t, "grafana")
	g.publishes(t, "grafana", "13000", "3000")
	prov := g.hostPath(t, "/etc/grafana/provisioning")

	var ds provisioned
	readYAML(t, filepath.Join(prov, "datasources", "prometheus.yaml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources provisioning: want apiVersion 1 and one data source, got %+v", ds)
	}
	src := ds.Datasources[0]
	if src.Type != "prometheus" || src.URL != "http://prometheus:9090" || !src.IsDefault {
		t.Errorf("data source %+v: want the default, of type prometheus, at http://prometheus:9090", src)
	}
	c.service(t, "prometheus").publishes(t, "prometheus", "19090", "9090")
	var prom promConfig
	readYAML(t, "prometheus.yml", &prom)
	if src.JSONData.TimeInterval != prom.Global.ScrapeInterval {
		t.Errorf("data source timeInterval %q, Prometheus scrape_interval %q: $__rate_interval needs them equal",
			src.JSONData.TimeInterval, prom.Global.ScrapeInterval)
	}
	for _, uid := range grafanaRuleDatasources(t) {
		if uid != src.UID {
			t.Errorf("Grafana-managed rules query data source %q, the stack provisions %q", uid, src.UID)
		}
	}

	var dp providers
	readYAML(t, filepath.Join(prov, "dashboards", "cachewatch.yaml"), &dp)
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboards provisioning: want apiVersion 1 and one file provider, got %+v", dp)
	}
	dir := g.hostPath(t, dp.Providers[0].Options.Path)
	sameFile(t, "the dashboards directory", dir, filepath.Join("..", "..", "dashboards", "json"))
	boards, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range boards {
		checkBoard(t, filepath.Join(dir, b.UID+".json"), src.Type, src.UID)
	}
	if home := g.Env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		if _, err := os.Stat(g.hostPath(t, home)); err != nil {
			t.Errorf("home dashboard: %v", err)
		}
	}
}

// grafanaRuleDatasources returns the Prometheus data source UIDs the
// generated Grafana-managed alert rules query.
func grafanaRuleDatasources(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(generated, alerts.GrafanaFile))
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, m := range regexp.MustCompile(`datasourceUid: (\S+)`).FindAllStringSubmatch(string(b), -1) {
		if m[1] != "__expr__" && !slices.Contains(uids, m[1]) {
			uids = append(uids, m[1])
		}
	}
	if len(uids) == 0 {
		t.Fatalf("%s queries no data source", alerts.GrafanaFile)
	}
	return uids
}

// checkBoard fails unless the board's "datasource" variable lists data
// sources of the provisioned type (it starts on the default one, the
// provisioned one) and every panel and query runs on that variable.
func checkBoard(t *testing.T, file, dsType, dsUID string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("provisioned dashboard: %v", err)
	}
	var board struct {
		Templating struct {
			List []struct {
				Type    string `json:"type"`
				Name    string `json:"name"`
				Query   any    `json:"query"`
				Current *struct {
					Value any `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &board); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	found := false
	for _, v := range board.Templating.List {
		if v.Name != "datasource" {
			continue
		}
		found = true
		if v.Type != "datasource" || v.Query != dsType {
			t.Errorf("%s: variable datasource is %s of %v, want a data source variable of type %s", file, v.Type, v.Query, dsType)
		}
		if v.Current != nil && v.Current.Value != nil && v.Current.Value != dsUID && v.Current.Value != "default" {
			t.Errorf("%s: variable datasource starts on %v, the stack provisions %s", file, v.Current.Value, dsUID)
		}
	}
	if !found {
		t.Errorf("%s has no datasource variable", file)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	refs := 0
	walkDatasources(doc, func(ref any) {
		refs++
		m, ok := ref.(map[string]any)
		if !ok || m["type"] != dsType || (m["uid"] != "$datasource" && m["uid"] != "${datasource}") {
			t.Errorf("%s: datasource %v, want {type: %s, uid: $datasource}", file, ref, dsType)
		}
	})
	if refs == 0 {
		t.Errorf("%s: no panel names a data source", file)
	}
}

func walkDatasources(v any, visit func(any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "datasource" {
				visit(x)
				continue
			}
			walkDatasources(x, visit)
		}
	case []any:
		for _, x := range v {
			walkDatasources(x, visit)
		}
	}
}
