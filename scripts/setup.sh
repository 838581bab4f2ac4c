#!/usr/bin/env bash
# First command on a fresh Debian 12 machine: install dependencies, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/qforge demo
