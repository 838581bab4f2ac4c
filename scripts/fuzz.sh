#!/usr/bin/env bash
# Fuzzes the safetensors header parser: builds the libFuzzer targets with clang, ASan and UBSan
# in build-fuzz/, then runs safetensors_header_fuzz for N seconds (default 30) starting from the
# seeds in tests/fuzz/corpus/. Exits non-zero if the fuzzer finds a crash; the crashing input is
# left in build-fuzz/artifacts/.
#
# usage: scripts/fuzz.sh [seconds]      (CXX=... picks the compiler; default clang++-14/clang++)
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
target=safetensors_header_fuzz

cxx="${CXX:-}"
if [[ -z "$cxx" ]]; then
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null; then cxx="$c"; break; fi
  done
fi
if [[ -z "$cxx" ]] || ! "$cxx" --version 2>/dev/null | grep -q clang; then
  echo "fuzz.sh: libFuzzer needs clang; set CXX=clang++" >&2
  exit 2
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQFORGE_FUZZ=ON -DQFORGE_BUILD_TESTS=OFF \
  -DQFORGE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target "$target" -j "$(nproc)"

# The working corpus grows in build-fuzz/; the committed seeds are only read.
corpus="$build/corpus/$target"
mkdir -p "$corpus" "$build/artifacts"
echo "fuzz.sh: running $target for ${seconds}s" >&2
"$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/tests/fuzz/safetensors.dict" -artifact_prefix="$build/artifacts/" \
  -print_final_stats=1 "$corpus" "$root/tests/fuzz/corpus/safetensors_header"
