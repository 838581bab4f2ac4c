#!/usr/bin/env bash
# Issue 16's decode criteria on synthetic 1B-class checkpoints, each figure next to its baseline
# in the same round (BF16 and NVFP4 runs alternate, so a busy machine slows both alike: for the
# byte limit, the context lengths and the batches, in one `bench --alternate` process each):
#  1. BF16 vs NVFP4 decode, with the BF16 head kept and with --quantize-lm-head, on llama-1b
#     (128256-token tied head) and llama-1b-32k (32000): the speedup against the byte limit
#     (BF16 weight bytes per step / NVFP4 weight bytes per step, as `bench` reports them);
#  2. NVFP4 decode at 4096 tokens of context against 64, with a BF16 and an FP8 KV cache;
#  3. `bench --batch 8` aggregate decode against --batch 1 (NVFP4).
# Prints one JSON line per measurement; ROUNDS rounds (default 3). Makes its models in BENCH_DIR
# (default /tmp/qforge-decode-bench: two BF16 synths of 2.5 and 2.0 GB, four NVFP4 exports)
# and keeps them for the next run (KEEP=0 removes them). About 10 minutes a round on 2 cores.
#   bench/decode_bench.sh [build=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
qforge=$build/qforge
rounds=${ROUNDS:-3}
work=${BENCH_DIR:-/tmp/qforge-decode-bench}
mkdir -p "$work"
[[ ${KEEP:-1} == 0 ]] && trap 'rm -rf "$work"' EXIT

for shape in llama-1b llama-1b-32k; do
  [[ -f $work/$shape/model.safetensors ]] || $qforge synth --shape "$shape" -o "$work/$shape" -q --force
  [[ -f $work/$shape-nvfp4/model.safetensors ]] ||
    $qforge quantize "$work/$shape" -o "$work/$shape-nvfp4" --format nvfp4 -q --force
  [[ -f $work/$shape-nvfp4-head/model.safetensors ]] ||
    $qforge quantize "$work/$shape" -o "$work/$shape-nvfp4-head" --format nvfp4 \
      --quantize-lm-head -q --force
done

for ((r = 1; r <= rounds; ++r)); do
  for shape in llama-1b llama-1b-32k; do
    # The three models loaded together and run in turns (--alternate), 5 runs each: the ratio is
    # the median of same-round ratios, which a machine whose speed drifts moves far less
    # than separate processes minutes apart.
    $qforge bench "$work/$shape" "$work/$shape-nvfp4" "$work/$shape-nvfp4-head" --alternate \
      --repeat 5 --prompt 16 --gen 32 --json | python3 -c "
import json, sys
d = json.load(sys.stdin)['models']
bf = d[0]
for q, head in zip(d[1:], ['nvfp4', 'nvfp4-head']):
    print(json.dumps({'round': $r, 'shape': '$shape', 'nvfp4': head,
      'bf16_tok_s': round(bf['decode_tok_s'], 2), 'nvfp4_tok_s': round(q['decode_tok_s'], 2),
      'speedup': round(q['decode_vs_first'], 3),
      'speedup_range': [round(q['decode_vs_first_min'], 3), round(q['decode_vs_first_max'], 3)],
      'byte_limit': round(q['byte_limit_vs_first'], 3),
      'of_limit': round(q['decode_of_byte_limit'], 3)}))"
  done
  m="$work/llama-1b-nvfp4"
  for kv in bf16 fp8; do
    # Both context lengths in one --alternate process: the median of same-round ratios.
    $qforge bench "$m" --prompt 64,4064 --gen 32 --kv-cache "$kv" --alternate --repeat 3 \
      --json | python3 -c "
import json, sys
s, l = json.load(sys.stdin)['models']
print(json.dumps({'round': $r, 'kv_cache': '$kv', 'tok_s_ctx64': round(s['decode_tok_s'], 2),
  'tok_s_ctx4096': round(l['decode_tok_s'], 2), 'ratio': round(l['decode_vs_first'], 3),
  'ratio_range': [round(l['decode_vs_first_min'], 3), round(l['decode_vs_first_max'], 3)],
  'kv_cache_bytes_4096': l['kv_cache_bytes']}))"
  done
  # Both batches in one --alternate process: the median of same-round ratios.
  $qforge bench "$m" --prompt 16 --gen 32 --batch 1,8 --alternate --repeat 5 --json |
    python3 -c "
import json, sys
a, b = json.load(sys.stdin)['models']
print(json.dumps({'round': $r, 'batch1_tok_s': round(a['decode_tok_s'], 2),
  'batch8_tok_s': round(b['decode_tok_s'], 2), 'ratio': round(b['decode_vs_first'], 3),
  'ratio_range': [round(b['decode_vs_first_min'], 3), round(b['decode_vs_first_max'], 3)]}))"
done
