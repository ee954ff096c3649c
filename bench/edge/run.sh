#!/usr/bin/env bash
# tailor-edge benchmark (issue 5): decision time per connection, and
# handshake + first-response latency and throughput of tailor-edge with
# per-connection selection against the same binary with --static (one
# configuration), at the same load on loopback. Writes bench/edge/results/.
#
#   bench/edge/run.sh                 # defaults: 8 rounds x 1000 connections, 4 workers
#   ROUNDS=4 CONNS=500 bench/edge/run.sh
#
# Loopback only; every load loop is bounded in count (ROUNDS x CONNS
# connections, 6 h2load runs of 20000 requests) and in time (test timeout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$here/results}
mkdir -p "$out"
cd "$repo/edge"
{
  echo "# $(date -u +%FT%TZ) $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo nogit) $(go version | cut -d' ' -f3) nproc=$(nproc)"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/env.txt"

echo "== decision time per connection (classify: JA3+JA4, device map, LPM, sampling)"
go test -count=1 -run '^$' -bench 'Decide' -benchtime 300000x ./internal/edge/ | tee "$out/decide.txt"

echo "== selection vs static: new connection + first response (h2, h3), h2load keep-alive, Chromium through a 100 ms RTT proxy"
TAILOR_EDGE_BENCH=1 TAILOR_EDGE_BENCH_OUT="$out/load.json" \
TAILOR_EDGE_BENCH_ROUNDS=${ROUNDS:-8} TAILOR_EDGE_BENCH_CONNS=${CONNS:-1000} TAILOR_EDGE_BENCH_WORKERS=${WORKERS:-4} \
  go test -count=1 -timeout 30m -run '^(TestBenchLoad|TestChromiumRoundTrips)$' -v ./cmd/tailor-edge/ 2>&1 | grep -v 'tailor-edge: 20' | tee "$out/load.txt"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/env.txt"
cat "$out/env.txt"
