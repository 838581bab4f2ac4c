#!/usr/bin/env bash
# Builds the whole unit and end-to-end suite with AddressSanitizer and UndefinedBehaviorSanitizer
# in build-asan/ (-O1, as the ASan documentation advises for speed) and runs ctest.
# Any sanitizer report fails its test (-fno-sanitize-recover=all). Slow: about 3x the normal
# suite's time plus a full build, so it is not part of scripts/test.sh.
#
# usage: scripts/sanitize.sh [ctest args...]   (e.g. -R Tokenizer; CXX=... picks the compiler)
set -euo pipefail
cd "$(dirname "$0")/.."
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQFORGE_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C build-asan -j "$(nproc)" qforge qforge_tests
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cd build-asan
# The README check runs ~50 qforge commands, ~3x slower under the sanitizers: past its 600 s
# test timeout on 2 cores. Left out unless ctest arguments are given.
[ "$#" -eq 0 ] && set -- -E ReadmeCommandsE2E
ctest --output-on-failure -j "$(nproc)" --timeout 3600 "$@"
