package alerts

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/alerting"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
)

// quietTiming is the Grafana mute timing that is always active: Grafana
// has no receiver that notifies nobody, so info alerts reach a muted route.
const quietTiming = "cachewatch-always"

// receiverURLs are the webhooks of the receivers: the page and ticket ones
// from cfg, and a placeholder for the quiet one, which Grafana needs
// although the route that reaches it is always muted.
func receiverURLs(cfg Config) map[string]string {
	return map[string]string{
		ReceiverPage:   cfg.PageWebhookURL,
		ReceiverTicket: cfg.TicketWebhookURL,
		ReceiverQuiet:  "https://quiet.example.invalid/cachewatch",
	}
}

// GrafanaRouting returns Grafana's alerting provisioning file of contact
// points, the notification policy tree and a mute timing that route the
// Grafana-managed cachewatch rules as AlertmanagerConfig routes the
// Prometheus ones: critical pages, warning opens a ticket, info is kept
// quiet; grouped by alert name and identity labels. Grafana's policy tree is
// one per organisation: provisioning it replaces the one in place, so merge
// it by hand into a tree you already have. Grafana's Alertmanager has no
// inhibition rules: a warning and its critical both notify. The page and
// ticket contact points post to cfg's webhooks.
func GrafanaRouting(cfg Config) ([]byte, error) {
	contacts, err := grafanaContactPoints(receiverURLs(cfg))
	if err != nil {
		return nil, err
	}
	policy, err := grafanaPolicy()
	if err != nil {
		return nil, err
	}
	policyDoc, err := withOrg(policy)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"apiVersion":    1,
		"contactPoints": contacts,
		"policies":      []any{policyDoc},
		"muteTimes": []any{map[string]any{
			"orgId": 1, "name": quietTiming,
			"time_intervals": []any{map[string]any{"weekdays": []string{"monday:sunday"}}},
		}},
	}
	// Round-trip through JSON so the SDK's field names are kept.
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("alerts: grafana routing: %w", err)
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return nil, fmt.Errorf("alerts: grafana routing: %w", err)
	}
	return marshalYAML(generic)
}

// grafanaContactPoints are the three receivers as Grafana contact points,
// each with one webhook integration.
func grafanaContactPoints(urls map[string]string) ([]any, error) {
	var out []any
	for _, name := range []string{ReceiverPage, ReceiverTicket, ReceiverQuiet} {
		cp, err := alerting.NewContactPointBuilder().
			Uid(name).
			Name(name).
			Type(alerting.ContactPointTypeWebhook).
			Settings(map[string]any{"url": urls[name]}).
			// Only pages say when they are over, as in AlertmanagerConfig.
			DisableResolveMessage(name != ReceiverPage).
			Build()
		if err != nil {
			return nil, fmt.Errorf("alerts: grafana contact point %s: %w", name, err)
		}
		receiver := map[string]any{
			"uid": cp.Uid, "type": cp.Type, "settings": cp.Settings, "disableResolveMessage": cp.DisableResolveMessage,
		}
		out = append(out, map[string]any{"orgId": 1, "name": name, "receivers": []any{receiver}})
	}
	return out, nil
}

// grafanaPolicy is the notification policy tree: by severity, grouped as
// AlertmanagerConfig groups (and by Grafana's folder, which it always
// adds).
func grafanaPolicy() (alerting.NotificationPolicy, error) {
	route := func(receiver, severity string) *alerting.NotificationPolicyBuilder {
		return alerting.NewNotificationPolicyBuilder().
			Receiver(receiver).
			ObjectMatchers(alerting.ObjectMatchers{{"severity", "=", severity}})
	}
	return alerting.NewNotificationPolicyBuilder().
		Receiver(ReceiverTicket).
		GroupBy(append([]string{"grafana_folder"}, groupBy...)).
		GroupWait("30s").GroupInterval("5m").RepeatInterval("12h").
		Routes([]cog.Builder[alerting.NotificationPolicy]{
			route(ReceiverPage, SeverityCritical).GroupInterval("1m").RepeatInterval("1h"),
			route(ReceiverTicket, SeverityWarning),
			route(ReceiverQuiet, SeverityInfo).MuteTimeIntervals([]string{quietTiming}).
				GroupInterval("30m").RepeatInterval("24h"),
		}).
		Build()
}

// withOrg adds the organisation the provisioning file needs to an SDK
// object.
func withOrg(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("alerts: grafana routing: %w", err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("alerts: grafana routing: %w", err)
	}
	m["orgId"] = 1
	return m, nil
}
