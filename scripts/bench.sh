#!/usr/bin/env bash
# Runs cachewatch's benchmarks beside its peers and prints the comparison as
# tables (docs/benchmarks.md explains each one and records the reference
# figures):
#
#   - BenchmarkStampede: cachewatch, rueidisaside, sturdyc and go-redis/cache
#     on every shape (4 to 64 processes, 1 or 100 hot keys, spread arrivals, a
#     slow loader, a loader failing on the stale or on the cold crowd), in
#     worker processes against a throwaway redis-server; its rounds
#     interleaved (one run of every shape and variant per round);
#   - BenchmarkStampedeHolderDeath: cachewatch, rueidisaside and
#     lock-then-poll when the process loading a cold key is killed mid-load;
#   - the hook's overhead: in process (BenchmarkHookOverhead, BenchmarkHookCost)
#     and on loopback beside go-redis's redisotel (BenchmarkHookLoopback);
#   - lock acquire beside bsm/redislock and redsync (BenchmarkLockAcquire);
#   - the key-group classifier (BenchmarkClassify).
#
# Default: one round of each. A single round shows the shape of the
# comparison (loader calls and failures are exact) but its latencies move by
# several percent from run to run.
# --full: the rounds the reference figures use (stampede: 3 rounds of 5
# iterations, with pubsub-floor as the reference for the hop between processes;
# holder death: 10 kills; 5 to 20 rounds of the others).
#
# Needs redis-server (installed with apt-get when missing and running as root,
# as scripts/test.sh does). The raw `go test -bench` output is kept in a file
# (its path is printed; CACHEWATCH_BENCH_OUT sets it) for benchstat or a
# later comparison. Run nothing heavy beside it: the processes share the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: $0 [--full]" >&2; exit 2 ;;
esac

if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing redis-server"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  else
    echo "missing redis-server: run 'sudo apt-get install redis-server'" >&2
    exit 1
  fi
fi
# Every benchmark starts its own server; none may skip for want of one.
export CACHEWATCH_REQUIRE_REDIS=1
unset REDIS_ADDR

if ((full)); then
  variants='cachewatch|rueidisaside|sturdyc|go-redis-cache|pubsub-floor'
  stampede=(-test.benchtime 5x)
  stampede_rounds=3
  death=(-test.benchtime 10x)
  hooks=(-test.benchtime 20000x -test.count 5)
  loopback=(-test.benchtime 20000x -test.count 6)
  lock=(-test.benchtime 2000x -test.count 20)
  classify=(-test.count 5)
else
  variants='cachewatch|rueidisaside|sturdyc|go-redis-cache'
  stampede=(-test.benchtime 1x)
  stampede_rounds=1
  death=(-test.benchtime 2x)
  hooks=(-test.benchtime 20000x -test.count 1)
  loopback=(-test.benchtime 10000x -test.count 1)
  lock=(-test.benchtime 2000x -test.count 1)
  classify=(-test.benchtime 1000000x -test.count 1)
fi

out=${CACHEWATCH_BENCH_OUT:-$(mktemp "${TMPDIR:-/tmp}/cachewatch-bench.XXXXXX")}
# Stderr apart: go test prints a result's name before the benchmark runs and
# its figures after, so a line a worker process logs meanwhile would split
# the result in two, and benchtable and benchstat would lose it.
log=$out.stderr
: >"$out"
: >"$log"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

start=$SECONDS
echo "building the benchmarks"
(cd bench && go test -c -o "$bin/bench.test" .)
go test -c -o "$bin/hooks.test" ./hooks
go test -c -o "$bin/keygroup.test" ./keygroup
echo "built in $((SECONDS - start)) s"

# run DIR BINARY LABEL ARGS…: runs one benchmark binary from its package's
# directory (as go test does), appending its output to $out and its
# stderr to $log.
run() {
  local dir=$1 test=$2 label=$3
  shift 3
  echo "running $label"
  if ! (cd "$dir" && "$bin/$test" -test.run '^$' -test.benchmem "$@") >>"$out" 2>>"$log"; then
    echo "$label failed; the end of its output and of its stderr:" >&2
    tail -n 30 "$out" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

for ((round = 1; round <= stampede_rounds; round++)); do
  run bench bench.test "BenchmarkStampede (${variants//|/, }), round $round of $stampede_rounds" \
    -test.bench "^BenchmarkStampede\$/.*/^($variants)\$" -test.timeout 6h "${stampede[@]}"
done
run bench bench.test "BenchmarkStampedeHolderDeath (cachewatch, rueidisaside, lock-then-poll)" \
  -test.bench '^BenchmarkStampedeHolderDeath$' -test.timeout 2h "${death[@]}"
run hooks hooks.test "BenchmarkHookOverhead, BenchmarkHookCost" \
  -test.bench 'BenchmarkHook(Overhead|Cost)' "${hooks[@]}"
run bench bench.test "BenchmarkHookLoopback (interleaved)" \
  -test.bench 'BenchmarkHookLoopback/.*/interleaved$' "${loopback[@]}"
run bench bench.test "BenchmarkLockAcquire" \
  -test.bench 'BenchmarkLockAcquire' "${lock[@]}"
run keygroup keygroup.test "BenchmarkClassify" \
  -test.bench 'BenchmarkClassify' "${classify[@]}"

echo
go run "$root/scripts/benchtable.go" <"$out"
echo
echo "raw output: $out"
if [ -s "$log" ]; then
  echo "logged on stderr: $log ($(wc -l <"$log") lines)"
else
  rm -f "$log"
fi
echo "took $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
