#!/usr/bin/env bash
# tailor-agent benchmarks (root; bounded: about 1 minute). Writes a JSON result with run metadata.
#   bench/agent/run.sh [out.json]
# 1) LPM lookup cost at 1k/10k/100k prefixes (XDP BPF_PROG_RUN + bpf_loop, loop baseline subtracted)
# 2) loopback connections/s without and with the agent (telemetry on, JSON-encoded), alternating runs,
#    events submitted/received/lost, and the per-callback cost histogram (p50/p99 of PASSIVE_ESTABLISHED).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/tailor-agent-bench-$(date +%Y%m%d-%H%M%S).json}"
bin="$(mktemp -d)/tailor-agent"
trap 'rm -rf "$(dirname "$bin")"' EXIT
(cd "$root/edge" && go build -o "$bin" ./cmd/tailor-agent)
lpm="$(timeout 300 "$bin" bench lpm --sizes 1000,10000,100000 --loops 1000 --repeat 2000)"
conn="$(timeout 300 "$bin" bench conn --clients 4 --duration 4s)"
cat > "$out" <<JSON
{"meta": {"git_commit": "$(git -C "$root" rev-parse HEAD)", "dirty": $( [ -n "$(git -C "$root" status --porcelain)" ] && echo true || echo false ),
          "date": "$(date -u +%FT%TZ)", "kernel": "$(uname -r)", "cpus": $(nproc), "host": "$(hostname)"},
 "lpm": $lpm,
 "conn": $conn}
JSON
echo "$out"
cat "$out"
