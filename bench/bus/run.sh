#!/usr/bin/env bash
# Scale-out benchmarks (issue 15), on a machine with nothing else running:
#  1. telemetry records/s through the bus into 1, 2 and 3 manager shards (bench/bus/throughput.py, one run);
#  2. table propagation from publication to applied at 100 simulated edges (Go: BenchmarkTablePropagation).
# Results: bench/bus/results/{throughput,propagation}.json with the run's metadata.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p bench/bus/results
out="$PWD/bench/bus/results"
meta() { printf '{"date": "%s", "commit": "%s", "load1_start": %s, "cpus": %s, "nats_server": "%s"}' \
  "$(date -u +%FT%TZ)" "$(git rev-parse --short HEAD)" "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)" \
  "$(nats-server --version 2>/dev/null || /usr/sbin/nats-server --version)"; }
if [ "${1:-}" != "--propagation-only" ]; then
  PYTHONPATH=src .venv/bin/python bench/bus/throughput.py --out "$out/throughput.json"
fi
meta > "$out/propagation.meta.json"
(cd edge && TAILOR_BENCH_EDGES="${TAILOR_BENCH_EDGES:-100}" TAILOR_BENCH_VERSIONS="${TAILOR_BENCH_VERSIONS:-50}" \
  TAILOR_BENCH_OUT="$out/propagation.json" go test -count=1 -run '^$' -bench BenchmarkTablePropagation -benchtime 1x ./internal/bus/)
echo "load1 at the end: $(cut -d' ' -f1 /proc/loadavg)"
cat "$out/propagation.json"
