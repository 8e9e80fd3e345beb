package alerts

import (
	"fmt"
	"slices"
	"strings"
)

// Receivers of the Alertmanager configuration. The webhook URLs are
// placeholders (the .invalid domain never resolves): replace them with
// your pager, ticketing or chat integration.
const (
	ReceiverPage   = "cachewatch-page"
	ReceiverTicket = "cachewatch-ticket"
	ReceiverQuiet  = "cachewatch-quiet"
)

type (
	amConfig struct {
		Route        amRoute     `yaml:"route"`
		InhibitRules []amInhibit `yaml:"inhibit_rules"`
		Receivers    []amRecv    `yaml:"receivers"`
	}
	amRoute struct {
		Receiver       string    `yaml:"receiver"`
		Matchers       []string  `yaml:"matchers,omitempty"`
		GroupBy        []string  `yaml:"group_by,omitempty"`
		GroupWait      string    `yaml:"group_wait,omitempty"`
		GroupInterval  string    `yaml:"group_interval,omitempty"`
		RepeatInterval string    `yaml:"repeat_interval,omitempty"`
		Routes         []amRoute `yaml:"routes,omitempty"`
	}
	amInhibit struct {
		SourceMatchers []string `yaml:"source_matchers"`
		TargetMatchers []string `yaml:"target_matchers"`
		Equal          []string `yaml:"equal"`
	}
	amRecv struct {
		Name           string      `yaml:"name"`
		WebhookConfigs []amWebhook `yaml:"webhook_configs,omitempty"`
	}
	amWebhook struct {
		URL          string `yaml:"url"`
		SendResolved bool   `yaml:"send_resolved"`
	}
)

const amHeader = `# Alertmanager routing for the cachewatch alerts.
# critical pages (cachewatch-page), warning opens a ticket (cachewatch-ticket),
# info goes to cachewatch-quiet, which notifies nobody (the alerts stay visible
# in Alertmanager's UI). Alerts are grouped by name and by every identity label
# they carry, so each new page is delivered within group_wait; a faster
# burn-rate tier inhibits the slower ones of its SLO, a warning is inhibited
# while the critical of the same alert fires, and a page that explains others
# (Redis unreachable) inhibits them. The webhooks are page_webhook_url and
# ticket_webhook_url of the settings (cachewatch alerts --config FILE).
`

// groupBy is how notifications are grouped: by the alert name and every
// identity label an alert carries, so that one incident is one
// notification and a new one — a second client failing, a second key
// group — starts a group of its own, delivered within group_wait rather
// than joining a group already notified (which waits for group_interval).
var groupBy = []string{"alertname", "job", "instance", "client", "key_group", "node", "target", "slo"}

// AlertmanagerConfig returns an Alertmanager configuration that routes the
// cachewatch alerts by severity, groups them by alert name and identity
// labels, and inhibits what a firing alert explains. The page and ticket
// receivers post to cfg's webhooks.
func AlertmanagerConfig(cfg Config) ([]byte, error) {
	inhibits, err := inhibitRules(cfg)
	if err != nil {
		return nil, err
	}
	am := amConfig{
		Route: amRoute{
			Receiver: ReceiverTicket,
			GroupBy:  groupBy,
			// Wait a little so the alerts of one incident arrive together.
			GroupWait: "30s", GroupInterval: "5m", RepeatInterval: "12h",
			Routes: []amRoute{
				// A page's group says it is over within a minute of it.
				{Receiver: ReceiverPage, Matchers: []string{`severity="critical"`}, GroupInterval: "1m", RepeatInterval: "1h"},
				{Receiver: ReceiverTicket, Matchers: []string{`severity="warning"`}},
				{Receiver: ReceiverQuiet, Matchers: []string{`severity="info"`}, GroupInterval: "30m", RepeatInterval: "24h"},
			},
		},
		InhibitRules: inhibits,
		Receivers: []amRecv{
			{Name: ReceiverPage, WebhookConfigs: []amWebhook{{URL: cfg.PageWebhookURL, SendResolved: true}}},
			{Name: ReceiverTicket, WebhookConfigs: []amWebhook{{URL: cfg.TicketWebhookURL, SendResolved: false}}},
			{Name: ReceiverQuiet},
		},
	}
	out, err := marshalYAML(am)
	if err != nil {
		return nil, err
	}
	return []byte(strings.Replace(string(out), generatedHeader, generatedHeader+amHeader, 1)), nil
}

// inhibitRules mutes a lesser alert while one that explains it fires. Each
// rule's equal lists only labels both alerts carry (their definitions' by):
// a label neither has would match everywhere.
func inhibitRules(cfg Config) ([]amInhibit, error) {
	defs := map[string]definition{}
	var out []amInhibit
	for _, d := range definitions(cfg) {
		defs[d.name] = d
		out = append(out, levelInhibitions(d)...)
	}
	for _, x := range explanations {
		equal, err := sharedLabels(defs, x.sources, x.target)
		if err != nil {
			return nil, err
		}
		out = append(out, amInhibit{
			SourceMatchers: []string{`alertname=~"` + strings.Join(x.sources, "|") + `"`},
			TargetMatchers: []string{fmt.Sprintf("alertname=%q", x.target)},
			Equal:          equal,
		})
	}
	return out, nil
}

// levelInhibitions mute the lesser levels of one alert with the same
// labels: each burn-rate tier the slower ones of its SLO, or the warning
// while its critical fires.
func levelInhibitions(d definition) []amInhibit {
	name := fmt.Sprintf("alertname=%q", d.name)
	var tiers []string
	for _, l := range d.levels {
		if t := l.labels["tier"]; t != "" {
			tiers = append(tiers, t)
		}
	}
	var out []amInhibit
	for i := 0; i+1 < len(tiers); i++ {
		out = append(out, amInhibit{
			SourceMatchers: []string{name, fmt.Sprintf("tier=%q", tiers[i])},
			TargetMatchers: []string{name, `tier=~"` + strings.Join(tiers[i+1:], "|") + `"`},
			Equal:          labelList(d.by),
		})
	}
	severities := map[string]bool{}
	for _, l := range d.levels {
		severities[l.severity] = true
	}
	if len(tiers) == 0 && severities[SeverityCritical] && severities[SeverityWarning] {
		out = append(out, amInhibit{
			SourceMatchers: []string{name, `severity="critical"`},
			TargetMatchers: []string{name, `severity="warning"`},
			Equal:          labelList(d.by),
		})
	}
	return out
}

// explanations are alerts that explain another: while a source fires, the
// target says nothing new.
var explanations = []struct {
	sources []string
	target  string
}{
	// Redis unreachable from a client is the one page of its incident: the
	// job's burn rates and the tickets on what follows say nothing new.
	{[]string{"CachewatchRedisUnreachable"}, "CachewatchRedisAvailabilityBudgetBurn"},
	{[]string{"CachewatchRedisUnreachable"}, "CachewatchCacheAvailabilityBudgetBurn"},
	{[]string{"CachewatchRedisUnreachable"}, "CachewatchCommandErrorsHigh"},
	{[]string{"CachewatchRedisUnreachable"}, "CachewatchCircuitBreakerOpen"},
	{[]string{"CachewatchRedisUnreachable"}, "CachewatchPoolTimeouts"},
	// Stale-forever and callers getting errors explain a high stale share.
	{[]string{"CachewatchStaleForever", "CachewatchCacheAvailabilityBudgetBurn"}, "CachewatchStaleServeRatioHigh"},
	// A node the exporter cannot reach explains its sampling failures.
	{[]string{"CachewatchRedisNodeUnreachable"}, "CachewatchExporterSampleFailing"},
	{[]string{"CachewatchRedisNodeUnreachable"}, "CachewatchExporterSampleErrors"},
	// An exporter that cannot be scraped explains its sampler's alerts.
	{[]string{"CachewatchExporterDown"}, "CachewatchExporterSampleFailing"},
	{[]string{"CachewatchExporterDown"}, "CachewatchExporterSampleErrors"},
	{[]string{"CachewatchExporterDown"}, "CachewatchExporterKeyspaceCoverageLow"},
}

// sharedLabels are the labels every source and the target carry.
func sharedLabels(defs map[string]definition, sources []string, target string) ([]string, error) {
	t, ok := defs[target]
	if !ok {
		return nil, fmt.Errorf("alerts: inhibition target %s is not an alert", target)
	}
	shared := labelList(t.by)
	for _, name := range sources {
		src, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("alerts: inhibition source %s is not an alert", name)
		}
		have := labelList(src.by)
		shared = slices.DeleteFunc(shared, func(l string) bool { return !slices.Contains(have, l) })
	}
	if len(shared) == 0 {
		return nil, fmt.Errorf("alerts: %v and %s share no label to inhibit on", sources, target)
	}
	return shared, nil
}

// labelList splits a "job, key_group" list.
func labelList(by string) []string {
	var out []string
	for _, l := range strings.Split(by, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
