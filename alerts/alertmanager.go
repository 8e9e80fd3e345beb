package alerts

import "strings"

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
# in Alertmanager's UI). Alerts are grouped per alert name and key group; a
# warning is inhibited while the critical of the same alert, job and key group
# fires. Replace the placeholder webhook URLs with your integrations.
`

// AlertmanagerConfig returns an Alertmanager configuration that routes the
// cachewatch alerts by severity, groups them by alertname and key_group,
// and inhibits a warning while the matching critical fires.
func AlertmanagerConfig() ([]byte, error) {
	cfg := amConfig{
		Route: amRoute{
			Receiver: ReceiverTicket,
			GroupBy:  []string{"alertname", "key_group"},
			// Wait a little so the alerts of one incident arrive together.
			GroupWait: "30s", GroupInterval: "5m", RepeatInterval: "12h",
			Routes: []amRoute{
				{Receiver: ReceiverPage, Matchers: []string{`severity="critical"`}, RepeatInterval: "1h"},
				{Receiver: ReceiverTicket, Matchers: []string{`severity="warning"`}},
				{Receiver: ReceiverQuiet, Matchers: []string{`severity="info"`}, GroupInterval: "30m", RepeatInterval: "24h"},
			},
		},
		InhibitRules: []amInhibit{{
			SourceMatchers: []string{`severity="critical"`},
			TargetMatchers: []string{`severity="warning"`},
			Equal:          []string{"alertname", "job", "key_group"},
		}, {
			// Stale-forever and its end, hard-TTL refusals, explain the
			// stale-serve warning of the same key group.
			SourceMatchers: []string{`alertname=~"CachewatchStaleForever|CachewatchHardTTLRefusals"`},
			TargetMatchers: []string{`alertname="CachewatchStaleServeRatioHigh"`},
			Equal:          []string{"job", "key_group"},
		}, {
			// An exporter that cannot be scraped explains every other
			// exporter alert of that instance.
			SourceMatchers: []string{`alertname="CachewatchExporterDown"`},
			TargetMatchers: []string{`alertname=~"CachewatchExporter(SampleFailing|SampleErrors|KeyspaceCoverageLow)"`},
			Equal:          []string{"job", "instance"},
		}},
		Receivers: []amRecv{
			{Name: ReceiverPage, WebhookConfigs: []amWebhook{{URL: "https://pager.example.invalid/cachewatch", SendResolved: true}}},
			{Name: ReceiverTicket, WebhookConfigs: []amWebhook{{URL: "https://tickets.example.invalid/cachewatch", SendResolved: false}}},
			{Name: ReceiverQuiet},
		},
	}
	out, err := marshalYAML(cfg)
	if err != nil {
		return nil, err
	}
	return []byte(strings.Replace(string(out), generatedHeader, generatedHeader+amHeader, 1)), nil
}
