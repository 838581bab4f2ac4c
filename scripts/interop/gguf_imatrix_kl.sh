#!/usr/bin/env bash
# The KL table of issue 13 item 2: qforge's importance-weighted / calibrated GGUFs against
# llama-quantize (with and without an llama-imatrix importance matrix made on the same
# calibration text), per type, on the fixtures. Every file is measured the same way:
#   qforge eval kl HF_DIR FILE.gguf --tokenizer HF_DIR --text EVAL
# Per-tensor types are made identical on both sides: llama-quantize gets a Q8_0 base and one
# --tensor-type override per weight tensor, copied from qforge's plan (qforge quantize --json),
# so the rows differ only in how each tool chose scales and codes.
# Calibration: bytes 200000..400000 of tinystories_valid_subset.txt; evaluation: its first
# 100000 bytes (disjoint). Not part of the test run (needs a llama.cpp build).
#
# usage: scripts/interop/gguf_imatrix_kl.sh [MODEL ...]   (a fixture name or a model directory,
#        e.g. a `qforge synth --shape tiny --dtype f32` checkpoint whose rows fit Q4_K; default:
#        both fixtures)
# env:   QFORGE (build/qforge), LLAMA_BIN (/tmp/lcp-build/bin), WORK (/tmp/qforge-imatrix-kl),
#        TYPES ("nvfp4 mxfp4 q4_0 q4_k")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
QFORGE=${QFORGE:-$ROOT/build/qforge}
LLAMA_BIN=${LLAMA_BIN:-/tmp/lcp-build/bin}
WORK=${WORK:-/tmp/qforge-imatrix-kl}
TYPES=${TYPES:-"nvfp4 mxfp4 q4_0 q4_k"}
FIX=${FIX:-$ROOT/../shared/fixtures}
CORPUS=$FIX/corpora/tinystories_valid_subset.txt
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(stories260K-hf tinystories-656K-hf)
mkdir -p "$WORK"
# Characters outside letters, digits and plain punctuation are dropped from both texts:
# TinyStories-656K's vocabulary has no byte tokens, and llama.cpp's tokenizer aborts
# (llama_vocab::byte_to_token: unordered_map::at) on a character it cannot spell.
keep() { LC_ALL=C tr -cd "A-Za-z0-9 .,!?;:'\"\n-"; }
head -c 100000 "$CORPUS" | keep > "$WORK/eval.txt"
dd if="$CORPUS" bs=1000 skip=200 count=200 status=none | keep > "$WORK/calib.txt"
CTX=256
CAL=(--calib "$WORK/calib.txt" --calib-seq $CTX --calib-samples 100000)

kl() {  # kl HF FILE -> "mean_kl p99 top1"
  "$QFORGE" eval kl "$1" "$2" --tokenizer "$1" --text "$WORK/eval.txt" --ctx $CTX --json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin); v=j["variants"][0] if "variants" in j else j
print("%.5f %.5f %.4f" % (v["kl_mean"], v["kl_p99"], v["top1"]))'
}

# llama-quantize's arguments that give every weight tensor the type qforge's plan gave it.
overrides() {  # overrides PLAN.json
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
args = []
for t in j["tensors"]:
    if t["name"] == "token_embd.weight":
        args += ["--token-embedding-type", t["type"]]
    elif t["name"].endswith(".weight") and "norm" not in t["name"]:
        args += ["--tensor-type", "^" + t["name"].replace(".", "\\.") + "$=" + t["type"]]
print(" ".join(args))
PY
}

printf "%-20s %-6s %-44s %9s %9s %7s\n" model type variant kl_mean kl_p99 top1
for M in "${MODELS[@]}"; do
  if [ -d "$M" ]; then HF=$(cd "$M" && pwd); else HF=$FIX/models/$M; fi
  M=$(basename "$HF")
  D=$WORK/$M
  mkdir -p "$D"
  "$QFORGE" quantize "$HF" -o "$D/f32.gguf" --export gguf --format f32 --force -q > /dev/null
  "$LLAMA_BIN/llama-imatrix" -m "$D/f32.gguf" -f "$WORK/calib.txt" -o "$D/imatrix.gguf" -c $CTX \
    --no-ppl -t 2 > "$D/imatrix.log" 2>&1
  for T in $TYPES; do
    "$QFORGE" quantize "$HF" -o "$D/qf-rtn-$T.gguf" --export gguf --format "$T" --force --json \
      > "$D/plan-$T.json" 2> /dev/null || { printf "%-20s %-6s %s\n" "$M" "$T" "qforge cannot write it"; continue; }
    if ! python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tensors"]; sys.exit(0 if any(x["name"].startswith("blk.") and x["type"].lower()==sys.argv[2] for x in t) else 1)' "$D/plan-$T.json" "$T"; then
      printf "%-20s %-6s %s\n" "$M" "$T" "no weight matrix fits the type's block (every tensor falls back)"; continue
    fi
    read -r -a OV <<< "$(overrides "$D/plan-$T.json")"
    rows=()
    if "$LLAMA_BIN/llama-quantize" "${OV[@]}" "$D/f32.gguf" "$D/lq-rtn-$T.gguf" Q8_0 2 > "$D/lq-rtn-$T.log" 2>&1; then
      rows+=("llama-quantize (RTN)|$D/lq-rtn-$T.gguf")
      "$LLAMA_BIN/llama-quantize" --imatrix "$D/imatrix.gguf" "${OV[@]}" "$D/f32.gguf" "$D/lq-imat-$T.gguf" Q8_0 2 > "$D/lq-imat-$T.log" 2>&1
      rows+=("llama-quantize --imatrix|$D/lq-imat-$T.gguf")
    else
      rows+=("llama-quantize: cannot make $T (see lq-rtn-$T.log)|")
    fi
    rows+=("qforge RTN|$D/qf-rtn-$T.gguf")
    "$QFORGE" quantize "$HF" -o "$D/qf-fileimat-$T.gguf" --export gguf --format "$T" --imatrix "$D/imatrix.gguf" --force -q > /dev/null
    rows+=("qforge --imatrix (llama-imatrix's file)|$D/qf-fileimat-$T.gguf")
    "$QFORGE" quantize "$HF" -o "$D/qf-imat-$T.gguf" --export gguf --format "$T" "${CAL[@]}" --algo imatrix --force -q > /dev/null 2>&1
    rows+=("qforge --calib --algo imatrix|$D/qf-imat-$T.gguf")
    "$QFORGE" quantize "$HF" -o "$D/qf-gptq-$T.gguf" --export gguf --format "$T" "${CAL[@]}" --algo gptq --force -q > /dev/null 2>&1
    rows+=("qforge --calib --algo gptq|$D/qf-gptq-$T.gguf")
    for r in "${rows[@]}"; do
      name=${r%%|*} file=${r#*|}
      if [ -z "$file" ]; then printf "%-20s %-6s %-44s\n" "$M" "$T" "$name"; continue; fi
      read -r a b c <<< "$(kl "$HF" "$file")"
      printf "%-20s %-6s %-44s %9s %9s %7s\n" "$M" "$T" "$name" "$a" "$b" "$c"
    done
  done
done
