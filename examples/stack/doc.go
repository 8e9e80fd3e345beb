// Package stack holds no code: it is the example stack of docker-compose.yml
// (Redis, cachewatch demo and exporter, Prometheus with the generated rules,
// Alertmanager with the generated routing, Grafana with the generated
// dashboards). Its tests check the stack's configuration with the real
// promtool and amtool and check that every mount, port and data source UID
// in it refers to something that exists, since Docker cannot run in CI.
package stack
