// Package deploy tests what operators deploy: the image (the root
// Dockerfile), the Kubernetes outputs of `cachewatch alerts --format
// prometheusrule` and `cachewatch dashboards --format configmap`, the Helm
// chart in helm/cachewatch-exporter and the monitoring mixin in ../mixin.
//
// It is a module of its own, as bench/ is: its tests decode every manifest
// strictly into prometheus-operator's and Kubernetes' own Go types and
// evaluate the mixin with go-jsonnet, dependencies that a user of the
// cachewatch library should not download. scripts/test.sh runs it.
package deploy
