#!/usr/bin/env bash
# Builds qforge and runs the whole test suite: unit and end-to-end tests (ctest), then a short
# fuzzing run of the safetensors header parser. FUZZ_SECONDS=0 skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
if [ "${FUZZ_SECONDS:-30}" != "0" ] && [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
