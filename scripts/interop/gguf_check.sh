#!/usr/bin/env bash
# Checks a qforge-written GGUF with the `gguf` Python package (llama.cpp's gguf-py), in a pinned
# throwaway venv outside the repository: writes the sample of
# tests/io/gguf_interop_sample_test.cpp (every type qforge produces, with its own dequantization
# beside each tensor) and runs gguf_check.py on it; then exports the fixture Llamas with
# `qforge quantize --export gguf` in every GGUF format (and a synthetic llama in the k-quants) and
# runs gguf_llama_check.py on each (the keys llama.cpp requires, llama tensor names and shapes,
# gguf-py dequantization). Not part of the default test run.
#
# usage: scripts/interop/gguf_check.sh   (VENV=... to place the venv; default /work/gguf-venv;
#        FIXTURES=... the fixtures directory, default ../shared/fixtures; needs build/qforge and
#        build/qforge_tests)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
source "$root/scripts/interop/venvs.sh"
venv="${VENV:-/work/gguf-venv}"
setup_venv "$venv" "${PINS_GGUF[@]}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
QFORGE_GGUF_SAMPLE="$tmp/sample.gguf" "$root/build/qforge_tests" \
  --gtest_filter='GgufInteropSample.*' >/dev/null
"$venv/bin/python" "$root/scripts/interop/gguf_check.py" "$tmp/sample.gguf"
fixtures="${FIXTURES:-$root/../shared/fixtures}"
status=0
for model in stories260K-hf tinystories-656K-hf; do
  [[ -d "$fixtures/models/$model" ]] || { echo "skip $model: not in $fixtures/models"; continue; }
  for format in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m mxfp4 nvfp4; do
    out="$tmp/$model.$format.gguf"
    "$root/build/qforge" quantize "$fixtures/models/$model" -o "$out" --export gguf \
      --format "$format" --json >/dev/null
    "$venv/bin/python" "$root/scripts/interop/gguf_llama_check.py" "$out" || status=1
  done
done
# The fixtures' rows are too short for the 256-element k-quants; a synthetic llama has 256-wide rows.
"$root/build/qforge" synth --shape tiny -q -o "$tmp/tiny" >/dev/null
for format in q4_k q5_k q6_k q4_k_m; do
  "$root/build/qforge" quantize "$tmp/tiny" -o "$tmp/tiny.$format.gguf" --export gguf \
    --format "$format" --json >/dev/null
  "$venv/bin/python" "$root/scripts/interop/gguf_llama_check.py" "$tmp/tiny.$format.gguf" || status=1
done
exit $status
