#!/usr/bin/env bash
# Whole-checkpoint benchmark: `qforge quantize` of a synthetic checkpoint against `cp -r` of the
# same directory (both with a warm page cache, output on the same disk), and peak RSS for two
# model sizes to show memory does not grow with the model. Prints JSON (medians of N runs).
#   bench/checkpoint_bench.sh [shape=llama-1b] [runs=3] [format=nvfp4]
set -euo pipefail
cd "$(dirname "$0")/.."
shape=${1:-llama-1b}; runs=${2:-3}; format=${3:-nvfp4}
qforge=build/qforge
work=${BENCH_DIR:-/tmp/qforge-bench}
mkdir -p "$work"
src="$work/$shape-bf16"
[ -f "$src/config.json" ] || $qforge synth --shape "$shape" -o "$src" -q --force
small="$work/$shape-bf16-4layers"
[ -f "$small/config.json" ] || $qforge synth --shape "$shape" --layers 4 -o "$small" -q --force
cat "$src"/*.safetensors >/dev/null  # warm the page cache for both contenders

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

cp_times=(); q_times=(); q_rss=()
for i in $(seq "$runs"); do
  rm -rf "$work/copy" "$work/out"
  t0=$(now); cp -r "$src" "$work/copy"; sync; t1=$(now)
  cp_times+=("$(echo "$t1 - $t0" | bc -l)")
  rm -rf "$work/copy"
  t0=$(now)
  /usr/bin/time -f "%M" -o "$work/rss" $qforge quantize "$src" -o "$work/out" --format "$format" -q --json >"$work/q.json"
  sync; t1=$(now)
  q_times+=("$(echo "$t1 - $t0" | bc -l)")
  q_rss+=("$(( $(cat "$work/rss") * 1024 ))")
done
rm -rf "$work/out"
/usr/bin/time -f "%M" -o "$work/rss" $qforge quantize "$small" -o "$work/out" --format "$format" -q --json >/dev/null
small_rss=$(( $(cat "$work/rss") * 1024 ))
rm -rf "$work/out"

in_bytes=$(du -sb "$src" | cut -f1)
small_bytes=$(du -sb "$small" | cut -f1)
cp_med=$(printf '%s\n' "${cp_times[@]}" | median)
q_med=$(printf '%s\n' "${q_times[@]}" | median)
rss_med=$(printf '%s\n' "${q_rss[@]}" | median)
cat <<JSON
{
  "shape": "$shape",
  "format": "$format",
  "input_bytes": $in_bytes,
  "runs": $runs,
  "cp_seconds_median": $cp_med,
  "quantize_seconds_median": $q_med,
  "quantize_over_cp": $(echo "$q_med / $cp_med" | bc -l | xargs printf '%.3f'),
  "quantize_input_mb_per_s": $(echo "$in_bytes / $q_med / 1000000" | bc -l | xargs printf '%.1f'),
  "peak_rss_bytes": $rss_med,
  "small_input_bytes": $small_bytes,
  "small_peak_rss_bytes": $small_rss
}
JSON
