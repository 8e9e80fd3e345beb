#!/usr/bin/env bash
# Runs ./scripts/test.sh several times in a row (default 5) with two CPU hogs
# beside it, as a busy CI machine would be, and stops at the first failure.
# Not part of .ci/run: it takes several times as long as one run.
#
#   ./scripts/stress-test.sh [runs] [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-5}
shift || true

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in 1 2; do
  yes >/dev/null &
  hogs+=($!)
done

for ((i = 1; i <= runs; i++)); do
  echo "== run $i of $runs ($(date -u +%H:%M:%S) UTC), CPU hogs: ${hogs[*]}"
  if ! ./scripts/test.sh "$@"; then
    echo "== run $i of $runs failed" >&2
    exit 1
  fi
done
echo "== $runs of $runs runs passed under load"
