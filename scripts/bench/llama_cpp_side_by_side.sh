#!/usr/bin/env bash
# qforge against llama.cpp on the same machine, model shape and files, in one run: builds
# llama-bench outside the repository (scripts/interop/llama_cpp_build.sh: a llama.cpp source tree
# given as the argument, or the sources in the pinned llama-cpp-python sdist from PyPI), makes
# the models once (`qforge synth --shape SHAPE`; `qforge quantize --export gguf` to BF16, Q8_0
# and Q4_0; NVFP4 safetensors with the BF16 head kept as ModelOpt does, and with
# --quantize-lm-head), then for ROUNDS rounds alternates `llama-bench` and `qforge bench` on each
# file: prefill of PROMPT tokens (pp) and decode of GEN tokens (tg). Prints a table of medians:
# both tokens/s and qforge / llama.cpp, and for NVFP4 against Q4_0 also per byte read (decode
# tokens/s x weight bytes per token, from `qforge bench` on both files). Not part of the default
# test run (the llama.cpp build takes minutes, the synth model is 2.5 GB, a round a few minutes).
#
# usage: scripts/bench/llama_cpp_side_by_side.sh [-t THREADS] [-r ROUNDS] [-p PROMPT] [-n GEN]
#                                                [LLAMA_CPP_SOURCE_DIR]
#   -t N          threads for both (default 2)
#   -r N          rounds (default 3); the table holds each figure's median
#   -p N, -n N    prompt and decode tokens (default 512, 64: llama-bench's pp512 / tg64)
#   WORK=...      llama.cpp build and models (default /tmp/qforge-llama-cpp, shared with
#                 scripts/interop/gguf_llama_cpp.sh; outside the repository)
#   BUILD=...     llama.cpp build directory (default $WORK/build; reused when it exists)
#   LLAMA_BENCH=  an existing llama-bench binary (skips the build)
#   SHAPE=...     qforge synth shape (default llama-1b)
#   QFORGE=...    the qforge binary (default build/qforge)
#   BASELINE=...  another qforge binary measured in the same rounds (e.g. a build of the commit
#                 before a change): one more column, its ratio to llama.cpp beside qforge's
#   JOBS=N        llama.cpp build parallelism (default 2)
#   QUIET=S       before each file's pair of runs wait (up to S seconds) until the CPUs have been
#                 idle for 6 s (a shared machine: ggml's spinning threads lose most under
#                 contention)
#   LLAMA_CPP_CMAKE_ARGS="..."  more cmake arguments for the llama.cpp build, e.g. the x86 flags
#                 without AMX where its AMX path crashes (see below): "-DGGML_NATIVE=OFF
#                 -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
#                 -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
#                 (with a BUILD of its own)
#
# qforge's decode figure comes from a run with a 16-token prompt (llama-bench's tg decodes from an
# empty context), its prefill figure from a run with one decoded token. A llama-bench run that
# fails is retried with --repack 0 (this llama.cpp snapshot's AMX / repacked Q4_0 path crashes on
# some CPUs: SIGSEGV in ggml_backend_amx_mul_mat), marked with * in the table.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
threads=2 rounds=3 prompt=512 gen=64
while getopts "t:r:p:n:" o; do
  case "$o" in
    t) threads="$OPTARG" ;;
    r) rounds="$OPTARG" ;;
    p) prompt="$OPTARG" ;;
    n) gen="$OPTARG" ;;
    *) sed -n '2,30p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
work="${WORK:-/tmp/qforge-llama-cpp}"
shape="${SHAPE:-llama-1b}"
qforge="${QFORGE:-$root/build/qforge}"
[[ -x "$qforge" ]] || { echo "$qforge: not built (cmake --build build)" >&2; exit 2; }

if [[ -n "${LLAMA_BENCH:-}" ]]; then
  lbench="$LLAMA_BENCH"
else
  # shellcheck source=scripts/interop/llama_cpp_build.sh
  source "$root/scripts/interop/llama_cpp_build.sh"
  llama_cpp_build "$work" "${1:-}" llama-bench
  lbench="$LLAMA_CPP_BIN/llama-bench"
fi
[[ -x "$lbench" ]] || { echo "$lbench: no llama-bench" >&2; exit 2; }

# Models, made once per shape.
m="$work/side-by-side/$shape"
mkdir -p "$m"
echo "models in $m" >&2
[[ -f "$m/bf16/config.json" ]] || "$qforge" synth --shape "$shape" -o "$m/bf16" --force -q >/dev/null
for f in bf16 q8_0 q4_0; do
  [[ -f "$m/$f.gguf" ]] ||
    "$qforge" quantize "$m/bf16" -o "$m/$f.gguf" --export gguf --format "$f" -q >/dev/null
done
[[ -f "$m/nvfp4/config.json" ]] || "$qforge" quantize "$m/bf16" -o "$m/nvfp4" --format nvfp4 -q >/dev/null
[[ -f "$m/nvfp4-head/config.json" ]] ||
  "$qforge" quantize "$m/bf16" -o "$m/nvfp4-head" --format nvfp4 --quantize-lm-head -q >/dev/null

# One JSON object per measurement: {"round", "tool", "model", "test", "tok_s", "bytes", "note"}.
results="$work/side-by-side/$shape-results.jsonl"
: >"$results"
load() { cut -d' ' -f1 /proc/loadavg; }
busy_percent() {  # CPU busy share over 2 s
  local a b c d e f g t1 i1
  read -r _ a b c d e f g _ </proc/stat; t1=$((a + b + c + d + e + f + g)); i1=$((d + e))
  sleep 2
  read -r _ a b c d e f g _ </proc/stat
  echo $((100 - 100 * (d + e - i1) / (a + b + c + d + e + f + g - t1)))
}
wait_quiet() {  # up to $QUIET seconds for three idle 2 s windows in a row
  local waited=0 idle=0
  while ((idle < 3 && waited < ${QUIET:-0})); do
    if (($(busy_percent) < 8)); then idle=$((idle + 1)); else idle=0; fi
    waited=$((waited + 2))
  done
}

llama_run() {  # ROUND FILE
  local out note=""
  if ! out="$("$lbench" -m "$m/$2" -p "$prompt" -n "$gen" -t "$threads" -r 1 -o json 2>/dev/null)"; then
    note="*"
    out="$("$lbench" -m "$m/$2" -p "$prompt" -n "$gen" -t "$threads" -r 1 -o json --repack 0 \
             2>/dev/null)" || { echo "llama-bench failed on $2" >&2; return; }
  fi
  python3 -c '
import json, sys
rnd, model, note = sys.argv[1], sys.argv[2], sys.argv[3]
for r in json.loads(sys.stdin.read()):
    test = "pp%d" % r["n_prompt"] if r["n_gen"] == 0 else "tg%d" % r["n_gen"]
    print(json.dumps({"round": int(rnd), "tool": "llama.cpp", "model": model, "test": test,
                      "tok_s": r["avg_ts"], "bytes": r.get("model_size", 0), "note": note}))
' "$1" "$2" "$note" <<<"$out" >>"$results"
}

qforge_run() {  # ROUND MODEL [BINARY TOOL]
  local bin="${3:-$qforge}" tool="${4:-qforge}" pre dec
  pre="$("$bin" bench "$m/$2" --prompt "$prompt" --gen 1 --repeat 1 -t "$threads" --json 2>/dev/null)"
  dec="$("$bin" bench "$m/$2" --prompt 16 --gen "$gen" --repeat 1 -t "$threads" --json 2>/dev/null)"
  python3 -c '
import json, sys
rnd, model, prompt, gen, tool = sys.argv[1:6]
pre, dec = (json.loads(s) for s in sys.stdin.read().split("\x00"))
for test, j, key in (("pp" + prompt, pre, "prefill_tok_s"), ("tg" + gen, dec, "decode_tok_s")):
    print(json.dumps({"round": int(rnd), "tool": tool, "model": model, "test": test,
                      "tok_s": j[key], "bytes": j["weight_bytes_per_token"], "note": ""}))
' "$1" "$2" "$prompt" "$gen" "$tool" < <(printf '%s\0%s' "$pre" "$dec") >>"$results"
  if [[ -n "${BASELINE:-}" && "$tool" == qforge ]]; then qforge_run "$1" "$2" "$BASELINE" baseline; fi
}

for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds (load $(load))" >&2
  for f in bf16 q8_0 q4_0; do
    wait_quiet
    llama_run "$r" "$f.gguf"
    qforge_run "$r" "$f.gguf"
  done
  wait_quiet
  qforge_run "$r" nvfp4
  qforge_run "$r" nvfp4-head
  echo "round $r done (load $(load))" >&2
done

python3 - "$results" "$threads" "$rounds" "$prompt" "$gen" "$shape" <<'EOF'
import json, statistics, sys
path, threads, rounds, prompt, gen, shape = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
def med(tool, model, test, key="tok_s"):
    v = [r[key] for r in rows if r["tool"] == tool and r["model"] == model and r["test"] == test]
    return statistics.median(v) if v else None
def note(model):
    return "*" if any(r["note"] for r in rows if r["tool"] == "llama.cpp" and r["model"] == model) else ""
pp, tg = "pp" + prompt, "tg" + gen
print(f"{shape}, {threads} threads, medians of {rounds} rounds (tokens/s)\n")
base = any(r["tool"] == "baseline" for r in rows)
print("| qforge | llama.cpp | test | qforge | llama.cpp | ratio | per byte read |"
      + (" baseline | its ratio |" if base else ""))
print("|---|---|---|---:|---:|---:|---:|" + ("---:|---:|" if base else ""))
pairs = [("bf16.gguf", "bf16.gguf", "BF16 GGUF", "BF16 GGUF"),
         ("q8_0.gguf", "q8_0.gguf", "Q8_0 GGUF", "Q8_0 GGUF"),
         ("q4_0.gguf", "q4_0.gguf", "Q4_0 GGUF", "Q4_0 GGUF"),
         ("nvfp4", "q4_0.gguf", "NVFP4 (BF16 head)", "Q4_0 GGUF"),
         ("nvfp4-head", "q4_0.gguf", "NVFP4 (NVFP4 head)", "Q4_0 GGUF")]
for qm, lm, qname, lname in pairs:
    for test in (pp, tg):
        q, l = med("qforge", qm, test), med("llama.cpp", lm, test)
        if q is None or l is None:
            continue
        per_byte = ""
        if test == tg and qm != lm:
            qb, lb = med("qforge", qm, tg, "bytes"), med("qforge", lm, tg, "bytes")
            per_byte = f"{q * qb / (l * lb):.2f}x ({qb / 1e6:.0f} vs {lb / 1e6:.0f} MB/token)"
        line = f"| {qname} | {lname}{note(lm)} | {test} | {q:.1f} | {l:.1f} | {q / l:.2f}x | {per_byte} |"
        b = med("baseline", qm, test)
        if base and b is not None:
            line += f" {b:.1f} | {b / l:.2f}x |"
        print(line)
if any(r["note"] for r in rows):
    print("\n* llama-bench crashed with weight repacking (AMX / repacked Q4_0); rerun with --repack 0")
EOF
