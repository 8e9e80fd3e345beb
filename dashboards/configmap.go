package dashboards

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cachewatch/cachewatch/internal/kubemeta"
)

// Defaults of ConfigMapOptions: what the Grafana dashboard sidecar of
// kube-prometheus-stack and the grafana chart watches, and the folder the
// boards go in.
const (
	DefaultSidecarLabel      = "grafana_dashboard"
	DefaultSidecarLabelValue = "1"
	DefaultFolderAnnotation  = "grafana_folder"
	DefaultFolder            = "cachewatch"
)

// ConfigMapOptions place the boards' ConfigMaps where Grafana's dashboard
// sidecar picks them up. The zero value gives each ConfigMap the label
// grafana_dashboard: "1" and the annotation grafana_folder: cachewatch, in
// the namespace kubectl applies it to.
type ConfigMapOptions struct {
	// Namespace of the ConfigMaps; empty leaves it to kubectl.
	Namespace string
	// SidecarLabel and SidecarLabelValue are the label the sidecar
	// watches (its sidecar.dashboards.label and labelValue).
	SidecarLabel, SidecarLabelValue string
	// FolderAnnotation and Folder name the Grafana folder (the sidecar's
	// sidecar.dashboards.folderAnnotation).
	FolderAnnotation, Folder string
	// Labels are added to every ConfigMap.
	Labels map[string]string
}

func (o ConfigMapOptions) withDefaults() ConfigMapOptions {
	if o.SidecarLabel == "" {
		o.SidecarLabel = DefaultSidecarLabel
	}
	if o.SidecarLabelValue == "" {
		o.SidecarLabelValue = DefaultSidecarLabelValue
	}
	if o.FolderAnnotation == "" {
		o.FolderAnnotation = DefaultFolderAnnotation
	}
	if o.Folder == "" {
		o.Folder = DefaultFolder
	}
	return o
}

// ConfigMap renders the board as a v1 ConfigMap named after its UID, the
// board's JSON under the key <uid>.json. A namespace or label the API
// server would refuse is an error.
func (d Dashboard) ConfigMap(opts ConfigMapOptions) ([]byte, error) {
	opts = opts.withDefaults()
	board, err := d.JSON()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[opts.SidecarLabel] = opts.SidecarLabelValue
	meta := kubemeta.Meta{
		Name: d.UID, Namespace: opts.Namespace, Labels: labels,
		Annotations: map[string]string{opts.FolderAnnotation: opts.Folder},
	}
	doc, err := kubemeta.Manifest("v1", "ConfigMap", meta, map[string]any{"data": map[string]string{d.UID + ".json": string(board)}})
	if err != nil {
		return nil, fmt.Errorf("dashboards: %w", err)
	}
	return doc, nil
}

// WriteConfigMaps writes every board to dir as a ConfigMap in <uid>.yaml,
// creating dir if needed: `kubectl apply -f dir` installs them.
func WriteConfigMaps(dir string, opts ConfigMapOptions) error {
	return writeEach(dir, ".yaml", func(d Dashboard) ([]byte, error) { return d.ConfigMap(opts) })
}

// writeEach writes every board to dir as <uid><ext>, rendered by render,
// creating dir if needed. A file is rewritten only when its content
// changed.
func writeEach(dir, ext string, render func(Dashboard) ([]byte, error)) error {
	ds, err := Dashboards()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dashboards: %w", err)
	}
	for _, d := range ds {
		b, err := render(d)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, d.UID+ext)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("dashboards: %w", err)
		}
	}
	return nil
}
