#!/usr/bin/env bash
# Runs every check and test of cachewatch, race detector on, after installing
# what the tests need on a fresh Debian machine (redis-server; prometheus for
# promtool and the end-to-end test's Prometheus; prometheus-alertmanager for
# amtool and the end-to-end test's Alertmanager; chromium for the demo report's
# headless-browser check; Prometheus 3, built with go install). Set
# CACHEWATCH_REQUIRE_REDIS=1 to turn "no Redis" skips into failures, as
# .ci/run does.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v promtool >/dev/null && command -v prometheus >/dev/null || need+=(prometheus)
command -v amtool >/dev/null && command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v chromium >/dev/null || need+=(chromium)
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing ${need[*]}: run 'sudo apt-get install ${need[*]}' (Redis-backed tests will skip)" >&2
  fi
fi

# Tools built from the Go module proxy live in a cached directory; each is
# built only where it is missing. The directory comes after the system's in
# PATH, so that `prometheus` stays Debian's for the other tests. (The chart's
# tests run Helm's lint and template code from its Go packages, in deploy/.)
tools=${CACHEWATCH_TOOLS:-$HOME/.cache/cachewatch/tools}
export PATH="$PATH:$tools"
mkdir -p "$tools"
# Prometheus 3, with its OTLP receiver, for the OTLP end-to-end test, which
# is told where it is. remove_all_sd leaves out every service discovery and
# its cloud SDKs: the test only scrapes static targets.
export CACHEWATCH_PROMETHEUS3="$tools/prometheus"
if [ ! -x "$CACHEWATCH_PROMETHEUS3" ]; then
  echo "building prometheus 3 into $tools (a few minutes, once)"
  GOBIN="$tools" go install -tags remove_all_sd github.com/prometheus/prometheus/cmd/prometheus@v0.316.0
fi

# sloth validates the SLO spec cachewatch alerts writes (alerts' tests).
if ! command -v sloth >/dev/null; then
  echo "building sloth into $tools (a few minutes, once)"
  GOBIN="$tools" go install github.com/slok/sloth/cmd/sloth@v0.16.0
fi

# Nested modules: bench/ (peer libraries compared in benchmarks) and deploy/
# (the image, chart, Kubernetes outputs and mixin, tested against
# prometheus-operator's, Kubernetes' and go-jsonnet's Go packages).
modules=(.)
for m in bench deploy; do [ -f "$m/go.mod" ] && modules+=("$m"); done

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
# A test binary's timeout counts its build steps too (deploy's TestMain
# builds the binary as the Dockerfile does, from an empty cache on a fresh
# machine): 10 minutes is too short for a shared 2-core machine.
for m in "${modules[@]}"; do
  (cd "$m" && go vet ./... && go test -race -count=1 -timeout 25m "$@" ./...)
done
# The race detector makes every frame larger, so the test of the stampede
# callers' stack budget is built without it, in a pass of its own.
go test -count=1 -run '^TestCrowdCallersKeepTheirFirstStack$' ./instrument/
