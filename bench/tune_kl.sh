#!/usr/bin/env bash
# The README's block-wise tuning table: each format's max (RTN), its best post-training
# algorithm and --algo ...tune from those inits, weight-only and (NVFP4) W4A4, on both fixture
# models; ModelOpt export, calibration tinyshakespeare.txt 64 windows x 256 tokens, seed 0,
# `qforge eval kl` on the first 30000 characters of tinystories_valid_subset.txt (the protocol
# of four_over_six_kl.sh). Prints one Markdown row per model, format and algorithm: PPL of the
# quantized model, mean KL, p99 KL, top-1 agreement, and the tuning seconds. About 40 minutes
# on two busy cores (each tuned run 2-4 minutes).
#   bench/tune_kl.sh [build=build] [extra quantize flags...]   e.g. --tune-iters 400
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
extra=("$@")
qforge=$build/qforge
work=${BENCH_DIR:-/tmp/qforge-tune-kl}
fixtures=../shared/fixtures
calib=$fixtures/corpora/tinyshakespeare.txt
text=$fixtures/corpora/tinystories_valid_subset.txt
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
models=${MODELS:-"stories260K-hf tinystories-656K-hf"}
# format|algo[|activations]
runs=${RUNS:-"nvfp4|max nvfp4|local_hessian+gptq nvfp4|tune nvfp4|local_hessian+gptq+tune
nvfp4|max|nvfp4 nvfp4|local_hessian+gptq|nvfp4 nvfp4|tune|nvfp4 nvfp4|local_hessian+gptq+tune|nvfp4
mxfp4|max mxfp4|gptq mxfp4|tune mxfp4|gptq+tune
int4|max int4|gptq int4|tune int4|gptq+tune"}

echo "| model | format | algo | PPL | mean KL | p99 KL | top-1 | tune s |"
echo "|---|---|---|---|---|---|---|---|"
for model in $models; do
  for run in $runs; do
    IFS='|' read -r format algo act <<<"$run"
    flags=(--format "$format" --algo "$algo" -q --json --force --threads 2)
    [[ $algo != max ]] && flags+=(--calib "$calib" --calib-samples 64 --calib-seq 256 --seed 0)
    [[ -n ${act:-} ]] && flags+=(--activations "$act")
    [[ $format == int4 ]] && flags+=(--group-size 32)  # the fixtures' rows are 64 wide
    [[ $algo == *tune ]] && flags+=("${extra[@]}")
    $qforge quantize "$fixtures/models/$model" -o "$work/out" "${flags[@]}" >"$work/q.json"
    $qforge eval kl "$fixtures/models/$model" "$work/out" --text "$text" --max-chars 30000 \
      --json >"$work/kl.json"
    python3 - "$model" "$format${act:+ A-$act}" "$algo" "$work/q.json" "$work/kl.json" <<'PY'
import json, sys
model, fmt, algo = sys.argv[1:4]
q, k = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
secs = sum(l["seconds"] for l in q.get("tuned_layers", []))
print(f"| {model} | {fmt} | `{algo}` | {k['ppl_base']:.3f} → {k['ppl_quant']:.3f} | "
      f"{k['kl_mean']:.4f} | {k['kl_p99']:.3f} | {100.0 * k['top1']:.1f}% | "
      f"{secs:.1f} |" if secs else
      f"| {model} | {fmt} | `{algo}` | {k['ppl_base']:.3f} → {k['ppl_quant']:.3f} | "
      f"{k['kl_mean']:.4f} | {k['kl_p99']:.3f} | {100.0 * k['top1']:.1f}% | - |")
PY
  done
done
