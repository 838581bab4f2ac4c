#!/usr/bin/env bash
# Checks that a refactor changes no output byte: runs the same quantize commands with two qforge
# binaries (OLD, e.g. built from the previous commit in a worktree, and NEW) on the fixture
# models and compares every output file with cmp. Prints one line per case and exits non-zero
# on any difference.
#   scripts/dev/same_outputs.sh OLD_QFORGE NEW_QFORGE
set -uo pipefail
old=$1
new=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fx=$root/../shared/fixtures
calib=$fx/corpora/tinyshakespeare.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cases=(
  "--format nvfp4" "--format mxfp4" "--format fp8" "--format int4 --group-size 32"
  "--format int4 --group-size channel" "--format nvfp4 --quantize-lm-head" "--format nvfp4 --algo mse"
  "--format nvfp4 --activations nvfp4 --calib $calib --calib-samples 8 --calib-seq 64"
  "--format fp8 --activations fp8 --kv-cache fp8 --calib $calib --calib-samples 8 --calib-seq 64"
  "--format nvfp4 --algo awq --calib $calib --calib-samples 8 --calib-seq 64"
  "--format int4 --group-size 32 --algo gptq --calib $calib --calib-samples 8 --calib-seq 64"
  "--format nvfp4 --algo local_hessian+gptq --calib $calib --calib-samples 8 --calib-seq 64"
  "--format nvfp4 --algo four_over_six --quantize-lm-head"
  "--format nvfp4 --algo four_over_six+gptq --calib $calib --calib-samples 8 --calib-seq 64"
  "--auto --target-bits 5 --formats nvfp4,nvfp4:4o6,fp8 --calib $calib --calib-samples 8 --calib-seq 64"
  "--format int8 --activations int8 --algo smoothquant --calib $calib --calib-samples 8 --calib-seq 64"
  "--format nvfp4 --calib-quantized-inputs --algo awq+gptq --calib $calib --calib-samples 8 --calib-seq 64"
  "--auto --target-bits 6 --calib $calib --calib-samples 8 --calib-seq 64"
)
status=0
for model in ${MODELS:-stories260K-hf tinystories-656K-hf}; do
  for export in modelopt compressed-tensors; do
    for c in "${cases[@]}"; do
      rm -rf "$work/a" "$work/b"
      # shellcheck disable=SC2086
      "$old" quantize "$fx/models/$model" -o "$work/a" --export $export $c -q >/dev/null 2>"$work/err_a"
      ra=$?
      # shellcheck disable=SC2086
      "$new" quantize "$fx/models/$model" -o "$work/b" --export $export $c -q >/dev/null 2>"$work/err_b"
      rb=$?
      label="$model $export ${c//$calib/CALIB}"
      if [ $ra -ne 0 ] || [ $rb -ne 0 ]; then
        if [ $ra -ne $rb ] || ! cmp -s "$work/err_a" "$work/err_b"; then
          echo "DIFFERENT exit: $label ($ra vs $rb): $(head -c 200 "$work/err_b")"; status=1
        else
          echo "same (both refused): $label"
        fi
        continue
      fi
      if diff -r "$work/a" "$work/b" >/dev/null; then
        echo "same: $label ($(du -sb "$work/b" | cut -f1) bytes)"
      else
        echo "DIFFERENT: $label"; diff -rq "$work/a" "$work/b"; status=1
      fi
    done
  done
done
exit $status
