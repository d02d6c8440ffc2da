#!/usr/bin/env bash
# The fleet series for BENCHMARKS.md (after `scripts/services start` and
# `cargo build --release -p bloomgate-edge-fleet`; SECS=20 as recorded): shared feed at N = 1, 10, 100, 1000 (P = 10, upper tier),
# P = 1 and 50 at N = 100, and today's protocol at N = 1, 10, 100.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/target/release/edge-fleet
out=$root/docs/bench/edge-fleet
secs=${SECS:-30}
for n in 1 10 100 1000; do
  "$bin" --isolates $n --pops 10 --upper-tier --seconds $secs > "$out/shared-n$n-p10-upper.json"
done
for p in 1 50; do
  "$bin" --isolates 100 --pops $p --upper-tier --seconds $secs > "$out/shared-n100-p$p-upper.json"
done
"$bin" --isolates 100 --pops 50 --seconds $secs > "$out/shared-n100-p50-no-upper.json"
for n in 1 10 100; do
  "$bin" --isolates $n --pops 10 --seconds $secs --per-isolate > "$out/per-isolate-n$n.json"
done
