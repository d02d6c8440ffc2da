#!/usr/bin/env bash
# The fleet series for BENCHMARKS.md (after `scripts/services start` and
# `cargo build --release -p bloomgate-edge-fleet`; SECS=20 as recorded): the shared feed at
# N = 1, 10, 100, 1000 (P = 10, upper tier), P = 1 and 50 at N = 100 and P = 50 at N = 1000,
# no upper tier at P = 50, F = 10 filters at N = 1, 100, 1000; today's protocol at N = 1, 10,
# 100 and at N = 10 with F = 10. Each run prints its JSON (lag percentiles included).
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
"$bin" --isolates 1000 --pops 50 --upper-tier --seconds $secs > "$out/shared-n1000-p50-upper.json"
"$bin" --isolates 100 --pops 50 --seconds $secs > "$out/shared-n100-p50-no-upper.json"
for n in 1 100 1000; do
  "$bin" --isolates $n --pops 10 --filters 10 --upper-tier --seconds $secs > "$out/shared-n$n-p10-f10-upper.json"
done
for n in 1 10 100; do
  "$bin" --isolates $n --pops 10 --seconds $secs --per-isolate > "$out/per-isolate-n$n.json"
done
"$bin" --isolates 10 --pops 10 --filters 10 --seconds $secs --per-isolate > "$out/per-isolate-n10-f10.json"
