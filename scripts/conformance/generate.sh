#!/usr/bin/env bash
# Regenerate the transformers conformance fixtures in tests/data/conformance/.
#
# Creates (or reuses) a throwaway virtualenv OUTSIDE the repository (default /work/conformance-venv,
# override with VENV=...), installs the pinned torch / transformers / safetensors / numpy from PyPI
# into it, then runs scripts/conformance/generate.py, which builds tiny random Hugging Face models,
# stores each checkpoint (config.json + BF16 model.safetensors) and the float32 reference logits /
# per-token NLL computed by transformers, then cross-checks them with check.py (an independent
# float64 re-implementation). The C++ tests read those files; CI never runs this script.
#
# Idempotent: the venv is only (re)installed when the pins below change; every case directory is
# rewritten from scratch. Extra arguments go to generate.py (e.g. --only llama_v4 qwen3).
# torch from PyPI pulls the CUDA wheels (several GB); only the CPU is used.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
VENV="${VENV:-/work/conformance-venv}"
PYTHON="${PYTHON:-python3}"

PINS=(
  "torch==2.15.0"
  "transformers==5.24.0"
  "safetensors==0.8.0"
  "numpy==2.4.6"
)
STAMP="$VENV/.qforge-conformance-pins"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "creating venv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "${PINS[*]}" ]]; then
  echo "installing ${PINS[*]} into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
  printf '%s' "${PINS[*]}" >"$STAMP"
fi

OUT="$REPO_ROOT/tests/data/conformance"
"$VENV/bin/python" "$SCRIPT_DIR/generate.py" --out "$OUT" "$@"
# Cross-check every case against the independent float64 re-implementation (no transformers).
"$VENV/bin/python" "$SCRIPT_DIR/check.py" "$OUT"
du -sh "$OUT"
