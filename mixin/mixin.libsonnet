// The cachewatch monitoring mixin: the alerting and recording rules of
// `cachewatch alerts` and the Grafana dashboards of `cachewatch dashboards`.
// Vendor it with jsonnet-bundler (jb install github.com/cachewatch/cachewatch/mixin@main)
// and override _config (config.libsonnet lists every key with its default;
// README.md says more):
//
//   local cachewatch = (import 'github.com/cachewatch/cachewatch/mixin/mixin.libsonnet') + {
//     _config+:: { serviceSelector: 'job=~"api|worker"', lockContentionWarning: 0.1 },
//   };
//
// Each rule group keeps its recording rules and the alerts that read them
// together, so that an alert sees the value of the same evaluation: all
// groups are in prometheusAlerts, and prometheusRules adds none.
local template = import 'cachewatch-rules.template.json';
local lib = import 'lib/template.libsonnet';

(import 'config.libsonnet') + {
  prometheusAlerts+:: {
    groups+: lib.groups(template, $._config),
  },
  prometheusRules+:: {
    groups+: [],
  },
  grafanaDashboards+:: import 'dashboards.libsonnet',
}
