#!/usr/bin/env bash
# Calibration benchmark: layer-by-layer calibration tokens/s of `qforge quantize --activations
# nvfp4` on a synthetic checkpoint next to `qforge bench` prefill tokens/s on the same model in
# the same run, then peak RSS of calibrating a 4-layer llama-8b against its size. Synthetic
# checkpoints have no tokenizer, so the fixture's small one is copied in (its ids are valid
# token ids of every synthetic vocabulary). Deletes the synthetic models at the end.
#   bench/calibration_bench.sh [shape=llama-1b] [samples=8] [seq=256] [build=build]
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:-llama-1b}; samples=${2:-8}; seq=${3:-256}; build=${4:-build}
qforge=$build/qforge
work=${BENCH_DIR:-/tmp/qforge-calib-bench}
fixtures=../shared/fixtures
tok=$fixtures/models/tinystories-656K-hf
calib=$fixtures/corpora/tinyshakespeare.txt
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

src="$work/$shape"
$qforge synth --shape "$shape" -o "$src" -q --force
cp "$tok"/tokenizer.json "$tok"/tokenizer_config.json "$tok"/special_tokens_map.json "$src"/
prefill=$($qforge bench "$src" --prompt "$seq" --gen 1 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tok_s"])')
/usr/bin/time -f "%M" -o "$work/rss" $qforge quantize "$src" -o "$work/out" --format nvfp4 \
  --activations nvfp4 --kv-cache fp8 --calib "$calib" --calib-samples "$samples" \
  --calib-seq "$seq" -q --json >"$work/q.json"
python3 - "$work/q.json" "$prefill" "$shape" <<'PY'
import json, sys
q = json.load(open(sys.argv[1])); prefill = float(sys.argv[2])
print(json.dumps({"shape": sys.argv[3], "calib_tokens": q["calib_tokens"],
  "calib_tokens_per_s": round(q["calib_tokens_per_second"], 1),
  "bench_prefill_tokens_per_s": round(prefill, 1),
  "calib_cost_vs_forward": round(prefill / q["calib_tokens_per_second"], 2) if q["calib_tokens_per_second"] else None,
  "activation_bytes": q["activation_bytes"], "peak_rss_bytes": q["peak_rss_bytes"]}))
PY
rm -rf "$src" "$work/out"

big="$work/llama-8b-4layers"
$qforge synth --shape llama-8b --layers 4 -o "$big" -q --force
cp "$tok"/tokenizer.json "$tok"/tokenizer_config.json "$tok"/special_tokens_map.json "$big"/
size=$(du -sb "$big" | cut -f1)
/usr/bin/time -f "%M" -o "$work/rss8" $qforge quantize "$big" -o "$work/out8" --format nvfp4 \
  --activations nvfp4 --calib "$calib" --calib-samples "$samples" --calib-seq "$seq" -q --json >"$work/q8.json"
python3 - "$work/q8.json" "$size" "$work/rss8" <<'PY'
import json, sys
q = json.load(open(sys.argv[1])); size = int(sys.argv[2]); rss = int(open(sys.argv[3]).read().split()[-1]) * 1024
print(json.dumps({"shape": "llama-8b --layers 4", "checkpoint_bytes": size, "peak_rss_bytes": rss,
  "rss_over_size": round(rss / size, 3), "activation_bytes": q["activation_bytes"],
  "calib_tokens_per_s": round(q["calib_tokens_per_second"], 1)}))
PY
