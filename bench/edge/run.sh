#!/usr/bin/env bash
# tailor-edge benchmark (issue 5): decision time per connection, and
# handshake + first-response latency and throughput of tailor-edge with
# per-connection selection against the same binary with --static (one
# configuration), at the same load on loopback. Writes bench/edge/results/.
#
#   bench/edge/run.sh                 # defaults: 24 rounds x 1000 h2 (500 h3) connections per server, 4 workers
#   ROUNDS=4 CONNS=500 bench/edge/run.sh
#   AA=static bench/edge/run.sh       # A/A: both servers --static (the harness's own noise)
#   SCHEDULE=abba bench/edge/run.sh   # one server at a time (default: interleaved per connection)
#   PROFILE=DIR PROTOS=h2 bench/edge/run.sh  # CPU profiles DIR/{selection,static}.pprof (500 Hz), h2 only
#   EDGE_ARGS=--apply-socket=false bench/edge/run.sh  # extra tailor-edge flags for both servers
#
# Loopback only; every load loop is bounded in count (ROUNDS x CONNS
# connections, 6 h2load runs of 20000 requests) and in time (test timeout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$here/results}
mkdir -p "$out"
if [ -n "${PROFILE:-}" ]; then PROFILE=$(realpath -m "$PROFILE"); mkdir -p "$PROFILE"; fi
cd "$repo/edge"
{
  echo "# $(date -u +%FT%TZ) $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo nogit) $(go version | cut -d' ' -f3) nproc=$(nproc)"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/env.txt"

echo "== decision time per connection (classify: JA3+JA4, device map, LPM, sampling)"
go test -count=1 -run '^$' -bench 'Decide' -benchtime 300000x ./internal/edge/ | tee "$out/decide.txt"

echo "== selection vs static: new connection + first response (h2, h3), h2load keep-alive, Chromium through a 100 ms RTT proxy"
TAILOR_EDGE_BENCH=1 TAILOR_EDGE_BENCH_OUT="$out/load.json" \
TAILOR_EDGE_BENCH_ROUNDS=${ROUNDS:-24} TAILOR_EDGE_BENCH_CONNS=${CONNS:-1000} TAILOR_EDGE_BENCH_WORKERS=${WORKERS:-4} \
TAILOR_EDGE_BENCH_SCHEDULE=${SCHEDULE:-interleaved} TAILOR_EDGE_BENCH_AA=${AA:-} TAILOR_EDGE_BENCH_PROTOS=${PROTOS:-} \
TAILOR_EDGE_BENCH_PROFILE=${PROFILE:-} TAILOR_EDGE_BENCH_ARGS=${EDGE_ARGS:-} \
  go test -count=1 -timeout 30m -run '^(TestBenchLoad|TestChromiumRoundTrips)$' -v ./cmd/tailor-edge/ 2>&1 | grep -v -e 'tailor-edge: 20' -e 'cannot set cpu profile rate' | tee "$out/load.txt"
if [ -n "${PROFILE:-}" ]; then # where each server's CPU went, and the tailor-edge functions alone
  for m in selection static; do
    { go tool pprof -top -cum -nodecount=40 "$PROFILE/$m.pprof"
      echo; echo "# tailor-edge functions (all nodes)"
      go tool pprof -top -cum -nodefraction=0 -edgefraction=0 -nodecount=100000 -show='tailor/edge/internal/edge' "$PROFILE/$m.pprof"
    } > "$out/profile-$m.txt" 2>/dev/null || echo "pprof $m failed" >&2
  done
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/env.txt"
cat "$out/env.txt"
