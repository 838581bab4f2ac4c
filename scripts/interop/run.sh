#!/usr/bin/env bash
# Interop harness (issue 15, item 2): compare qforge's exports with the real tools' bytes.
#
# Creates (or reuses) two throwaway virtualenvs OUTSIDE the repository and installs the pinned
# reference tools from PyPI (torch from PyPI is the CUDA build; everything runs on the CPU):
#   $VENV_MODELOPT (default /work/interop-venv-modelopt): nvidia-modelopt + torch + transformers
#   $VENV_LLMC     (default /work/interop-venv-llmc): llmcompressor, which pins its own torch,
#                  transformers and compressed-tensors (the versions it resolved are pinned below)
# Then, under $QF_INTEROP_WORK (default /tmp/qforge-interop; the fixtures are never copied into the
# repo): make_inputs.py (each fixture in F32 and a BF16 copy, and the calibration token windows
# qforge selects, which the reference tools then calibrate on), ref_modelopt.py and ref_llmc.py
# (round-to-nearest weight quantization on the CPU in every format both sides have, exported with
# export_hf_checkpoint / save_pretrained(save_compressed=True)), compare.py (runs qforge with the
# matching flags and compares tensor by tensor and config field by field: summary.md, details.md,
# results.json), explain.py (recomputes the reference's scales and codes with
# candidate formulas and counts the matches: explain.md) and load_ct.py (transformers loads every compressed-tensors export: load.md).
#
# Not part of scripts/test.sh: it downloads several GB and takes minutes.
# usage: scripts/interop/run.sh [QFORGE_BINARY]   (default build/qforge; build it first)
# Idempotent: venvs are only (re)installed when the pins change; every output is rewritten.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
QFORGE="${1:-$REPO_ROOT/build/qforge}"
VENV_MODELOPT="${VENV_MODELOPT:-/work/interop-venv-modelopt}"
VENV_LLMC="${VENV_LLMC:-/work/interop-venv-llmc}"
PYTHON="${PYTHON:-python3}"
export QF_INTEROP_WORK="${QF_INTEROP_WORK:-/tmp/qforge-interop}"

source "$SCRIPT_DIR/venvs.sh"

[[ -x "$QFORGE" ]] || { echo "no qforge binary at $QFORGE (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build qforge)" >&2; exit 1; }
setup_venv "$VENV_MODELOPT" "${PINS_MODELOPT[@]}"
setup_venv "$VENV_LLMC" "${PINS_LLMC[@]}"

start=$(date +%s)
mkdir -p "$QF_INTEROP_WORK"
rm -f "$QF_INTEROP_WORK"/status-*.json
cd "$QF_INTEROP_WORK"  # the tools write caches and logs into the working directory
"$VENV_MODELOPT/bin/python" "$SCRIPT_DIR/make_inputs.py" "$QFORGE"
"$VENV_MODELOPT/bin/python" "$SCRIPT_DIR/ref_modelopt.py" >"$QF_INTEROP_WORK/modelopt.log" 2>&1 \
  || { tail -n 20 "$QF_INTEROP_WORK/modelopt.log"; exit 1; }
grep -E '^modelopt ' "$QF_INTEROP_WORK/modelopt.log"
"$VENV_LLMC/bin/python" "$SCRIPT_DIR/ref_llmc.py" >"$QF_INTEROP_WORK/llmc.log" 2>&1 \
  || { tail -n 20 "$QF_INTEROP_WORK/llmc.log"; exit 1; }
grep -E '^llmc ' "$QF_INTEROP_WORK/llmc.log"
"$VENV_MODELOPT/bin/python" "$SCRIPT_DIR/compare.py" "$QFORGE"
"$VENV_MODELOPT/bin/python" "$SCRIPT_DIR/explain.py" >/dev/null 2>"$QF_INTEROP_WORK/explain.log"
"$VENV_LLMC/bin/python" "$SCRIPT_DIR/load_ct.py" "$QFORGE" 2>"$QF_INTEROP_WORK/load.log"
echo "interop run: $(( $(date +%s) - start )) s (without venv setup); outputs in $QF_INTEROP_WORK"
