package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// helpFlag is one flag of `cachewatch help exporter`.
type helpFlag struct {
	name       string
	boolean    bool   // shown as --[no-]name
	repeatable bool   // shown with "..."
	def        string // the default shown, "" when none (or a placeholder)
}

// helpFlagLine matches a flag's first line in kingpin's help.
var helpFlagLine = regexp.MustCompile(`^ {2,8}(?:-\w, )?--(\[no-\])?([a-z0-9][a-z0-9.-]*)(?:=(\S+))?( \.\.\.)?`)

// placeholder tells a flag's placeholder (HOST:PORT, FILE) from its default.
var placeholder = regexp.MustCompile(`^[A-Z][A-Z:=_]*$`)

// exporterHelpFlags lists the flags `cachewatch help exporter` documents.
func exporterHelpFlags(t *testing.T) []helpFlag {
	t.Helper()
	var flags []helpFlag
	for _, line := range strings.Split(string(run(t, "help", "exporter")), "\n") {
		m := helpFlagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := helpFlag{name: m[2], boolean: m[1] != "", repeatable: m[4] != ""}
		if !placeholder.MatchString(m[3]) {
			f.def = strings.Trim(m[3], `"`)
		}
		flags = append(flags, f)
	}
	if len(flags) < 20 {
		t.Fatalf("only %d flags in cachewatch help exporter", len(flags))
	}
	return flags
}

// exporterFlags lists the flags `cachewatch help exporter` documents, by name.
func exporterFlags(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, f := range exporterHelpFlags(t) {
		names[f.name] = true
	}
	return names
}

// flagValuePaths names the value of the flags whose value path is not the
// flag's name camelCased (sample.max-keys → sample.maxKeys).
var flagValuePaths = map[string]string{
	"locks.pattern":                  "locks.patterns",
	"queue":                          "queues",
	"keygroup.rule":                  "keygroup.rules",
	"redis.addr":                     "redis.addrs",
	"redis.tls":                      "redis.tls.enabled",
	"redis.tls-server-name":          "redis.tls.serverName",
	"redis.tls-insecure-skip-verify": "redis.tls.insecureSkipVerify",
}

// wiredFlag is a flag the chart sets from a value of another shape: a
// Secret or ConfigMap it mounts, or a port.
type wiredFlag struct {
	path  string
	value any
	arg   string
}

var wiredFlags = map[string]wiredFlag{
	"redis.password-file": {"redis.existingSecret", "redis-auth", "--redis.password-file=/etc/cachewatch/redis/password"},
	"redis.tls-ca-file":   {"redis.tls.caSecret", "redis-ca", "--redis.tls-ca-file=/etc/cachewatch/redis-tls/ca.crt"},
	"web.listen-address":  {"web.port", 9700, "--web.listen-address=:9700"},
	"web.config.file":     {"web.configSecret", "exporter-web", "--web.config.file=/etc/cachewatch/web/config/web-config.yml"},
	"targets.file": {"targets", []any{map[string]any{"name": "orders", "url": "redis://orders-redis:6379"}},
		"--targets.file=/etc/cachewatch/targets/targets.yml"},
	"probe.modules-file": {"probe.enabled", true, "--probe.modules-file=/etc/cachewatch/probe/modules.yml"},
}

// unexposedFlags are flags no value sets, and why.
var unexposedFlags = map[string]string{
	"help":               "prints help",
	"version":            "prints the version",
	"web.systemd-socket": "a pod has no systemd to hand it sockets",
}

// flagValuePath is the value that sets flag.
func flagValuePath(flag string) string {
	if p, ok := flagValuePaths[flag]; ok {
		return p
	}
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// TestChartExposesEveryExporterFlag sets, for every flag of `cachewatch
// help exporter`, its value in the chart to something other than its
// default and checks the Deployment passes the flag so; values.yaml's
// default must be the exporter's. A flag added to the exporter fails here
// until the chart has a value for it.
func TestChartExposesEveryExporterFlag(t *testing.T) {
	defaults := chartValues(t)
	schema := chartSchema(t)
	// Flags that exclude others are set in renders of their own.
	renders := map[string]map[string]any{"": {}, "redis.addr": {}, "targets.file": {}, "probe.modules-file": {}}
	want := map[string]map[string][]string{"": {}, "redis.addr": {}, "targets.file": {}, "probe.modules-file": {}} // render → flag → arguments
	for _, f := range exporterHelpFlags(t) {
		if _, ok := unexposedFlags[f.name]; ok {
			continue
		}
		render := ""
		if _, ok := renders[f.name]; ok {
			render = f.name
		}
		into := renders[render]
		if w, ok := wiredFlags[f.name]; ok {
			setPath(into, w.path, w.value)
			want[render][f.name] = []string{w.arg}
			continue
		}
		path := flagValuePath(f.name)
		def, ok := lookupPath(defaults, path)
		prop := schemaProperty(schema, path)
		if !ok || prop == nil {
			t.Errorf("--%s has no chart value: add %s to values.yaml (the exporter's default), values.schema.json, "+
				"the args table of templates/_helpers.tpl and docs/exporter.md's Helm chart section", f.name, path)
			continue
		}
		checkDefault(t, f, path, def)
		v := otherValue(t, path, prop, def)
		setPath(into, path, v)
		want[render][f.name] = flagArgs(f, v)
	}
	n := 0
	for render, values := range renders {
		out, err := renderChart(t, values)
		if err != nil {
			t.Fatalf("%s: %v", render, err)
		}
		args := podSpec(t, decodeAll(t, out)).Containers[0].Args
		for _, flagArgs := range want[render] {
			n++
			for _, a := range flagArgs {
				if !slices.Contains(args, a) {
					t.Errorf("its value set, the chart does not pass %s (args %q)", a, args)
				}
			}
		}
	}
	t.Logf("%d flags, each set through its value", n)
}

// checkDefault compares a value's default in values.yaml with the flag's.
func checkDefault(t *testing.T, f helpFlag, path string, def any) {
	t.Helper()
	if f.def == "" || f.repeatable || f.boolean || def == "" {
		return // no default shown, or the value leaves the exporter's in place
	}
	got := fmt.Sprint(def)
	if d1, err1 := time.ParseDuration(f.def); err1 == nil {
		if d2, err2 := time.ParseDuration(got); err2 == nil && d1 == d2 {
			return
		}
	}
	if n1, err1 := strconv.ParseFloat(f.def, 64); err1 == nil {
		if n2, err2 := strconv.ParseFloat(got, 64); err2 == nil && n1 == n2 {
			return
		}
	}
	if got != f.def {
		t.Errorf("values.yaml %s: %v, the default of --%s is %s", path, def, f.name, f.def)
	}
}

// otherValue is a value of the schema's type other than def: the schema's
// first example, else one derived from the type.
func otherValue(t *testing.T, path string, prop map[string]any, def any) any {
	t.Helper()
	if ex, ok := prop["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	switch prop["type"] {
	case "boolean":
		return true
	case "integer":
		return def.(float64) + 7
	case "number":
		return def.(float64) / 4
	case "array":
		return []any{"first:*", "second:*"}
	}
	if enum, ok := prop["enum"].([]any); ok {
		for _, e := range enum {
			if e != def {
				return e
			}
		}
	}
	if p, _ := prop["pattern"].(string); strings.Contains(p, "ms|s|m|h") {
		return "7m"
	}
	if prop["type"] == "string" && prop["pattern"] == nil {
		return "set-" + strings.ReplaceAll(path, ".", "-")
	}
	t.Fatalf("%s: no example in values.schema.json, and no value to derive from its type", path)
	return nil
}

// flagArgs are the arguments a flag set to v becomes.
func flagArgs(f helpFlag, v any) []string {
	switch v := v.(type) {
	case bool:
		return []string{"--" + f.name}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, fmt.Sprintf("--%s=%v", f.name, e))
		}
		return out
	case float64:
		return []string{"--" + f.name + "=" + strconv.FormatFloat(v, 'f', -1, 64)}
	}
	return []string{fmt.Sprintf("--%s=%v", f.name, v)}
}

// chartValues reads the chart's values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var values map[string]any
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	return values
}

// chartSchema reads the chart's values.schema.json.
func chartSchema(t *testing.T) map[string]any {
	t.Helper()
	var schema map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(chartDir, "values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	return schema
}

// schemaProperty is the schema of the value at a dotted path, or nil.
func schemaProperty(schema map[string]any, path string) map[string]any {
	node := schema
	for _, key := range strings.Split(path, ".") {
		props, _ := node["properties"].(map[string]any)
		next, ok := props[key].(map[string]any)
		if !ok {
			return nil
		}
		node = next
	}
	return node
}

func lookupPath(values map[string]any, path string) (any, bool) {
	var v any = values
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[key]; !ok {
			return nil, false
		}
	}
	return v, true
}

func setPath(values map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	for _, key := range keys[:len(keys)-1] {
		next, ok := values[key].(map[string]any)
		if !ok {
			next = map[string]any{}
			values[key] = next
		}
		values = next
	}
	values[keys[len(keys)-1]] = v
}

// targetsFileEntry is one target of the exporter's --targets.file, as
// docs/exporter.md describes it.
type targetsFileEntry struct {
	Name                  string   `json:"name"`
	URL                   string   `json:"url,omitempty"`
	Addrs                 []string `json:"addrs,omitempty"`
	User                  string   `json:"user,omitempty"`
	PasswordFile          string   `json:"password_file,omitempty"`
	Mode                  string   `json:"mode,omitempty"`
	TLS                   bool     `json:"tls,omitempty"`
	TLSCAFile             string   `json:"tls_ca_file,omitempty"`
	TLSServerName         string   `json:"tls_server_name,omitempty"`
	TLSInsecureSkipVerify bool     `json:"tls_insecure_skip_verify,omitempty"`
	Queues                []string `json:"queues,omitempty"`
	LockPatterns          []string `json:"lock_patterns,omitempty"`
	KeysPerSecond         *float64 `json:"keys_per_second,omitempty"`
}

// checkTargets checks the targets file the chart writes for targets: each
// entry as given, its password and CA files mounted from its Secrets, and
// no --redis.* connection flag beside it (the exporter refuses both).
func checkTargets(t *testing.T, o objects, vc valuesCase) {
	t.Helper()
	given, _ := vc.values["targets"].([]any)
	var files []corev1ConfigMapData
	for _, cm := range o.ConfigMaps {
		if d, ok := cm.Data["targets.yml"]; ok {
			files = append(files, corev1ConfigMapData{cm.Name, d})
		}
	}
	if len(given) == 0 {
		if len(files) != 0 {
			t.Errorf("a targets ConfigMap without targets")
		}
		return
	}
	if len(files) != 1 {
		t.Fatalf("%d targets ConfigMaps for %d targets", len(files), len(given))
	}
	var tf struct {
		Targets []targetsFileEntry `json:"targets"`
	}
	if err := decodeStrict([]byte(files[0].data), &tf); err != nil {
		t.Fatalf("targets.yml: %v\n%s", err, files[0].data)
	}
	mounts := secretMounts(t, o)
	for i, entry := range tf.Targets {
		g := given[i].(map[string]any)
		if entry.Name != g["name"] || entry.URL != fmt.Sprint(g["url"]) && g["url"] != nil || len(entry.Addrs) != len(asList(g["addrs"])) ||
			!reflect.DeepEqual(entry.Queues, asStrings(g["queues"])) || !reflect.DeepEqual(entry.LockPatterns, asStrings(g["lockPatterns"])) {
			t.Errorf("target %d: %+v, given %v", i, entry, g)
		}
		checkMounted(t, mounts, entry.PasswordFile, g["existingSecret"])
		checkMounted(t, mounts, entry.TLSCAFile, g["caSecret"])
	}
	for _, a := range o.Deployments[0].Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--redis.") {
			t.Errorf("%s beside --targets.file", a)
		}
	}
}

type corev1ConfigMapData struct{ name, data string }

// secretMounts maps each file path the exporter can read to the Secret
// mounted there.
func secretMounts(t *testing.T, o objects) map[string]string {
	pod := podSpec(t, o)
	secretOf := map[string]string{}
	files := map[string][]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretOf[v.Name] = v.Secret.SecretName
			for _, it := range v.Secret.Items {
				files[v.Name] = append(files[v.Name], it.Path)
			}
		}
	}
	out := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		for _, f := range files[m.Name] {
			out[m.MountPath+"/"+f] = secretOf[m.Name]
		}
	}
	return out
}

func checkMounted(t *testing.T, mounts map[string]string, file string, secret any) {
	t.Helper()
	if secret == nil {
		if file != "" {
			t.Errorf("%s named without a Secret", file)
		}
		return
	}
	if got := mounts[file]; got != secret {
		t.Errorf("%s: mounted from Secret %q, want %v", file, got, secret)
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func asStrings(v any) []string {
	var out []string
	for _, e := range asList(v) {
		out = append(out, fmt.Sprint(e))
	}
	return out
}
