// Package kubemeta writes Kubernetes manifests: the metadata of an object,
// checked against the API server's rules for names and labels, and the
// object as YAML. Packages alerts and dashboards use it for their
// PrometheusRule and ConfigMap outputs.
package kubemeta

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrInvalid is wrapped by every error about a name, namespace, label or
// annotation the API server would refuse.
var ErrInvalid = errors.New("invalid Kubernetes metadata")

// Meta is an object's metadata. Empty fields are left out.
type Meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	qualified    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// Validate reports the first field the API server would refuse: the name
// must be a DNS subdomain, the namespace a DNS label, label and annotation
// keys qualified names, label values at most 63 characters of the same
// alphabet.
func (m Meta) Validate() error {
	if len(m.Name) > 253 || !dnsSubdomain.MatchString(m.Name) {
		return fmt.Errorf("%w: name %q: lower-case letters, digits, '-' and '.', at most 253", ErrInvalid, m.Name)
	}
	if m.Namespace != "" && (len(m.Namespace) > 63 || !dnsLabel.MatchString(m.Namespace)) {
		return fmt.Errorf("%w: namespace %q: lower-case letters, digits and '-', at most 63", ErrInvalid, m.Namespace)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
		if err := checkKey("label", k); err != nil {
			return err
		}
		if v := m.Labels[k]; v != "" && (len(v) > 63 || !qualified.MatchString(v)) {
			return fmt.Errorf("%w: label %s=%q: the value must be at most 63 letters, digits, '-', '_' or '.'", ErrInvalid, k, v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Annotations)) {
		if err := checkKey("annotation", k); err != nil {
			return err
		}
	}
	return nil
}

// checkKey checks a label or annotation key: [prefix/]name, the prefix a
// DNS subdomain, the name a qualified name of at most 63 characters.
func checkKey(what, key string) error {
	prefix, name, found := strings.Cut(key, "/")
	if !found {
		prefix, name = "", key
	}
	if (found && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix))) || len(name) > 63 || !qualified.MatchString(name) {
		return fmt.Errorf("%w: %s key %q: [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.'", ErrInvalid, what, key)
	}
	return nil
}

// object is a manifest's top level: the type, the metadata, and the rest
// of the object (spec or data) inlined after them.
type object struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Metadata   Meta           `yaml:"metadata"`
	Rest       map[string]any `yaml:",inline"`
}

// Manifest renders one object as a YAML document: apiVersion, kind,
// metadata, then rest's keys (spec, data, …) in sorted order. It fails when
// m does not validate.
func Manifest(apiVersion, kind string, m Meta, rest map[string]any) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, m.Name, err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(object{APIVersion: apiVersion, Kind: kind, Metadata: m, Rest: rest}); err != nil {
		return nil, fmt.Errorf("%s %s: encode yaml: %w", kind, m.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("%s %s: encode yaml: %w", kind, m.Name, err)
	}
	return buf.Bytes(), nil
}
