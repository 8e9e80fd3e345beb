package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/kubemeta"
)

// GrafanaTokenEnv names the environment variable holding the Grafana token.
// A token is never a flag value: flags show up in ps and shell history.
const GrafanaTokenEnv = "CACHEWATCH_GRAFANA_TOKEN"

// exitPushFailed is the status when Grafana refused a board or could not
// be reached.
const exitPushFailed = 1

func init() {
	register(command{name: "dashboards", help: "Write the Grafana dashboards as JSON or as ConfigMaps for the Grafana sidecar, or push them to Grafana.", define: defineDashboards})
}

type dashboardsFlags struct {
	out, grafanaURL, tokenFile, folder, format string
	configMap                                  dashboards.ConfigMapOptions
	sidecarLabel                               string
}

func defineDashboards(cmd *kingpin.CmdClause) action {
	f := &dashboardsFlags{configMap: dashboards.ConfigMapOptions{Labels: map[string]string{}}}
	cmd.Flag("out", "Directory to write the dashboards to, as <uid>.json (--format json) or <uid>.yaml (--format configmap; default: stdout).").
		PlaceHolder("DIR").StringVar(&f.out)
	cmd.Flag("format", "json: Grafana dashboard JSON; configmap: one Kubernetes ConfigMap per board for Grafana's dashboard sidecar.").
		Default("json").EnumVar(&f.format, "json", "configmap")
	cmd.Flag("configmap.namespace", "Namespace of the ConfigMaps (default: kubectl's).").PlaceHolder("NS").StringVar(&f.configMap.Namespace)
	cmd.Flag("configmap.sidecar-label", "Label the Grafana sidecar watches.").
		Default(dashboards.DefaultSidecarLabel + "=" + dashboards.DefaultSidecarLabelValue).PlaceHolder("KEY=VALUE").StringVar(&f.sidecarLabel)
	cmd.Flag("configmap.folder-annotation", "Annotation the sidecar reads the Grafana folder from.").
		Default(dashboards.DefaultFolderAnnotation).StringVar(&f.configMap.FolderAnnotation)
	cmd.Flag("configmap.folder", "Grafana folder of the boards.").Default(dashboards.DefaultFolder).StringVar(&f.configMap.Folder)
	cmd.Flag("configmap.label", "Extra label of every ConfigMap (repeatable).").PlaceHolder("KEY=VALUE").StringMapVar(&f.configMap.Labels)
	cmd.Flag("grafana-url", "Grafana to push the dashboards to (POST /api/dashboards/db, overwriting).").PlaceHolder("URL").StringVar(&f.grafanaURL)
	cmd.Flag("grafana-token-file", "File holding the Grafana service account token (else $"+GrafanaTokenEnv+").").
		PlaceHolder("FILE").StringVar(&f.tokenFile)
	cmd.Flag("grafana-folder", "UID of the Grafana folder to push into (default: General).").PlaceHolder("UID").StringVar(&f.folder)
	return f.run
}

func (f *dashboardsFlags) run(ctx context.Context, c *cli) int {
	if f.format == "configmap" {
		return f.writeConfigMaps(c)
	}
	if f.out == "" && f.grafanaURL == "" {
		return c.usageError(errors.New("nothing to do: give --out DIR, --grafana-url URL, or both"))
	}
	var token string
	if f.grafanaURL != "" {
		var err error
		if token, err = f.token(); err != nil {
			return c.usageError(err)
		}
	}
	if f.out != "" {
		if err := dashboards.Write(f.out); err != nil {
			fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
			return exitPushFailed
		}
		fmt.Fprintf(c.stdout, "wrote the dashboards to %s\n", f.out)
	}
	if f.grafanaURL != "" {
		err := dashboards.Push(ctx, f.grafanaURL, token, dashboards.PushOptions{FolderUID: f.folder, Message: "saved by " + versionString()})
		if err != nil {
			fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
			return exitPushFailed
		}
		fmt.Fprintf(c.stdout, "pushed the dashboards to %s\n", redact(f.grafanaURL))
	}
	return 0
}

// writeConfigMaps writes every board as a ConfigMap: into the --out
// directory as <uid>.yaml, or to stdout as one YAML stream.
func (f *dashboardsFlags) writeConfigMaps(c *cli) int {
	if f.grafanaURL != "" {
		return c.usageError(errors.New("--format configmap writes files; push with --format json"))
	}
	key, value, ok := strings.Cut(f.sidecarLabel, "=")
	if !ok || key == "" {
		return c.usageError(fmt.Errorf("--configmap.sidecar-label %q: want KEY=VALUE", f.sidecarLabel))
	}
	f.configMap.SidecarLabel, f.configMap.SidecarLabelValue = key, value
	var err error
	if f.out == "" || f.out == "-" {
		err = f.streamConfigMaps(c)
	} else if err = dashboards.WriteConfigMaps(f.out, f.configMap); err == nil {
		fmt.Fprintf(c.stdout, "wrote the dashboards' ConfigMaps to %s\n", f.out)
	}
	if errors.Is(err, kubemeta.ErrInvalid) {
		return c.usageError(fmt.Errorf("--configmap.*: %w", err))
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "cachewatch %s: %s\n", c.command, oneLine(err))
		return 1
	}
	return 0
}

// streamConfigMaps writes every board's ConfigMap to stdout, as documents
// of one YAML stream.
func (f *dashboardsFlags) streamConfigMaps(c *cli) error {
	ds, err := dashboards.Dashboards()
	if err != nil {
		return err
	}
	var stream []byte
	for _, d := range ds {
		doc, err := d.ConfigMap(f.configMap)
		if err != nil {
			return err
		}
		stream = append(append(stream, "---\n"...), doc...)
	}
	_, _ = c.stdout.Write(stream)
	return nil
}

// token reads the Grafana token from --grafana-token-file or the
// environment, never both.
func (f *dashboardsFlags) token() (string, error) {
	env := os.Getenv(GrafanaTokenEnv)
	if f.tokenFile == "" {
		if env == "" {
			return "", fmt.Errorf("--grafana-url needs a token: set $%s or --grafana-token-file", GrafanaTokenEnv)
		}
		return env, nil
	}
	if env != "" {
		return "", fmt.Errorf("set $%s or --grafana-token-file, not both", GrafanaTokenEnv)
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--grafana-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--grafana-token-file %s is empty", f.tokenFile)
	}
	return token, nil
}

// oneLine is an error's text, redacted, on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(redactErr(err)), " ") }
