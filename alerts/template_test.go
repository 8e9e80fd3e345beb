package alerts

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func parseTemplate(t *testing.T, data []byte) rulesTemplate {
	t.Helper()
	var tmpl rulesTemplate
	if err := json.Unmarshal(data, &tmpl); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestRulesTemplateHasEveryKey checks the template lists every config key
// and has a placeholder for each selector and threshold.
func TestRulesTemplateHasEveryKey(t *testing.T) {
	data, err := RulesTemplate()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := parseTemplate(t, data)
	def := DefaultConfig()
	for _, key := range def.Keys() {
		k, ok := tmpl.Config[key]
		if !ok {
			t.Errorf("template config lacks %s", key)
			continue
		}
		got := fmt.Sprint(k.Default)
		if f, ok := k.Default.(float64); ok {
			got = strconv.FormatFloat(f, 'g', -1, 64)
		}
		if want, _ := def.Get(key); got != want {
			t.Errorf("%s: default %v, want %s", key, k.Default, want)
		}
		// The Grafana and webhook keys place and route the alerts; the
		// rules do not read them.
		if !strings.HasPrefix(key, "grafana_") && !strings.HasSuffix(key, "_webhook_url") && !strings.Contains(string(data), "${"+key) {
			t.Errorf("no placeholder for %s", key)
		}
	}
}

// TestRulesTemplateCheckCatchesALiteral checks the template's self-check
// fails, naming the key, when a value the config sets is left as a literal.
func TestRulesTemplateCheckCatchesALiteral(t *testing.T) {
	data, err := RulesTemplate()
	if err != nil {
		t.Fatal(err)
	}
	for placeholder, literal := range map[string]string{
		"${lock_acquire_for:duration}":        "10m",
		"${lock_contention_warning:num}":      "0.05",
		"${lock_acquire_p99_warning:seconds}": "0.05",
		"${service_selector}":                 `job=~\".+\"`,
	} {
		broken := strings.ReplaceAll(string(data), placeholder, literal)
		if broken == string(data) {
			t.Fatalf("template has no %s", placeholder)
		}
		err := checkTemplate(parseTemplate(t, []byte(broken)))
		key := strings.Trim(strings.Split(placeholder, ":")[0], "${}")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s left as %s: check says %v, want an error naming %s", placeholder, literal, err, key)
		}
	}
}
