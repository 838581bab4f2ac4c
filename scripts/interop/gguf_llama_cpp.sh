#!/usr/bin/env bash
# Loads qforge's `--export gguf` files in a real llama.cpp: builds llama-perplexity and
# llama-completion from a llama.cpp source tree (a path given by the user, or the one inside the
# pinned llama-cpp-python source package from PyPI), outside the repository; exports both fixture
# Llamas in every GGUF format; runs llama-perplexity on the first characters of the TinyStories
# validation text and a short greedy completion on each, compares with `qforge eval ppl
# --protocol llama.cpp` on the same file (exit 1 when they differ by more than 1e-3); prints one
# line per file. Not part of the default test run (the build takes minutes).
#
# usage: scripts/interop/gguf_llama_cpp.sh [LLAMA_CPP_SOURCE_DIR]
#   WORK=...      build and output directory (default /tmp/qforge-llama-cpp)
#   BUILD=...     llama.cpp build directory (default $WORK/build; reused when it exists)
#   JOBS=N        build parallelism (default 2)
#   FORMATS="..." formats to export (default: all of --export gguf's)
#   FIXTURES=...  fixtures directory (default ../shared/fixtures); needs build/qforge
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="${WORK:-/tmp/qforge-llama-cpp}"
jobs="${JOBS:-2}"
fixtures="${FIXTURES:-$root/../shared/fixtures}"
formats="${FORMATS:-f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m mxfp4 nvfp4}"
# shellcheck source=scripts/interop/llama_cpp_build.sh
source "$root/scripts/interop/llama_cpp_build.sh"
llama_cpp_build "$work" "${1:-}" llama-perplexity llama-completion
bin="$LLAMA_CPP_BIN"

text="$work/tinystories-20000.txt"
head -c 20000 "$fixtures/corpora/tinystories_valid_subset.txt" >"$text"
out="$work/out"
mkdir -p "$out"
# --no-repack: this llama.cpp snapshot's CPU weight repacking crashes (SIGSEGV / SIGILL) on these
# tiny models with x86 native builds, for llama-quantize's own Q8_0 of the same model as well
# (whose bytes equal qforge's); the repack only changes the in-memory layout, not the results.
# -fa off: qforge's `--protocol llama.cpp` models llama.cpp's attention without flash attention
# (F16 cache, F16 query and probabilities); the default (-fa auto = on on CPU) is printed too. On
# the 656K model, whose activations are rounded to Q8_0, llama.cpp's two attention paths
# themselves differ by up to 2e-3.
# llama.cpp writes its log from a thread that can lose the last lines at exit: retried.
lcp_ppl() {  # FILE LOG [ARGS...] -> the final estimate, or FAILED
  local f="$1" log="$2"; shift 2
  for _ in 1 2 3 4 5; do
    "$bin/llama-perplexity" -m "$f" -f "$text" -c 128 -b 128 -t "$jobs" --no-repack "$@" \
      >"$log" 2>&1 || { echo FAILED; return; }
    local r
    r="$(grep -o 'Final estimate: PPL = [0-9.]*' "$log" | awk '{print $NF}')"
    [[ -n "$r" ]] && { echo "$r"; return; }
  done
  echo FAILED
}
status=0
printf '%-20s %-7s %-9s %-9s %-9s %-9s %s\n' model format qforge "fa off" "rel" "fa on" \
  "llama-completion of 'Once upon a time'"
for model in stories260K-hf tinystories-656K-hf; do
  [[ -d "$fixtures/models/$model" ]] || { echo "skip $model: not in $fixtures/models"; continue; }
  for format in $formats; do
    f="$out/$model.$format.gguf"
    "$root/build/qforge" quantize "$fixtures/models/$model" -o "$f" --export gguf \
      --format "$format" --force --json >/dev/null
    ours="$("$root/build/qforge" eval ppl "$f" --tokenizer "$fixtures/models/$model" --text "$text" \
              --ctx 128 --protocol llama.cpp --kernels fast --json | python3 -c \
              'import json,sys; print("%.4f" % json.load(sys.stdin)["ppl"])')"
    off="$(lcp_ppl "$f" "$out/$model.$format.ppl-fa-off.log" -fa off)"
    on="$(lcp_ppl "$f" "$out/$model.$format.ppl.log")"
    rel="FAILED"
    if [[ "$off" != FAILED ]]; then
      rel="$(python3 -c "print('%.1e' % abs($ours / $off - 1))")"
      python3 -c "import sys; sys.exit(abs($ours / $off - 1) > 1e-3)" || status=1
    else
      status=1
    fi
    gen="$("$bin/llama-completion" -m "$f" -p "Once upon a time" -n 24 --temp 0 -t "$jobs" \
             --no-repack -no-cnv --no-display-prompt 2>/dev/null | tr '\n' ' ' | cut -c1-70)" || { gen="FAILED"; status=1; }
    printf '%-20s %-7s %-9s %-9s %-9s %-9s %s\n' "$model" "$format" "$ours" "$off" "$rel" "$on" "$gen"
  done
done
exit $status
