package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/alerts"
)

func init() {
	register(command{name: "alerts", help: "Write the Prometheus alert rules, the same alerts as Grafana-managed rules, and an Alertmanager routing config.", define: defineAlerts})
}

type alertsFlags struct {
	out, config string
	// overrides holds one flag per alerts.Config key; nil values were not
	// given.
	overrides map[string]*string
}

func defineAlerts(cmd *kingpin.CmdClause) action {
	f := &alertsFlags{overrides: map[string]*string{}}
	cmd.Flag("out", "Directory to write "+alerts.RulesFile+", "+alerts.GrafanaFile+" and "+alerts.AlertmanagerFile+" to.").
		PlaceHolder("DIR").StringVar(&f.out)
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
	if f.out == "" {
		return c.usageError(errors.New("--out DIR is required"))
	}
	cfg, err := f.configure()
	if err != nil {
		return c.usageError(err)
	}
	if err := alerts.WriteFiles(f.out, cfg); err != nil {
		fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
		return 1
	}
	fmt.Fprintf(c.stdout, "wrote %s, %s and %s to %s\n", alerts.RulesFile, alerts.GrafanaFile, alerts.AlertmanagerFile, f.out)
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
