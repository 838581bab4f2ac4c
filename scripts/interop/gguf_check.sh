#!/usr/bin/env bash
# Checks a qforge-written GGUF with the `gguf` Python package (llama.cpp's gguf-py), in a pinned
# throwaway venv outside the repository: writes the sample of
# tests/io/gguf_interop_sample_test.cpp (every type qforge produces, with its own dequantization
# beside each tensor) and runs gguf_check.py on it. Not part of the default test run.
#
# usage: scripts/interop/gguf_check.sh   (VENV=... to place the venv; default /work/gguf-venv;
#        needs build/qforge_tests)
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
