#!/usr/bin/env bash
# qforge's --imatrix against llama-quantize --imatrix, tensor bytes: a `qforge synth --shape tiny`
# model (rows of 256 and 768, so every k-quant fits), its F32 GGUF written by qforge, an
# importance matrix made by llama-imatrix in both formats (GGUF and legacy .dat), then per type
# `llama-quantize [--pure] --imatrix` and `qforge quantize --export gguf --imatrix` of the same
# file; scripts/interop/gguf_tensor_diff.py compares every tensor. Exits 1 on any difference.
# Not part of the test run (needs a llama.cpp build: ninja -C /tmp/lcp-build llama-imatrix
# llama-quantize).
# env: QFORGE (build/qforge), LLAMA_BIN (/tmp/lcp-build/bin), WORK (/tmp/qforge-imatrix-bitexact)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
QFORGE=${QFORGE:-$ROOT/build/qforge}
LLAMA_BIN=${LLAMA_BIN:-/tmp/lcp-build/bin}
WORK=${WORK:-/tmp/qforge-imatrix-bitexact}
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$WORK"
head -c 20000 "$ROOT/../shared/fixtures/corpora/tinystories_valid_subset.txt" > "$WORK/calib.txt"
"$QFORGE" synth --shape tiny --layers 2 --dtype f32 -o "$WORK/tiny" --force -q > /dev/null
"$QFORGE" quantize "$WORK/tiny" -o "$WORK/f32.gguf" --export gguf --format f32 --force -q > /dev/null
for fmt in gguf dat; do
  "$LLAMA_BIN/llama-imatrix" -m "$WORK/f32.gguf" -f "$WORK/calib.txt" -o "$WORK/imatrix.$fmt" \
    --output-format $fmt -c 128 --no-ppl -t 2 > "$WORK/imatrix-$fmt.log" 2>&1
done
status=0
for fmt in gguf dat; do
  for t in q4_0 q4_k q5_k q6_k q4_k_m; do
    T=$(echo $t | tr a-z A-Z)
    pure=--pure
    [ $t = q4_k_m ] && pure=
    "$LLAMA_BIN/llama-quantize" $pure --imatrix "$WORK/imatrix.$fmt" "$WORK/f32.gguf" "$WORK/lq-$t.gguf" "$T" 2 \
      > "$WORK/lq-$t-$fmt.log" 2>&1
    "$QFORGE" quantize "$WORK/tiny" -o "$WORK/qf-$t.gguf" --export gguf --format $t \
      --imatrix "$WORK/imatrix.$fmt" --force -q > /dev/null
    if python3 "$ROOT/scripts/interop/gguf_tensor_diff.py" "$WORK/lq-$t.gguf" "$WORK/qf-$t.gguf" > "$WORK/diff-$t-$fmt.txt"; then
      echo "$t, imatrix .$fmt: $(grep -c '^same' "$WORK/diff-$t-$fmt.txt") tensors, all bytes equal"
    else
      echo "$t, imatrix .$fmt: DIFFERENT (see $WORK/diff-$t-$fmt.txt)"
      status=1
    fi
  done
done
exit $status
