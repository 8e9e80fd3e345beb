package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/alerts"
)

func init() {
	register(command{name: "alerts", help: "Write the Prometheus alert rules (a rule file or a PrometheusRule), the same alerts as Grafana-managed rules, an Alertmanager routing config, and the SLOs as a sloth spec.", define: defineAlerts})
}

type alertsFlags struct {
	out, config, format string
	rule                alerts.PrometheusRuleOptions
	// overrides holds one flag per alerts.Config key; nil values were not
	// given.
	overrides map[string]*string
}

func defineAlerts(cmd *kingpin.CmdClause) action {
	f := &alertsFlags{overrides: map[string]*string{}, rule: alerts.PrometheusRuleOptions{Labels: map[string]string{}}}
	cmd.Flag("out", "Directory to write "+alerts.RulesFile+", "+alerts.GrafanaFile+", "+alerts.GrafanaRoutingFile+", "+alerts.AlertmanagerFile+" and "+alerts.SlothFile+
		" to (--format rules), or "+alerts.PrometheusRuleFile+" (--format prometheusrule) or "+alerts.SlothFile+" (--format sloth; default: stdout).").
		PlaceHolder("DIR").StringVar(&f.out)
	cmd.Flag("format", "rules: Prometheus rule file, Grafana rules, Alertmanager config, sloth spec; prometheusrule: a prometheus-operator PrometheusRule; sloth: the SLOs as a sloth prometheus/v1 spec.").
		Default("rules").EnumVar(&f.format, "rules", "prometheusrule", "sloth")
	cmd.Flag("prometheusrule.name", "Name of the PrometheusRule.").Default(alerts.DefaultPrometheusRuleName).StringVar(&f.rule.Name)
	cmd.Flag("prometheusrule.namespace", "Namespace of the PrometheusRule (default: kubectl's).").PlaceHolder("NS").StringVar(&f.rule.Namespace)
	cmd.Flag("prometheusrule.label", "Label of the PrometheusRule, for the operator's ruleSelector (repeatable).").
		PlaceHolder("KEY=VALUE").StringMapVar(&f.rule.Labels)
	cmd.Flag("config", "YAML file of selector and threshold overrides (keys as the flags below, with underscores).").
		PlaceHolder("FILE").StringVar(&f.config)
	defaults := alerts.DefaultConfig()
	for _, key := range defaults.Keys() {
		def, _ := defaults.Get(key)
		f.overrides[key] = cmd.Flag(flagName(key), "Override "+key+" (default "+def+").").PlaceHolder("VALUE").String()
	}
	return f.run
}

// flagName is a config key as a flag: underscores become dashes.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

func (f *alertsFlags) run(_ context.Context, c *cli) int {
	if f.format == "rules" && (f.out == "" || f.out == "-") {
		return c.usageError(errors.New("--out DIR is required"))
	}
	cfg, err := f.configure()
	if err != nil {
		return c.usageError(err)
	}
	switch f.format {
	case "prometheusrule":
		return f.writePrometheusRule(c, cfg)
	case "sloth":
		doc, err := alerts.SlothSpec(cfg)
		if err != nil {
			return c.usageError(err)
		}
		return writeOutput(c, f.out, alerts.SlothFile, doc)
	}
	if err := alerts.WriteFiles(f.out, cfg); err != nil {
		fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
		return 1
	}
	fmt.Fprintf(c.stdout, "wrote %s, %s, %s, %s and %s to %s\n", alerts.RulesFile, alerts.GrafanaFile, alerts.GrafanaRoutingFile, alerts.AlertmanagerFile, alerts.SlothFile, f.out)
	return 0
}

// writePrometheusRule writes the rules for cfg as a PrometheusRule to
// stdout, or into the --out directory.
func (f *alertsFlags) writePrometheusRule(c *cli, cfg alerts.Config) int {
	groups, err := alerts.Rules(cfg)
	if err != nil {
		return c.usageError(err)
	}
	doc, err := alerts.PrometheusRule(groups, f.rule)
	if err != nil {
		return c.usageError(fmt.Errorf("--prometheusrule.*: %w", err))
	}
	return writeOutput(c, f.out, alerts.PrometheusRuleFile, doc)
}

// writeOutput writes data to stdout when out is empty or "-", else to
// out/name, creating the directory, and says where it went.
func writeOutput(c *cli, out, name string, data []byte) int {
	if out == "" || out == "-" {
		_, _ = c.stdout.Write(data)
		return 0
	}
	path := filepath.Join(out, name)
	err := os.MkdirAll(out, 0o755)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
		return 1
	}
	fmt.Fprintf(c.stdout, "wrote %s\n", path)
	return 0
}

// configure layers the defaults, the --config file and the flags, and
// names the flag or file key of a bad value.
func (f *alertsFlags) configure() (alerts.Config, error) {
	cfg := alerts.DefaultConfig()
	if f.config != "" {
		var err error
		if cfg, err = alerts.LoadConfig(f.config); err != nil {
			return cfg, fmt.Errorf("--config %s", strings.Replace(err.Error(), alerts.ErrConfig.Error()+": ", "", 1))
		}
	}
	for key, v := range f.overrides {
		if v == nil || *v == "" {
			continue
		}
		if err := cfg.Set(key, *v); err != nil {
			return cfg, flagError(key, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		for key, v := range f.overrides {
			if v != nil && *v != "" && strings.HasPrefix(err.Error(), alerts.ErrConfig.Error()+": "+key+":") {
				return cfg, flagError(key, err)
			}
		}
		return cfg, fmt.Errorf("--config %s: %s", f.config, strings.TrimPrefix(err.Error(), alerts.ErrConfig.Error()+": "))
	}
	return cfg, nil
}

// flagError rewrites "alerts: bad config: key: msg" as "--key: msg".
func flagError(key string, err error) error {
	msg := strings.TrimPrefix(err.Error(), alerts.ErrConfig.Error()+": "+key+": ")
	return fmt.Errorf("--%s: %s", flagName(key), msg)
}
