#!/usr/bin/env bash
# Regenerates tests/data/ggml/imatrix_*.bin: the bytes of ggml's own importance-weighted
# quantizers, called through the public ggml_quantize_chunk() of a llama.cpp build (the code
# llama-quantize --imatrix runs), for tests/formats/ggml_weighted_test.cpp.
#   input:  tests/data/ggml/input_f32.bin (1024 floats) as 4 rows of 256
#   writes: imatrix_weights.bin  256 float32 importances (xorshift: 0.01..100 log-uniform,
#                                columns 32..63 zero, 96..99 = 1e-30, 200 = 1e4)
#           imatrix_<type>.bin   ggml_quantize_chunk(type, input, 4 rows, 256, weights)
# for q4_0, q4_K, q5_K, q6_K (and q8_0, mxfp4, nvfp4, whose quantizers ignore the weights).
# usage: scripts/dev/ggml_imatrix_golden.sh [LLAMA_CPP_SRC] [LLAMA_BUILD_BIN]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${1:-/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp}
BIN=${2:-/tmp/lcp-build/bin}
OUT=$ROOT/tests/data/ggml
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/gen.c" <<'C'
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"

static uint64_t s = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
  s ^= s << 13; s ^= s >> 7; s ^= s << 17;
  return (double)(s >> 11) / 9007199254740992.0;
}

int main(int argc, char** argv) {
  const char* dir = argv[1];
  char path[4096];
  float x[1024], w[256];
  snprintf(path, sizeof path, "%s/input_f32.bin", dir);
  FILE* f = fopen(path, "rb");
  if (!f || fread(x, 4, 1024, f) != 1024) return 1;
  fclose(f);
  for (int i = 0; i < 256; ++i) w[i] = (float)(0.01 * pow(1e4, uniform()));
  for (int i = 32; i < 64; ++i) w[i] = 0.f;
  for (int i = 96; i < 100; ++i) w[i] = 1e-30f;
  w[200] = 1e4f;
  snprintf(path, sizeof path, "%s/imatrix_weights.bin", dir);
  f = fopen(path, "wb");
  fwrite(w, 4, 256, f);
  fclose(f);
  const struct { enum ggml_type t; const char* name; } types[] = {
      {GGML_TYPE_Q4_0, "q4_0"}, {GGML_TYPE_Q4_K, "q4_k"}, {GGML_TYPE_Q5_K, "q5_k"},
      {GGML_TYPE_Q6_K, "q6_k"}, {GGML_TYPE_Q8_0, "q8_0"}, {GGML_TYPE_MXFP4, "mxfp4"},
      {GGML_TYPE_NVFP4, "nvfp4"}};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; ++k) {
    static unsigned char out[4 * 256 * 2];
    const size_t n = ggml_quantize_chunk(types[k].t, x, out, 0, 4, 256, w);
    snprintf(path, sizeof path, "%s/imatrix_%s.bin", dir, types[k].name);
    f = fopen(path, "wb");
    fwrite(out, 1, n, f);
    fclose(f);
  }
  return 0;
}
C
cc -O2 -o "$WORK/gen" "$WORK/gen.c" -I"$SRC/ggml/include" -L"$BIN" -lggml-base -lggml -lm \
  -Wl,-rpath,"$BIN"
"$WORK/gen" "$OUT"
ls -l "$OUT"/imatrix_*.bin
