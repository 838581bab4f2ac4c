#!/usr/bin/env python3
"""Runs the commands of README.md and checks the figures it states for the fixture models.

Used by scripts/check_readme.sh (see there for the options). Python 3 standard library only.

Commands: every line of a ```sh / ```bash block of README.md that starts with `build/qforge`,
`qforge` or `scripts/` (backslash continuations joined; `NAME=value` lines of the block are
prepended to each later command of that block, so `$M` means what the README says). Optional
parts written `[--flag ...]` are dropped for a first run; when every such part is concrete (no
`...`, no capitalised placeholder such as N or S) the command is run a second time with all of
them. A command carrying `# check_readme: skip (reason)` on its line, or on the comment line just
above it, is not run and is listed with the reason. Lines of other programs (vllm, python, ...)
are listed as not checked.

So that the commands can run from the repository root without touching it or /tmp (other
checkouts may run this check at the same time), the placeholders and output names of the README
are rewritten, and each rewrite is printed with the command:
  - `path/to/...` model placeholders -> a fixture model (a tokenizer-less copy for
    `path/to/weights`), `text.txt` -> a fixture corpus;
  - output names (`out`, `plan.json`, `report.html`, ...) and every `/tmp/...` path -> a
    scratch directory that lives for the whole run (so /tmp/s-nvfp4 made by one command is
    there for the next).
Before the second run of a command (the one with its optional parts), whatever its first run
created in the scratch directory is removed.

Figures: CLAIMS below pairs a piece of README text that states a figure or an output string with
the command that produces it and a tolerance; the README text must still be there (so a changed
figure is noticed) and the program's output must match it.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = "../shared/fixtures"
S260 = FIX + "/models/stories260K-hf"
S656 = FIX + "/models/tinystories-656K-hf"
TS = FIX + "/corpora/tinystories_valid_subset.txt"
SHAKE = FIX + "/corpora/tinyshakespeare.txt"

# Placeholders of the README -> what is run instead (whole words only).
PLACEHOLDERS = {
    "path/to/Llama-3.1-8B": S260,
    "path/to/model": S260,
    "path/to/weights": "$SCRATCH/weights-only",  # made in setup(): stories260K without tokenizer
    "path/to/tokenizer-dir": S260,
    "text.txt": SHAKE,
}
# Output names written relative to the working directory (regexes) -> the scratch directory.
# Any relative *.html (report pages) too: a name missing here would be written into the
# repository's working tree.
OUTPUT_NAMES = [r"out(?:-[A-Za-z0-9_]+)*", r"llama-8b-nvfp4", r"plan\.json", r"plan\.yaml",
                r"[A-Za-z0-9_-]+\.html", r"[A-Za-z0-9_-]+\.gguf"]

MARKER = re.compile(r"#\s*check_readme:\s*(skip|slow)\s*(?:\((.*?)\))?\s*$")
RUNNABLE = re.compile(r"^(build/qforge|qforge|scripts/)\S*")
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S+(\s*;\s*[A-Za-z_][A-Za-z0-9_]*=\S+)*\s*;?\s*$")
OPTIONAL = re.compile(r"\s*\[(-[^\[\]]*)\]")


def strip_comment(line):
    """The line without a trailing shell comment (a # outside quotes preceded by a blank)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def extract(readme_text):
    """Yields dicts: line (1-based), cmd (as written, joined), env (assignments), skip, other."""
    lines = readme_text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(sh|bash|shell)\s*$", lines[i])
        if not m:
            i += 1
            continue
        block = i
        i += 1
        env = []
        prev_comment = ""
        while i < len(lines) and not lines[i].strip().startswith("```"):
            start = i
            raw = lines[i]
            full = raw
            while full.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                full = full.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            code, comment = strip_comment(full.strip())
            if not code:
                prev_comment = comment
                continue
            skip = MARKER.search(comment) or MARKER.search(prev_comment)
            prev_comment = ""
            if ASSIGN.match(code):
                env.append(code.rstrip(";"))
                continue
            item = {"line": start + 1, "cmd": code, "env": list(env), "skip": None, "slow": None,
                    "other": False, "block": block}
            if skip:
                item[skip.group(1)] = skip.group(2) or "no reason given"
            if not RUNNABLE.match(code):
                item["other"] = True
            yield item
        i += 1


def variants(cmd):
    """(command, label) pairs: without the optional parts, then (when some are concrete: no
    `...`, no capitalised placeholder) with every concrete one; the others are named in the
    label and never run (command None when there is nothing concrete)."""
    opts = OPTIONAL.findall(cmd)
    base = re.sub(r"\s+", " ", OPTIONAL.sub("", cmd)).strip()
    out = [(base, "")]
    if not opts:
        return out
    concrete = lambda o: "..." not in o and not re.search(r"\b[A-Z]\b", o)
    left = [o for o in opts if not concrete(o)]
    note = (" (not run: " + " ".join("[" + o + "]" for o in left) + ", placeholders)") if left else ""
    if len(left) < len(opts):
        full = OPTIONAL.sub(lambda m: " " + m.group(1) if concrete(m.group(1)) else "", cmd)
        full = re.sub(r"\s+", " ", full).strip()
        out.append((full, " (with " + " ".join("[" + o + "]" for o in opts if concrete(o)) + ")" + note))
    else:
        out.append((None, note))
    return out


def rewrite(cmd):
    """Placeholders and outputs -> fixtures and scratch; returns (command, list of rewrites)."""
    done = []
    for k, v in PLACEHOLDERS.items():
        pat = r"(?<![\w/.-])" + re.escape(k) + r"(?![\w/.-])"
        if re.search(pat, cmd):
            cmd = re.sub(pat, v.replace("\\", "\\\\"), cmd)
            done.append(f"{k}={v}")
    for k in OUTPUT_NAMES:
        pat = r"(?<![\w/.$-])(" + k + r")(?![\w/.-])"
        for name in sorted(set(re.findall(pat, cmd))):
            done.append(f"{name}=$SCRATCH/{name}")
        cmd = re.sub(pat, r"$SCRATCH/\1", cmd)
    pat = r"(?<![\w/.$-])/tmp/"
    if re.search(pat, cmd):
        cmd = re.sub(pat, "$SCRATCH/tmp/", cmd)
        done.append("/tmp/=$SCRATCH/tmp/")
    if cmd.startswith("qforge "):
        cmd = "build/qforge " + cmd[len("qforge "):]
        done.append("qforge=build/qforge")
    # the binary: build/qforge, or $QFORGE_BINARY (the tests' build) when that is set
    cmd = re.sub(r"(?<![\w/.-])build/qforge(?![\w/.-])", '"$QFORGE"', cmd)
    return cmd, done


def qforge_binary():
    return os.environ.get("QFORGE_BINARY") or os.path.join(ROOT, "build", "qforge")


def first_error(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if re.search(r"\berror\b:|^qforge: (?!--auto)", l):
            return l
    for l in lines:
        if re.search(r"error|fail|cannot|unknown|not found|refused", l, re.I):
            return l
    return lines[-1] if lines else "(no output)"


class Runner:
    def __init__(self, scratch, timeout, verbose):
        self.scratch = scratch
        self.timeout = timeout
        self.verbose = verbose
        self.env = dict(os.environ, SCRATCH=scratch, QFORGE=qforge_binary())
        self.env.pop("QFORGE_PROGRESS", None)

    def run(self, script, timeout=None):
        t0 = time.time()
        try:
            p = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=ROOT, env=self.env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout or self.timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = 124
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = f"timed out after {timeout or self.timeout} s"
        return rc, out, err, time.time() - t0


def snapshot(d):
    return set(os.listdir(d))


def setup(scratch):
    os.makedirs(os.path.join(scratch, "tmp"), exist_ok=True)
    os.makedirs(os.path.join(scratch, "c"), exist_ok=True)  # the figure checks' outputs
    w = os.path.join(scratch, "weights-only")
    os.makedirs(w, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(ROOT, S260, f), w)


# ---------------------------------------------------------------------------------------------
# Figures and strings the README states, with the command that gives them.
# kind "json": run cmd, parse stdout as JSON, compare field `field` with `value` within `tol`
#   (absolute), or `rel` (relative).
# kind "stderr"/"stdout": the text (whitespace normalised) must contain `text`; `rc` the exit
#   status ("nonzero" or an int).
# `readme`: text that must be in README.md (whitespace normalised), stating the figure.
# `needs`: commands run first (once each, keyed by name) in the scratch directory.
# `cost`: "fast" (seconds) or "slow"; --fast runs only the fast ones.
# ---------------------------------------------------------------------------------------------
KL20 = f"--text {TS} --max-chars 20000 --json"
KL30 = f"--text {TS} --max-chars 30000 --json"
CAL64 = f"--calib {SHAKE} --calib-samples 64 --calib-seq 256 --seed 0"
PREP = {
    "s-nvfp4": f"build/qforge quantize {S260} -o $SCRATCH/c/s-nvfp4 -q",
    "s-mxfp4": f"build/qforge quantize {S260} -o $SCRATCH/c/s-mxfp4 -q --format mxfp4",
    "s-int4c": f"build/qforge quantize {S260} -o $SCRATCH/c/s-int4c -q --format int4 --group-size channel",
    "t-nvfp4": f"build/qforge quantize {S656} -o $SCRATCH/c/t-nvfp4 -q",
    "t-mxfp4": f"build/qforge quantize {S656} -o $SCRATCH/c/t-mxfp4 -q --format mxfp4",
    "t-int4c": f"build/qforge quantize {S656} -o $SCRATCH/c/t-int4c -q --format int4 --group-size channel",
    "s-ct": f"build/qforge quantize {S260} -o $SCRATCH/c/s-ct -q --export compressed-tensors",
    "s-nvfp4-head": f"build/qforge quantize {S260} -o $SCRATCH/c/s-nvfp4-head -q --quantize-lm-head",
}
for m, path in (("s", S260), ("t", S656)):
    PREP[f"{m}-sq-mo"] = (f"build/qforge quantize {path} -o $SCRATCH/c/{m}-sq-mo -q --format int8 "
                          f"--activations int8 --algo smoothquant {CAL64}")
    PREP[f"{m}-sq-ct"] = (f"build/qforge quantize {path} -o $SCRATCH/c/{m}-sq-ct -q --format int8 "
                          f"--activations int8 --algo smoothquant --export compressed-tensors {CAL64}")
    PREP[f"{m}-i8max"] = (f"build/qforge quantize {path} -o $SCRATCH/c/{m}-i8max -q --format int8 "
                          f"--activations int8 --algo max {CAL64}")
    for a in ("0.8", "0.5"):
        PREP[f"{m}-sq{a}"] = (f"build/qforge quantize {path} -o $SCRATCH/c/{m}-sq{a} -q --format "
                              f"int8 --activations int8 --algo smoothquant --smoothquant-alpha {a} "
                              f"{CAL64}")


def cpu_has(*flags):
    try:
        with open("/proc/cpuinfo") as f:
            words = set(f.read().split())
        return all(fl in words for fl in flags)
    except OSError:
        return False


FAST_SAME_CPU = cpu_has("avx512_vnni", "avx512_bf16")


def kl_claims():
    out = []
    # "Exact and fast kernels": eval kl on 20000 characters, ctx 256; ppl_quant exact -> fast.
    rows = [("s", S260, "nvfp4", "stories260K NVFP4 4.44736 → 4.44764", 4.44736, 4.44764),
            ("s", S260, "mxfp4", "MXFP4 4.62781 → 4.62781", 4.62781, 4.62781),
            ("s", S260, "int4c", "INT4 per channel 4.79543 → 4.79419", 4.79543, 4.79419),
            ("t", S656, "nvfp4", "TinyStories-656K NVFP4 36.16118 → 36.16562", 36.16118, 36.16562),
            ("t", S656, "mxfp4", "MXFP4 37.98909 → 37.98587", 37.98909, 37.98587),
            ("t", S656, "int4c", "INT4 per channel 37.55409 → 37.60620", 37.55409, 37.60620)]
    for m, path, fmt_, text, exact, fast in rows:
        q = f"$SCRATCH/c/{m}-{fmt_}"
        out.append({"name": f"eval kl exact {m}-{fmt_}", "readme": text, "needs": [f"{m}-{fmt_}"],
                    "cmd": f"build/qforge eval kl {path} {q} {KL20}", "kind": "json",
                    "field": "ppl_quant", "value": exact, "tol": 1e-5, "cost": "fast"})
        # fast kernels: the same figure on a CPU with AVX-512 VNNI + BF16 (the README's; its
        # AVX512-BF16 prefill kernel, so QFORGE_NO_AMX=1 where the CPU has AMX), else only within
        # the 1.4e-3 relative the README gives as the largest change.
        out.append({"name": f"eval kl --kernels fast {m}-{fmt_}", "readme": text,
                    "needs": [f"{m}-{fmt_}"],
                    "cmd": f"QFORGE_NO_AMX=1 build/qforge eval kl {path} {q} {KL20} --kernels fast",
                    "kind": "json",
                    "field": "ppl_quant", "value": fast,
                    **({"tol": 1e-5} if FAST_SAME_CPU else {"rel": 2e-3}), "cost": "fast"})
    return out


CLAIMS = kl_claims() + [
    {"name": "unknown format message", "cost": "fast",
     "readme": "`--format: unknown format 'nvfp5'; did you mean 'nvfp4'? (choices: nvfp4, mxfp4, fp8, int4, int8, f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m)`",
     "cmd": f"build/qforge quantize {S260} -o $SCRATCH/c/never --format nvfp5", "kind": "stderr",
     "rc": "nonzero",
     "text": "--format: unknown format 'nvfp5'; did you mean 'nvfp4'? (choices: nvfp4, mxfp4, fp8, int4, int8, f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m)"},
    {"name": "unknown command message", "cost": "fast",
     "readme": "`unknown command 'quantise'; did you mean 'quantize'?`",
     "cmd": "build/qforge quantise", "kind": "stderr", "rc": "nonzero",
     "text": "unknown command 'quantise'; did you mean 'quantize'?"},
    {"name": "already quantized (compressed-tensors) message", "cost": "fast", "needs": ["s-ct"],
     "readme": "(`MODEL/config.json: already quantized (compressed-tensors nvfp4-pack-quantized); quantize takes an unquantized BF16/F16/F32 checkpoint`)",
     "cmd": "build/qforge quantize $SCRATCH/c/s-ct -o $SCRATCH/c/never", "kind": "stderr",
     "rc": "nonzero",
     "text": "s-ct/config.json: already quantized (compressed-tensors nvfp4-pack-quantized); quantize takes an unquantized BF16/F16/F32 checkpoint"},
    {"name": "eval kl swapped arguments warning", "cost": "fast", "needs": ["s-nvfp4"],
     "readme": "is quantized (modelopt W4A16_NVFP4) and QUANT m is not: the arguments look swapped; eval kl takes the original model first (eval kl m q)`.",
     "cmd": f"build/qforge eval kl $SCRATCH/c/s-nvfp4 {S260} --text {TS} --max-chars 2000",
     "kind": "stderr", "rc": 0,
     "text": "is quantized (modelopt W4A16_NVFP4) and QUANT " + S260 +
             " is not: the arguments look swapped; eval kl takes the original model first"},
    {"name": "--target-bits 2 cannot be met (TinyStories-656K)", "cost": "fast",
     "readme": "`--target-bits 2 cannot be met: the smallest choice gives 4.250 bits per weight (candidates nvfp4,fp8,mxfp4,int4,int4:channel and keep)`",
     "cmd": f"build/qforge quantize {S656} -o $SCRATCH/c/never --calib {SHAKE} --auto --target-bits 2",
     "kind": "stderr", "rc": "nonzero",
     "text": "--target-bits 2 cannot be met: the smallest choice gives 4.250 bits per weight (candidates nvfp4,fp8,mxfp4,int4,int4:channel and keep)"},
    {"name": "stories260K down_proj has 172 inputs", "cost": "fast",
     "readme": "(stories260K's `down_proj` has 172 inputs)",
     "cmd": f"grep -o '\"intermediate_size\": *[0-9]*' {S260}/config.json", "kind": "stdout",
     "rc": 0, "text": "\"intermediate_size\": 172"},
    {"name": "lm_head NVFP4 eval kl (stories260K, before)", "cost": "fast", "needs": ["s-nvfp4"],
     "readme": "(stories260K NVFP4, `eval kl` mean on the first 20,000 characters of tinystories_valid_subset: 0.089 → 0.124)",
     "cmd": f"build/qforge eval kl {S260} $SCRATCH/c/s-nvfp4 {KL20}", "kind": "json",
     "field": "kl_mean", "value": 0.089, "tol": 5e-4},
    {"name": "lm_head NVFP4 eval kl (stories260K, --quantize-lm-head)", "cost": "fast",
     "needs": ["s-nvfp4-head"], "readme": "(stories260K NVFP4, `eval kl` mean on the first 20,000 characters of tinystories_valid_subset: 0.089 → 0.124)",
     "cmd": f"build/qforge eval kl {S260} $SCRATCH/c/s-nvfp4-head {KL20}", "kind": "json",
     "field": "kl_mean", "value": 0.124, "tol": 5e-4},
]


def int8_claims():
    # INT8 W8A8 table: calibrated 64 x 256 on tinyshakespeare, eval kl on 30000 characters.
    rows = [("s", S260, "| stories260K | 4.123 → 4.135, 0.0072, 96.0% | 4.165, 0.0099, 94.8% | 4.155, 0.0101, 94.5% |",
             (4.123, 4.135, 0.0072, 0.960), (4.165, 0.0099, 0.948), (4.155, 0.0101, 0.945)),
            ("t", S656, "| TinyStories-656K | 34.449 → 34.649, 0.0119, 92.5% | 35.015, 0.0204, 88.3% | 35.046, 0.0207, 88.4% |",
             (34.449, 34.649, 0.0119, 0.925), (35.015, 0.0204, 0.883), (35.046, 0.0207, 0.884))]
    out = []
    for m, path, text, mo, ct, mx in rows:
        def add(var, field, value, tol):
            out.append({"name": f"INT8 table {m}-{var} {field}", "readme": text, "cost": "slow",
                        "needs": [f"{m}-{var}"],
                        "cmd": f"build/qforge eval kl {path} $SCRATCH/c/{m}-{var} {KL30}",
                        "kind": "json", "field": field, "value": value, "tol": tol})
        add("sq-mo", "ppl_base", mo[0], 5e-4)
        add("sq-mo", "ppl_quant", mo[1], 5e-4)
        add("sq-mo", "kl_mean", mo[2], 5e-5)
        add("sq-mo", "top1", mo[3], 5e-4)
        for var, vals in (("sq-ct", ct), ("i8max", mx)):
            add(var, "ppl_quant", vals[0], 5e-4)
            add(var, "kl_mean", vals[1], 5e-5)
            add(var, "top1", vals[2], 5e-4)
    for m, path, vals in (("s", S260, {"0.8": 0.0048, "0.5": 0.0055}),
                          ("t", S656, {"0.8": 0.0066, "0.5": 0.0126})):
        for a, v in vals.items():
            out.append({"name": f"SmoothQuant alpha {a} {m} kl_mean", "cost": "slow",
                        "readme": "alpha 0.8 gives mean KL 0.0048 (stories260K) and 0.0066 (TinyStories-656K), alpha 0.5 gives 0.0055 and 0.0126",
                        "needs": [f"{m}-sq{a}"],
                        "cmd": f"build/qforge eval kl {path} $SCRATCH/c/{m}-sq{a} {KL30}",
                        "kind": "json", "field": "kl_mean", "value": v, "tol": 5e-5})
    return out


CLAIMS += int8_claims()


def four_over_six_claims():
    # "Four Over Six" table: NVFP4 weight-only per --algo (calibrated ones 64 x 256 on
    # tinyshakespeare), eval kl on 30000 characters; the data-free rows' mean KL is fast.
    rows = [  # algo, W4A4, data-free, stories260K (ppl, kl, p99, top1), TinyStories-656K (...)
        ("max", False, True, (4.483, 0.0896, 0.694, 0.848), (36.527, 0.0769, 0.384, 0.783)),
        ("mse", False, True, (4.461, 0.0815, 0.632, 0.855), (36.822, 0.0761, 0.381, 0.794)),
        ("four_over_six", False, True, (4.436, 0.0707, 0.539, 0.864), (36.552, 0.0635, 0.336, 0.812)),
        ("local_hessian", False, False, (4.287, 0.0523, 0.394, 0.887), (36.273, 0.0525, 0.256, 0.828)),
        ("gptq", False, False, (4.432, 0.0756, 0.667, 0.865), (36.343, 0.0687, 0.354, 0.802)),
        ("local_hessian+gptq", False, False, (4.275, 0.0518, 0.416, 0.886), (36.393, 0.0571, 0.294, 0.820)),
        ("four_over_six+gptq", False, False, (4.357, 0.0580, 0.440, 0.877), (35.562, 0.0600, 0.307, 0.819)),
        ("max", True, False, (4.730, 0.1517, 1.180, 0.807), (39.459, 0.1621, 0.877, 0.707)),
        ("four_over_six", True, False, (4.677, 0.1307, 0.942, 0.816), (39.020, 0.1445, 0.774, 0.724)),
    ]
    out = []
    for algo, w4a4, free, s_vals, t_vals in rows:
        def cell(v, best):  # the README bolds each model's lowest mean KL
            kl = f"**{v[1]:.4f}**" if best else f"{v[1]:.4f}"
            return f"{v[0]:.3f}, {kl} / {v[2]:.3f} / {100 * v[3]:.1f}%"
        label = f"`{algo}`, W4A4" if w4a4 else f"`{algo}`"
        data = "amax" if w4a4 else "none" if free else "XᵀX"
        best_s = algo == "local_hessian+gptq" and not w4a4
        best_t = algo == "local_hessian" and not w4a4
        row = f"| {label} | {data} | {cell(s_vals, best_s)} | {cell(t_vals, best_t)} |"
        for m, path, vals in (("s", S260, s_vals), ("t", S656, t_vals)):
            key = f"{m}-46-{algo}{'-w4a4' if w4a4 else ''}"
            flags = f"--format nvfp4 --algo {algo}" + ("" if free else f" {CAL64}") + (
                " --activations nvfp4" if w4a4 else "")
            PREP[key] = f"build/qforge quantize {path} -o $SCRATCH/c/{key} -q {flags}"
            for field, value, tol in (("ppl_quant", vals[0], 5e-4), ("kl_mean", vals[1], 5e-5),
                                      ("kl_p99", vals[2], 5e-4), ("top1", vals[3], 5e-4)):
                out.append({"name": f"Four Over Six table {key} {field}",
                            "readme": row, "needs": [key],
                            "cmd": f"build/qforge eval kl {path} $SCRATCH/c/{key} {KL30}",
                            "kind": "json", "field": field, "value": value, "tol": tol,
                            "cost": "fast" if free and field == "kl_mean" else "slow"})
    for m, path, v in (("s", S260, 4.123), ("t", S656, 34.449)):
        out.append({"name": f"Four Over Six table {m} base PPL", "cost": "fast",
                    "readme": "(base PPL 4.123 and 34.449)", "needs": [f"{m}-46-max"],
                    "cmd": f"build/qforge eval kl {path} $SCRATCH/c/{m}-46-max {KL30}",
                    "kind": "json", "field": "ppl_base", "value": v, "tol": 5e-4})
    return out


CLAIMS += four_over_six_claims()


def norm(s):
    return re.sub(r"\s+", " ", s).strip()


def check_claims(runner, readme, fast_only, only):
    made = {}
    nreadme = norm(readme)
    for c in CLAIMS:
        if only and not re.search(only, c["name"]):
            continue
        if fast_only and c.get("cost", "fast") != "fast":
            yield (("SKIP", c["name"], "slow figure check (run without --fast)", 0.0))
            continue
        if norm(c["readme"]) not in nreadme:
            yield (("FAIL", c["name"], "README no longer says: " + c["readme"], 0.0))
            continue
        t0 = time.time()
        bad = None
        for n in c.get("needs", []):
            if n not in made:
                rc, out, err, _ = runner.run(rewrite(PREP[n])[0])
                made[n] = None if rc == 0 else f"setup '{PREP[n]}': {first_error(err + out)}"
            if made[n]:
                bad = made[n]
        if bad:
            yield (("FAIL", c["name"], bad, time.time() - t0))
            continue
        rc, out, err, _ = runner.run(rewrite(c["cmd"])[0])
        msg = None
        if c["kind"] == "json":
            if rc != 0:
                msg = f"exit {rc}: {first_error(err + out)}"
            else:
                try:
                    got = json.loads(out)[c["field"]]
                except (ValueError, KeyError) as e:
                    got, msg = None, f"no '{c['field']}' in the JSON output ({e})"
                if got is not None:
                    if "rel" in c:
                        ok = abs(got - c["value"]) <= c["rel"] * abs(c["value"])
                        tol = f"{c['rel']:g} relative"
                    else:
                        ok = abs(got - c["value"]) <= c["tol"]
                        tol = f"±{c['tol']:g}"
                    detail = f"{c['field']} {got:.6g} vs README {c['value']:g} ({tol})"
                    msg = None if ok else detail
                    if ok and runner.verbose:
                        print("    " + detail)
        else:
            text = err if c["kind"] == "stderr" else out
            want_rc = c.get("rc", 0)
            if want_rc == "nonzero" and rc == 0:
                msg = "exit 0, expected a failure"
            elif want_rc != "nonzero" and rc != want_rc:
                msg = f"exit {rc}: {first_error(err + out)}"
            elif norm(c["text"].replace("$SCRATCH", runner.scratch)) not in norm(text):
                msg = f"{c['kind']} lacks '{c['text']}'; got: {first_error(text)}"
        yield (("FAIL" if msg else "PASS", c["name"], msg or "", time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--list", action="store_true", help="list the commands, run nothing")
    ap.add_argument("--fast", action="store_true",
                    help="skip commands marked '# check_readme: slow', calibrate with 8 x 64 tokens "
                         "where the README gives no --calib-samples, skip the slow figures")
    ap.add_argument("--only", help="regex: only commands / figure checks matching it")
    ap.add_argument("--no-figures", action="store_true", help="commands only")
    ap.add_argument("--no-commands", action="store_true", help="figures only")
    ap.add_argument("--timeout", type=int, default=int(os.environ.get("CHECK_README_TIMEOUT", 300)))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()

    with open(a.readme, encoding="utf-8") as f:
        readme = f.read()
    if not os.path.isdir(os.path.join(ROOT, FIX, "models")):
        print(f"check_readme: {FIX} not found next to the repository; nothing checked")
        return 77
    if not a.list and not os.access(qforge_binary(), os.X_OK):
        print(f"check_readme: {qforge_binary()} not found; run scripts/build.sh first")
        return 2

    scratch = tempfile.mkdtemp(prefix="qforge-readme-")
    setup(scratch)
    runner = Runner(scratch, a.timeout, a.verbose)
    t_start = time.time()
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    skips, fails = [], []

    def report(status, what, detail, secs):
        counts[status] += 1
        s = f"{status:4}  {secs:6.1f}s  {what}"
        if detail:
            s += "\n" + " " * 15 + ("-> " if status == "FAIL" else "") + detail
        print(s, flush=True)
        if status == "SKIP":
            skips.append((what, detail))
        if status == "FAIL":
            fails.append((what, detail))

    try:
        if not a.no_commands:
            print(f"== README commands ({os.path.relpath(a.readme, ROOT)}; scratch {scratch})")
            block = None
            for item in extract(readme):
                where = f"README:{item['line']}"
                if item["block"] != block:  # a new block starts without the relative outputs
                    block = item["block"]   # (out, plan.json, ...) of the one before
                    for e in os.listdir(scratch):
                        if any(re.fullmatch(k, e) for k in OUTPUT_NAMES):
                            shutil.rmtree(os.path.join(scratch, e), ignore_errors=True)
                if item["other"]:
                    if a.verbose:
                        print(f"--    {where} not a qforge command, not checked: {item['cmd']}")
                    continue
                if a.only and not re.search(a.only, item["cmd"]):
                    continue
                if item["skip"]:
                    report("SKIP", f"{where} {item['cmd']}", "reason: " + item["skip"], 0.0)
                    continue
                if item["slow"] and a.fast:
                    report("SKIP", f"{where} {item['cmd']}", "slow (--fast): " + item["slow"], 0.0)
                    continue
                for n, (cmd, label) in enumerate(variants(item["cmd"])):
                    if cmd is None:
                        report("SKIP", f"{where} {item['cmd']}{label}", "reason: " + label.strip(" ()"), 0.0)
                        continue
                    run_cmd, rewrites = rewrite(cmd)
                    if a.fast and "--calib " in run_cmd and "--calib-samples" not in run_cmd:
                        run_cmd = re.sub(r"(--calib \S+)", r"\1 --calib-samples 8 --calib-seq 64",
                                         run_cmd)
                        rewrites.append("--fast: --calib-samples 8 --calib-seq 64")
                        label += " (--fast: with --calib-samples 8 --calib-seq 64)"
                    script = "; ".join(item["env"] + [run_cmd])
                    what = f"{where} {item['cmd'] if n == 0 else cmd}{label}"
                    if n == 0 and len(variants(item["cmd"])) > 1:
                        what = f"{where} {cmd} (without the [optional] parts){label}"
                    if a.list:
                        print(f"LIST  {what}\n" + " " * 15 + script)
                        continue
                    if n > 0:  # remove what the run without the optional parts created
                        for e in snapshot(scratch) - before:
                            shutil.rmtree(os.path.join(scratch, e), ignore_errors=True)
                        for e in snapshot(os.path.join(scratch, "tmp")) - before_tmp:
                            shutil.rmtree(os.path.join(scratch, "tmp", e), ignore_errors=True)
                    before = snapshot(scratch)
                    before_tmp = snapshot(os.path.join(scratch, "tmp"))
                    # Lines with placeholder models are alternatives, not a sequence: their output
                    # (`-o out`) is a fresh directory each time.
                    if any(r.startswith("path/to/") for r in rewrites):
                        for o in re.findall(r"(?:-o|--output)\s+\$SCRATCH/(\S+)", run_cmd):
                            shutil.rmtree(os.path.join(scratch, o), ignore_errors=True)
                    rc, out, err, secs = runner.run(script)
                    detail = ("rewritten: " + ", ".join(rewrites)) if (rewrites and a.verbose) else ""
                    if rc == 0:
                        report("PASS", what, detail, secs)
                    else:
                        report("FAIL", what, f"exit {rc}: {first_error(err + out)}", secs)
        if not a.no_figures and not a.list:
            print("== README figures and messages (CLAIMS in scripts/check_readme.py)")
            for status, name, detail, secs in check_claims(runner, readme, a.fast, a.only):
                report(status, name, detail, secs)
    finally:
        if a.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    if a.list:
        return 0
    if skips:
        print("== skipped")
        for what, why in skips:
            print(f"  {what}: {why}")
    print(f"check_readme: {counts['PASS']} passed, {counts['FAIL']} failed, "
          f"{counts['SKIP']} skipped in {time.time() - t_start:.0f} s")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
