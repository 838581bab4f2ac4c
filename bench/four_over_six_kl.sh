#!/usr/bin/env bash
# The README's Four Over Six table: NVFP4 weight-only (ModelOpt export, default GPU scale
# division) with --algo max, mse, local_hessian, four_over_six, gptq, local_hessian+gptq and
# four_over_six+gptq on both fixture models, and max / four_over_six with NVFP4 activations
# (W4A4: ModelOpt's NVFP4_FOUR_OVER_SIX_CFG); calibration (the algorithms that use it)
# tinyshakespeare.txt, 64 windows x 256 tokens, seed 0; `qforge eval kl` on the first 30000
# characters of tinystories_valid_subset.txt. Prints one Markdown row per model and algorithm:
# PPL of the quantized model (base in the header), mean KL, 99th-percentile KL, top-1 agreement,
# and the share of blocks that took M=4. About 2 minutes on two busy cores.
#   bench/four_over_six_kl.sh [build=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
qforge=$build/qforge
work=${BENCH_DIR:-/tmp/qforge-46-kl}
fixtures=../shared/fixtures
calib=$fixtures/corpora/tinyshakespeare.txt
text=$fixtures/corpora/tinystories_valid_subset.txt
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "| model | algo | PPL | mean KL | p99 KL | top-1 | M=4 blocks |"
echo "|---|---|---|---|---|---|---|"
for model in stories260K-hf tinystories-656K-hf; do
  for algo in max mse local_hessian four_over_six gptq local_hessian+gptq four_over_six+gptq \
              "max W4A4" "four_over_six W4A4"; do
    flags=(--format nvfp4 --algo "${algo% W4A4}" -q --json --force --threads 2)
    case $algo in
      max|mse|four_over_six) ;;
      *) flags+=(--calib "$calib" --calib-samples 64 --calib-seq 256 --seed 0) ;;
    esac
    [[ $algo == *W4A4 ]] && flags+=(--activations nvfp4)
    $qforge quantize "$fixtures/models/$model" -o "$work/out" "${flags[@]}" >"$work/q.json"
    $qforge eval kl "$fixtures/models/$model" "$work/out" --text "$text" --max-chars 30000 \
      --json >"$work/kl.json"
    python3 - "$model" "$algo" "$work/q.json" "$work/kl.json" <<'PY'
import json, sys
model, algo = sys.argv[1], sys.argv[2]
q, k = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
f = q.get("four_over_six")
m4 = f"{100.0 * f['m4_blocks'] / f['blocks']:.1f}%" if f else "-"
label = f"`{algo[:-5]}` + `--activations nvfp4`" if algo.endswith(" W4A4") else f"`{algo}`"
print(f"| {model} | {label} | {k['ppl_base']:.3f} → {k['ppl_quant']:.3f} | {k['kl_mean']:.4f} | "
      f"{k['kl_p99']:.3f} | {100.0 * k['top1']:.1f}% | {m4} |")
PY
  done
done
