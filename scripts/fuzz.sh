#!/usr/bin/env bash
# Fuzzes every parser of untrusted input: builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp)
# with clang, ASan and UBSan in build-fuzz/, then runs each one in turn from its committed seeds
# (tests/fuzz/corpus/<harness>/) with its dictionary (tests/fuzz/<harness>.dict) when there is
# one. SECONDS is the total fuzzing time, split evenly across the harnesses run (at least 1 s
# each); scripts/test.sh passes FUZZ_SECONDS (default 45, about 5 s per harness).
#
# Prints one line per harness, "harness: N runs, no crash" or "harness: FINDING, input in PATH",
# and exits 1 if any harness found a crash, a sanitizer report, an uncaught exception other than
# qf::Error, a hang over 10 s or more than 2 GB of memory. The working corpus grows in
# build-fuzz/corpus/ (the committed seeds are only read); findings land in build-fuzz/artifacts/.
#
# usage: scripts/fuzz.sh [seconds] [harness ...]   (default: every harness; CXX=... picks clang)
set -euo pipefail

seconds="${1:-45}"
shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

if [[ $# -gt 0 ]]; then
  harnesses=("$@")
else
  harnesses=()
  for f in "$root"/tests/fuzz/*_fuzz.cpp; do harnesses+=("$(basename "$f" .cpp)"); done
fi

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
# -O1 with line tables: what libFuzzer's documentation suggests for ASan builds (readable stacks,
# and about 10% less compile time than RelWithDebInfo's -O2 -g).
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DQFORGE_FUZZ=ON -DQFORGE_BUILD_TESTS=OFF \
  -DQFORGE_BUILD_BENCH=OFF >/dev/null
# Only the harnesses: the fuzz tree's qforge_lib and CLI would double the build for nothing.
cmake --build "$build" --target "${harnesses[@]}" -j "$(nproc)"

per=$(( seconds / ${#harnesses[@]} ))
(( per < 1 )) && per=1
status=0
for h in "${harnesses[@]}"; do
  name="${h%_fuzz}"
  corpus="$build/corpus/$name"
  artifacts="$build/artifacts/$name/"
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [[ -d "$root/tests/fuzz/corpus/$name" ]] && seeds=("$root/tests/fuzz/corpus/$name")
  dict=()
  [[ -f "$root/tests/fuzz/$name.dict" ]] && dict=(-dict="$root/tests/fuzz/$name.dict")
  log="$build/$name.log"
  echo "fuzz.sh: running $h for ${per}s (log $log)" >&2
  set +e
  # -max_len: real configs and tokenizer files are larger than libFuzzer's 4 KB default.
  "$build/$h" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    "${dict[@]}" -artifact_prefix="$artifacts" -print_final_stats=1 \
    "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  if [[ $rc -eq 0 ]]; then
    line="$h: ${runs:-0} runs, no crash"
  else
    status=1
    input=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -n 1)
    line="$h: FINDING (exit $rc), input in ${input:-$artifacts}, log $log"
    tail -n 40 "$log" >&2
  fi
  echo "$line"
done
echo "fuzz.sh: ${#harnesses[@]} harnesses, ${per}s each" >&2
exit $status
