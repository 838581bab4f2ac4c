#!/usr/bin/env bash
# Configures and builds qforge (Release, warnings as errors) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQFORGE_WERROR=ON >/dev/null
ninja -C build -j "$(nproc)"
