package alerts

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/internal/kubemeta"
)

// PrometheusRuleFile is the file name WritePrometheusRule writes in a
// directory.
const PrometheusRuleFile = "cachewatch-prometheusrule.yaml"

// DefaultPrometheusRuleName names the PrometheusRule object when
// PrometheusRuleOptions.Name is empty.
const DefaultPrometheusRuleName = "cachewatch"

// PrometheusRuleOptions are the metadata of the PrometheusRule object. The
// zero value names it "cachewatch", in the namespace kubectl applies it to.
type PrometheusRuleOptions struct {
	// Name of the object; empty means DefaultPrometheusRuleName.
	Name string
	// Namespace of the object; empty leaves it to kubectl.
	Namespace string
	// Labels the Prometheus resource's ruleSelector matches, e.g.
	// release=kube-prometheus-stack.
	Labels map[string]string
}

// PrometheusRule renders the groups as a prometheus-operator
// monitoring.coreos.com/v1 PrometheusRule: the rule file's groups under
// spec. A name, namespace or label the API server would refuse is an
// error.
func PrometheusRule(groups []Group, opts PrometheusRuleOptions) ([]byte, error) {
	meta := kubemeta.Meta{Name: opts.Name, Namespace: opts.Namespace, Labels: opts.Labels}
	if meta.Name == "" {
		meta.Name = DefaultPrometheusRuleName
	}
	spec, err := ruleFileMap(groups)
	if err != nil {
		return nil, err
	}
	doc, err := kubemeta.Manifest("monitoring.coreos.com/v1", "PrometheusRule", meta, map[string]any{"spec": spec})
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return append([]byte(generatedHeader), doc...), nil
}

// ruleFileMap is the rule file of groups as plain maps and lists, the form
// the PrometheusRule's spec and the rule template embed.
func ruleFileMap(groups []Group) (map[string]any, error) {
	data, err := PrometheusRules(groups)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return nil, fmt.Errorf("alerts: decode rule file: %w", err)
	}
	return m, nil
}
