package alerts

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// WriteFiles writes the Prometheus rule file, the Grafana alert-rule and
// notification-policy provisioning files, the Alertmanager configuration
// and the sloth SLO spec for cfg into dir, creating it if needed.
func WriteFiles(dir string, cfg Config) error {
	files, err := render(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("alerts: %w", err)
		}
	}
	return nil
}

// render returns the files WriteFiles writes, by name.
func render(cfg Config) (map[string][]byte, error) {
	groups, err := Rules(cfg)
	if err != nil {
		return nil, err
	}
	rules, err := PrometheusRules(groups)
	if err != nil {
		return nil, err
	}
	grafana, err := GrafanaRules(groups, GrafanaOptions{DatasourceUID: cfg.GrafanaDatasourceUID, Folder: cfg.GrafanaFolder})
	if err != nil {
		return nil, err
	}
	am, err := AlertmanagerConfig(cfg)
	if err != nil {
		return nil, err
	}
	routing, err := GrafanaRouting(cfg)
	if err != nil {
		return nil, err
	}
	sloth, err := SlothSpec(cfg)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{RulesFile: rules, GrafanaFile: grafana, GrafanaRoutingFile: routing, AlertmanagerFile: am, SlothFile: sloth}, nil
}
