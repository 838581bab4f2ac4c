#!/usr/bin/env bash
# Nemotron-H exports against the real tools: qforge's NVFP4 / FP8 W8A8 / Four Over Six exports of
# the two tiny Nemotron-H conformance models (compressed-tensors and ModelOpt) vs llm-compressor's and
# ModelOpt's own (bytes, names, config), the compressed-tensors ones loaded by transformers (keys, KL
# against the original next to qforge's eval kl), the ModelOpt ones checked against what vLLM needs.
# See nemotron_h.py (its RUNS list is the set of qforge command lines). Writes
# $QF_INTEROP_WORK/nemotron_h/nemotron_h.md.
#
# Creates (or reuses) a throwaway venv OUTSIDE the repository, $VENV_MOE (default
# /work/interop-venv-moe): torch 2.15 / transformers 5.24 (the conformance versions) with
# compressed-tensors 0.19, which transformers needs to load compressed-tensors exports; and the
# llm-compressor and ModelOpt venvs of run.sh ($VENV_LLMC, $VENV_MODELOPT), set up by run.sh's pins.
# Not part of scripts/test.sh. usage: scripts/interop/nemotron_h.sh [QFORGE_BINARY]
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
QFORGE="${1:-$REPO_ROOT/build/qforge}"
VENV_MOE="${VENV_MOE:-/work/interop-venv-moe}"
VENV_LLMC="${VENV_LLMC:-/work/interop-venv-llmc}"
VENV_MODELOPT="${VENV_MODELOPT:-/work/interop-venv-modelopt}"
PYTHON="${PYTHON:-python3}"
export QF_INTEROP_WORK="${QF_INTEROP_WORK:-/tmp/qforge-interop}"

source "$SCRIPT_DIR/venvs.sh"

[[ -x "$QFORGE" ]] || { echo "no qforge binary at $QFORGE (build it first)" >&2; exit 1; }
setup_venv "$VENV_MOE" "${PINS_MOE[@]}"
setup_venv "$VENV_LLMC" "${PINS_LLMC[@]}"
setup_venv "$VENV_MODELOPT" "${PINS_MODELOPT[@]}"
mkdir -p "$QF_INTEROP_WORK/nemotron_h"
cd "$QF_INTEROP_WORK/nemotron_h"
"$VENV_MOE/bin/python" "$SCRIPT_DIR/nemotron_h.py" run "$QFORGE" "$VENV_LLMC/bin/python" "$VENV_MODELOPT/bin/python" 2>"$QF_INTEROP_WORK/nemotron_h/nemotron_h.log"
