"""The interop matrix: models x dtypes x formats x targets, and the qforge flags of each case.

No torch import: every script (either venv) reads this.
"""
import json
import os

FIXTURES = os.environ.get("QF_FIXTURES", "/work/shared/fixtures")
WORK = os.environ.get("QF_INTEROP_WORK", "/tmp/qforge-interop")
MODELS = {
    "stories260K": os.path.join(FIXTURES, "models/stories260K-hf"),
    "tinystories-656K": os.path.join(FIXTURES, "models/tinystories-656K-hf"),
}
DTYPES = ["f32", "bf16"]
CALIB = os.path.join(FIXTURES, "corpora/tinyshakespeare.txt")
# The calibration of the formats whose export carries calibrated scales (input_scale, k_scale,
# v_scale). run.sh writes the token windows these flags select (`qforge tokenize --calib ...
# --json`) to calib_windows_path(model) first, and the reference tools run their forward passes
# on exactly those windows.
CALIB_SAMPLES, CALIB_SEQ = 4, 64
QF_CALIB = ["--calib", CALIB, "--calib-samples", str(CALIB_SAMPLES), "--calib-seq", str(CALIB_SEQ),
            "--seed", "0"]
# leaf names of the calibrated tensors: compared by their distance in ulps, not counted as
# weight-tensor differences
CALIBRATED_LEAVES = ("input_scale", "input_global_scale", "k_scale", "v_scale")

# format -> (qforge flags, weight block along in_features that must divide it (0: none),
#            targets where both tools can write it)
FORMATS = {
    "nvfp4":        (["--format", "nvfp4"], 16, ("modelopt", "ct")),
    "nvfp4_w4a4":   (["--format", "nvfp4", "--activations", "nvfp4"] + QF_CALIB, 16, ("modelopt", "ct")),
    "mxfp4":        (["--format", "mxfp4"], 32, ("modelopt", "ct")),
    "fp8_channel":  (["--format", "fp8"], 0, ("modelopt", "ct")),
    "fp8_tensor":   (["--format", "fp8", "--activations", "fp8"] + QF_CALIB, 0, ("modelopt", "ct")),
    "fp8_kv":       (["--format", "fp8", "--activations", "fp8", "--kv-cache", "fp8"] + QF_CALIB, 0,
                     ("modelopt", "ct")),
    "int4_g128":    (["--format", "int4", "--group-size", "128"], 128, ("modelopt", "ct")),
    "int4_g32":     (["--format", "int4", "--group-size", "32"], 32, ("modelopt", "ct")),
    "int4_channel": (["--format", "int4", "--group-size", "channel"], 0, ("modelopt", "ct")),
    "int8":         (["--format", "int8", "--activations", "int8", "--algo", "max"] + QF_CALIB, 0,
                     ("modelopt", "ct")),
    # Four Over Six (ModelOpt NVFP4_FOUR_OVER_SIX_CFG, weight-only and as the preset: W4A4).
    # ModelOpt's 4/6 calibration needs its Triton kernel, i.e. a GPU: ref_modelopt.py runs it on
    # the CPU with that one kernel written in PyTorch (cpu_static_blockwise_fp4_fake_quant).
    # llm-compressor has no 4/6.
    "nvfp4_4o6":      (["--format", "nvfp4", "--algo", "four_over_six"], 16, ("modelopt",)),
    "nvfp4_4o6_w4a4": (["--format", "nvfp4", "--activations", "nvfp4", "--algo", "four_over_six"]
                       + QF_CALIB, 16, ("modelopt",)),
}
CALIBRATED = {"nvfp4_w4a4", "fp8_tensor", "fp8_kv", "int8", "nvfp4_4o6_w4a4"}
TARGET_FLAGS = {"modelopt": [], "ct": ["--export", "compressed-tensors"]}


def input_dir(model, dtype):
    return os.path.join(WORK, "inputs", f"{model}-{dtype}")


def calib_windows_path(model):
    return os.path.join(WORK, f"calib-{model}.json")


def calib_windows(model):
    """The calibration token windows qforge uses for `model` (list of lists of ids)."""
    with open(calib_windows_path(model)) as f:
        return json.load(f)["windows"]


def out_dir(model, dtype, fmt, target, who):
    return os.path.join(WORK, "out", f"{model}-{dtype}", fmt, target, who)


def linear_shapes(model):
    """module name -> (out, in) of every decoder Linear, from the fixture's safetensors header."""
    import struct
    path = os.path.join(MODELS[model], "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    out = {}
    for k, v in hdr.items():
        if k.startswith("model.layers.") and k.endswith("_proj.weight"):
            out[k[: -len(".weight")]] = tuple(v["shape"])
    return out


def excluded(model, fmt, target):
    """Linears left unquantized (qforge's rule, mirrored in the reference configs): in_features not a
    multiple of the format's block; compressed-tensors INT4 also packs 8 codes per int32 along in."""
    block = FORMATS[fmt][1]
    if target == "ct" and fmt.startswith("int4"):
        block = max(block, 8)
    return sorted(m for m, (o, i) in linear_shapes(model).items() if block and i % block)


def cases():
    for model in MODELS:
        for dtype in DTYPES:
            for fmt, (_, _, targets) in FORMATS.items():
                for target in targets:
                    # stories260K has no Linear whose in_features 128 divides: nothing to compare
                    if len(excluded(model, fmt, target)) == len(linear_shapes(model)):
                        continue
                    yield model, dtype, fmt, target


def run_reference(tool, target, run, argv):
    """Runs `run(model, dtype, fmt, out)` for every case of `target` (argv: [--only SUBSTRING ...]),
    recording each outcome in WORK/status-<tool>.json; a failing case is recorded, the others
    still run."""
    import time
    import traceback
    only = argv[2:] if len(argv) > 2 and argv[1] == "--only" else []
    status = {}
    for model, dtype, fmt, tgt in cases():
        if tgt != target:
            continue
        key = f"{model}-{dtype}/{fmt}"
        if only and not any(s in key for s in only):
            continue
        out = out_dir(model, dtype, fmt, tgt, "ref")
        t = time.time()
        try:
            run(model, dtype, fmt, out)
            status[key] = {"ok": True, "seconds": round(time.time() - t, 2)}
            print(f"{tool} {key}: ok ({time.time() - t:.1f} s)", flush=True)
        except Exception as e:
            traceback.print_exc()
            status[key] = {"ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            print(f"{tool} {key}: FAILED {status[key]['error']}", flush=True)
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, f"status-{tool}.json")
    old = json.load(open(path)) if os.path.exists(path) else {}
    old.update(status)
    json.dump(old, open(path, "w"), indent=1)
