#!/usr/bin/env bash
# Builds qforge and runs the whole test suite: unit and end-to-end tests (ctest), then a short
# fuzzing run of every parser of untrusted input (scripts/fuzz.sh: FUZZ_SECONDS in all, default
# 45, split across the harnesses; log in build-fuzz/fuzz.log). FUZZ_SECONDS=0 skips fuzzing.
# Ends with one summary line "qforge: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
set +e
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900) 2>&1 | tee build/ctest.log
ctest_status=${PIPESTATUS[0]}
fuzz_status=0
if [ "${FUZZ_SECONDS:-45}" != "0" ] && [ -x scripts/fuzz.sh ]; then
  mkdir -p build-fuzz
  scripts/fuzz.sh "${FUZZ_SECONDS:-45}" >build-fuzz/fuzz.log 2>&1
  fuzz_status=$?
  if [ "$fuzz_status" -ne 0 ]; then
    tail -n 60 build-fuzz/fuzz.log
    grep -E '^[a-z0-9_]+_fuzz: ' build-fuzz/fuzz.log | sed 's/^/fuzz: /'
    echo "fuzz: FAILED (exit $fuzz_status), see build-fuzz/fuzz.log"
  else
    grep -E '^[a-z0-9_]+_fuzz: ' build-fuzz/fuzz.log | sed 's/^/fuzz: /'
  fi
fi
set -e
summary=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' build/ctest.log | tail -n 1)
failed=$(echo "$summary" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
total=$(echo "$summary" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/')
if [ -n "$summary" ]; then
  [ "$fuzz_status" -ne 0 ] && failed=$((failed + 1)) && total=$((total + 1))
  echo "qforge: $((total - failed)) passed, $failed failed"
fi
[ "$ctest_status" -eq 0 ] && [ "$fuzz_status" -eq 0 ]
