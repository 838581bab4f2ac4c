#!/usr/bin/env bash
# Sensitivity benchmark: wall time and peak RSS of `qforge sensitivity` (the proxy, no --exact)
# on a synthetic BF16 checkpoint next to one calibration pass with the same --calib settings
# (the calibration of `qforge quantize --activations nvfp4`, its `calib_seconds`), in the same
# run. The issue's target: sensitivity at most 3x one calibration pass on llama-8b --layers 4.
# Synthetic checkpoints have no tokenizer, so the fixture's small one is copied in (its ids are
# valid token ids of every synthetic vocabulary). Prints one JSON object; deletes its files.
#   bench/sensitivity_bench.sh [shape=llama-8b] [layers=4] [samples=8] [seq=128]
#                              [formats=nvfp4,fp8] [build=build]
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:-llama-8b}; layers=${2:-4}; samples=${3:-8}; seq=${4:-128}; formats=${5:-nvfp4,fp8}
build=${6:-build}
qforge=$build/qforge
work=${BENCH_DIR:-/tmp/qforge-sens-bench}
fixtures=../shared/fixtures
tok=$fixtures/models/tinystories-656K-hf
calib=$fixtures/corpora/tinyshakespeare.txt
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

src="$work/$shape-$layers"
$qforge synth --shape "$shape" --layers "$layers" --dtype bf16 -o "$src" -q --force
cp "$tok"/tokenizer.json "$tok"/tokenizer_config.json "$tok"/special_tokens_map.json "$src"/
size=$(du -sb "$src" | cut -f1)
cat "$src"/*.safetensors >/dev/null  # warm page cache for both contenders
calib_flags=(--calib "$calib" --calib-samples "$samples" --calib-seq "$seq")

now() { date +%s.%N; }
t0=$(now)
/usr/bin/time -f "%M" -o "$work/rss_q" $qforge quantize "$src" -o "$work/out" --format nvfp4 \
  --activations nvfp4 "${calib_flags[@]}" -q --json >"$work/q.json"
t1=$(now)
rm -rf "$work/out"
/usr/bin/time -f "%M" -o "$work/rss_s" $qforge sensitivity "$src" --formats "$formats" \
  "${calib_flags[@]}" -q --json >"$work/s.json"
t2=$(now)

python3 - "$work" "$size" "$shape --layers $layers" "$formats" "$t0" "$t1" "$t2" <<'PY'
import json, sys
w, size, shape, formats = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t0, t1, t2 = map(float, sys.argv[5:8])
q = json.load(open(w + "/q.json")); s = json.load(open(w + "/s.json"))
rss = lambda f: int(open(w + "/" + f).read().split()[-1]) * 1024
calib = q["calib_seconds"]
print(json.dumps({
  "shape": shape, "checkpoint_bytes": size, "formats": formats,
  "calib_tokens": s["calib_tokens"],
  "calibration_pass_seconds": round(calib, 3),          # quantize's layer-by-layer pass
  "sensitivity_wall_seconds": round(t2 - t1, 3),        # whole command: load, pass, proxy
  "sensitivity_calib_seconds": round(s["calib_seconds"], 3),
  "sensitivity_proxy_seconds": round(s["proxy_seconds"], 3),
  "ratio_sensitivity_wall_over_calibration": round((t2 - t1) / calib, 3) if calib else None,
  "ratio_sensitivity_pass_and_proxy_over_calibration":
      round((s["calib_seconds"] + s["proxy_seconds"]) / calib, 3) if calib else None,
  "quantize_wall_seconds": round(t1 - t0, 3),
  "sensitivity_peak_rss_bytes": rss("rss_s"), "quantize_peak_rss_bytes": rss("rss_q"),
}))
PY
