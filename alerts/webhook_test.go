package alerts

import (
	"errors"
	"strings"
	"testing"
)

// The settings route pages and tickets: the webhooks of alerts.yaml reach
// alertmanager.yaml and Grafana's contact points, and a value that is not
// an http(s) URL is refused with its key.
func TestWebhookSettings(t *testing.T) {
	cfg, err := ParseConfig(strings.NewReader("page_webhook_url: https://pager.example/hook\nticket_webhook_url: http://tickets.example/hook\n"))
	if err != nil {
		t.Fatal(err)
	}
	am, err := AlertmanagerConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	grafana, err := GrafanaRouting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{string(am), string(grafana)} {
		if !strings.Contains(doc, "url: https://pager.example/hook") || !strings.Contains(doc, "url: http://tickets.example/hook") ||
			strings.Contains(doc, "pager.example.invalid") {
			t.Errorf("the webhooks set are not the receivers':\n%s", doc)
		}
	}
	_, err = ParseConfig(strings.NewReader("page_webhook_url: pager.example/hook\n"))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "page_webhook_url") {
		t.Errorf("a webhook without a scheme: %v, want a refusal naming page_webhook_url", err)
	}
}
