"""Nemotron-H exports against the real tools, on the two tiny conformance models
(tests/data/conformance/nemotron_h{,_latent}: hybrid Mamba2 + attention + MLP + MoE, random BF16
weights, vocab 256; a byte-level tokenizer is added so the qforge CLI reads text).

Per case and per qforge run in RUNS (edit RUNS to add one: a name, the quantize flags, and
optionally the reference that makes the same math with the real tool):
  1. qforge quantize, then `qforge eval kl ORIGINAL EXPORT` (EVAL_TEXT, 3000 characters, ctx 128).
  2. compressed-tensors exports: transformers (this venv) loads them in float32
     (output_loading_info: missing / unexpected / mismatched keys) and runs qforge's eval windows
     (the same ids, BOS included, windows overlapping by one token) through the export and through
     the BF16 original loaded in float32; KL(original || export) as `eval kl` computes it. Also with
     the routed experts replaced by qforge's tensors dequantized here ("experts fixed"), since
     transformers' fused NemotronH experts are not decompressed with their scales (see the report).
  3. ModelOpt exports: transformers has no loader for hf_quant_config NVFP4 / FP8. The tensor
     names are checked against what vLLM needs (specs moe-hybrid §3.4-3.5) and, where ModelOpt
     runs on the CPU, against ModelOpt's own export of the same model (qforge with
     --scale-division cpu; bytes per tensor).
  4. References: llm-compressor (its venv: `nemotron_h.py llmc SCHEME SRC OUT [WINDOWS]`) and
     ModelOpt (its venv: `nemotron_h.py modelopt CFG SRC OUT [WINDOWS]`) on the same BF16 model;
     names, dtypes, shapes, config and bytes compared with qforge's export.
Writes $QF_INTEROP_WORK/nemotron_h/nemotron_h.md.

usage: nemotron_h.py run QFORGE LLMC_PYTHON MODELOPT_PYTHON   (the harness, in the MoE venv)
       nemotron_h.py llmc SCHEME SRC OUT [WINDOWS_JSON]       (llm-compressor, in its venv)
       nemotron_h.py modelopt CFG SRC OUT [WINDOWS_JSON]      (ModelOpt, in its venv)
"""
import json
import os
import struct
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
CONF = os.path.join(ROOT, "tests", "data", "conformance")
WORK = os.path.join(os.environ.get("QF_INTEROP_WORK", "/tmp/qforge-interop"), "nemotron_h")
CASES = ["nemotron_h", "nemotron_h_latent"]
CORPUS = os.environ.get("QF_INTEROP_CORPUS", "/work/shared/fixtures/corpora/tinyshakespeare.txt")
CALIB = ["--calib", CORPUS, "--calib-samples", "4", "--calib-seq", "64"]
EVAL = ["--text", CORPUS, "--max-chars", "3000", "--ctx", "128"]

# The qforge runs: (name, quantize flags, reference). The export kind follows from the flags
# (--export compressed-tensors, else ModelOpt). reference: None, ("llmc", SCHEME) or
# ("modelopt", CFG), SCHEME / CFG being keys of LLMC_SCHEMES / MODELOPT_CFGS below; a ModelOpt
# reference is compared with a second qforge export made with --scale-division cpu (ModelOpt's CPU
# arithmetic). To add the mixed-precision presets later, e.g.:
#   ("preset_mixed_modelopt", ["--preset", "NAME", *CALIB], ("modelopt", "mixed")),
#   ("preset_mixed_ct", ["--preset", "NAME", *CALIB, "--export", "compressed-tensors"], ("llmc", "mixed")),
# with a "mixed" entry in MODELOPT_CFGS / LLMC_SCHEMES (NVFP4 routed experts, FP8 W8A8 Mamba
# in_proj/out_proj, attention BF16).
RUNS = [
    ("nvfp4_ct", ["--format", "nvfp4", "--export", "compressed-tensors"], ("llmc", "nvfp4a16")),
    ("nvfp4_modelopt", ["--format", "nvfp4"], ("modelopt", "w4a16_nvfp4")),
    ("fp8_w8a8_ct", ["--format", "fp8", "--activations", "fp8", *CALIB, "--export", "compressed-tensors"],
     ("llmc", "fp8")),
    ("fp8_w8a8_modelopt", ["--format", "fp8", "--activations", "fp8", *CALIB], ("modelopt", "fp8")),
    ("4o6_ct", ["--algo", "four_over_six", "--export", "compressed-tensors"], None),
    ("4o6_modelopt", ["--algo", "four_over_six"], ("modelopt", "nvfp4_4o6")),
    # NVIDIA's recipes as qforge presets: mixed NVFP4 W4A16 (Four Over Six) / FP8 W8A8 / BF16
    # with FP8 KV scales; compressed-tensors exports are loaded by transformers as above.
    ("lightning_ct", ["--preset", "nemotron-3.5-lightning-w4a16-nvfp4-4o6", *CALIB,
                      "--export", "compressed-tensors"], None),
    ("lightning_modelopt", ["--preset", "nemotron-3.5-lightning-w4a16-nvfp4-4o6", *CALIB], None),
    ("super_ct", ["--preset", "nemotron-3-super-nvfp4", *CALIB, "--export", "compressed-tensors"],
     None),
    # Lightning's mix without Four Over Six (which llm-compressor lacks), against llm-compressor's
    # config_groups of the same schemes: bytes, names, config.
    ("mixed_ct", ["--recipe", os.path.join(WORK, "mixed.yaml"), *CALIB, "--export",
                  "compressed-tensors"], ("llmc", "mixed")),
]
MIXED_RECIPE = """rules:
  - {match: "*.mixer.experts.*", format: nvfp4}
  - {match: "*.mixer.shared_experts.*", format: nvfp4}
  - {match: "*.mixer.in_proj", format: fp8, activations: fp8}
  - {match: "*.mixer.out_proj", format: fp8, activations: fp8}
  - {match: "*", format: keep}
"""
# Tensors whose values come from calibration (compared as relative differences, not bytes).
CALIBRATED = (".input_scale", ".input_global_scale", ".k_scale", ".v_scale")


# ---------------------------------------------------------------------------------------------
# llm-compressor (its venv)

def llmc_modifier(scheme):
    from llmcompressor.modifiers.quantization import QuantizationModifier
    # The MoE router is NemotronHTopkRouter (a parameter, not a Linear); conv1d is a Conv1d.
    ignore = ["lm_head", "re:.*mixer\\.gate$"]
    if scheme == "nvfp4a16":
        return QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=ignore)
    if scheme == "fp8":  # static per-tensor W8A8, as qforge --format fp8 --activations fp8
        return QuantizationModifier(targets="Linear", scheme="FP8", ignore=ignore)
    if scheme == "mixed":  # the Lightning preset's mix, less Four Over Six: llm-compressor has none
        from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
        return QuantizationModifier(
            config_groups={
                "group_0": preset_name_to_scheme("FP8", ["re:.*mixer\\.(in|out)_proj$"]),
                "group_1": preset_name_to_scheme("NVFP4A16", ["re:.*mixer\\.(shared_)?experts\\..*"]),
            },
            ignore=ignore)
    raise ValueError(scheme)


def llmc(scheme, src, out, windows=None):
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    kw = {}
    if windows:
        from datasets import Dataset
        from transformers import AutoTokenizer
        ids = json.load(open(windows))["windows"]
        kw = dict(dataset=Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(w) for w in ids]}),
                  num_calibration_samples=len(ids), max_seq_length=len(ids[0]),
                  processor=AutoTokenizer.from_pretrained(src))
    oneshot(model=m, recipe=llmc_modifier(scheme), **kw)
    m.save_pretrained(out, save_compressed=True)


# ---------------------------------------------------------------------------------------------
# ModelOpt (its venv)

def modelopt_cfg(name):
    import copy
    import modelopt.torch.quantization as mtq
    if name == "w4a16_nvfp4":
        return copy.deepcopy(mtq.W4A16_NVFP4_CFG)
    if name == "fp8":
        return copy.deepcopy(mtq.FP8_DEFAULT_CFG)
    if name == "nvfp4_4o6":  # the preset with its input quantizers off: W4A16, as qforge --algo four_over_six
        cfg = copy.deepcopy(mtq.NVFP4_FOUR_OVER_SIX_CFG)
        cfg["quant_cfg"].append({"quantizer_name": "*input_quantizer", "enable": False})
        return cfg
    raise ValueError(name)


def modelopt(name, src, out, windows=None):
    import torch
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM
    sys.path.insert(0, HERE)
    from ref_modelopt import install_cpu_fp4_kernel  # 4/6's Triton kernel, in PyTorch on the CPU
    install_cpu_fp4_kernel()
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    if windows:
        ids = [torch.tensor([w]) for w in json.load(open(windows))["windows"]]
    else:  # weight-only: max calibration needs no data, but quantize() wants a forward loop
        ids = [torch.tensor([[(i * 37 + 11) % 256 for i in range(32)]])]

    def loop(mm):
        with torch.no_grad():
            for x in ids:
                mm(x)
    mtq.quantize(m, modelopt_cfg(name), forward_loop=loop)
    export_hf_checkpoint(m, export_dir=out)


# ---------------------------------------------------------------------------------------------
# The harness (MoE venv: transformers 5.24 + compressed-tensors)

sys.path.insert(0, HERE)


def qf(qforge, *args):
    r = subprocess.run(["nice", qforge, *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
    return r.stdout


def header(path):
    """name -> (dtype, shape, bytes) of every tensor in a checkpoint folder."""
    from moe import raw_tensors
    return raw_tensors(path)


def is_weight(k):  # the tensors whose bytes follow from the weights alone (RTN / max)
    return k.endswith((".weight_packed", ".weight_scale", ".weight_scale_2", ".weight_global_scale")) or \
        (k.endswith(".weight") and not k.endswith("norm.weight"))


def compare(ref_dir, qf_dir):
    """Tensor-by-tensor comparison of two exports: a dict of counts and differing names."""
    a, b = header(ref_dir), header(qf_dir)
    r = {"n_ref": len(a), "n_qf": len(b), "only_ref": sorted(set(a) - set(b)), "only_qf": sorted(set(b) - set(a)),
         "kind": [], "w_total": 0, "w_same": 0, "w_diff": [], "calib": [], "other_diff": []}
    for k in sorted(set(a) & set(b)):
        (da, sa, ba), (db, sb, bb) = a[k], b[k]
        if (da, sa) != (db, sb):
            r["kind"].append(f"`{k}` {da}{sa} vs {db}{sb}")
        if k.endswith(CALIBRATED):
            r["calib"].append(k)
        elif ".mixer.gate." in k or "embeddings" in k or k.startswith("lm_head") or not is_weight(k):
            if ba != bb:
                r["other_diff"].append(k)
        else:
            r["w_total"] += 1
            if ba == bb:
                r["w_same"] += 1
            else:
                r["w_diff"].append(k)
    return r


def calib_rel(ref_dir, qf_dir):
    """name -> |qforge / reference - 1| of every calibrated scalar tensor."""
    from moe import st_tensors
    a, b = st_tensors(ref_dir), st_tensors(qf_dir)
    return {k: float((b[k].double() / a[k].double() - 1).abs().max()) for k in a if k in b and k.endswith(CALIBRATED)}


def config_diff(ref_dir, qf_dir, kind):
    out = []
    if kind == "ct":
        qa = json.load(open(os.path.join(ref_dir, "config.json")))["quantization_config"]
        qb = json.load(open(os.path.join(qf_dir, "config.json")))["quantization_config"]
        for k in sorted(set(qa) | set(qb)):
            if k == "version":
                continue
            va, vb = qa.get(k), qb.get(k)
            if k == "ignore":
                va, vb = sorted(va or []), sorted(vb or [])
                if va != vb:
                    out.append(f"ignore: only llm-compressor {sorted(set(va) - set(vb))}, only qforge {sorted(set(vb) - set(va))}")
            elif k == "config_groups":
                # group names aside: compare the set of (targets, weights, input_activations)
                def norm(g):
                    return sorted(json.dumps({f: v.get(f) for f in ("targets", "weights", "input_activations", "output_activations", "format")},
                                             sort_keys=True) for v in (g or {}).values())
                na, nb = norm(va), norm(vb)
                if na != nb:
                    for x, y in zip(na, nb):
                        ja, jb = json.loads(x), json.loads(y)
                        for f in ja:
                            if ja[f] != jb[f]:
                                if isinstance(ja[f], dict) and isinstance(jb[f], dict):
                                    for g in sorted(set(ja[f]) | set(jb[f])):
                                        if ja[f].get(g) != jb[f].get(g):
                                            out.append(f"config_groups.{f}.{g}: {ja[f].get(g)!r} vs {jb[f].get(g)!r}")
                                else:
                                    out.append(f"config_groups.{f}: {ja[f]!r} vs {jb[f]!r}")
                    if len(na) != len(nb):
                        out.append(f"config_groups: {len(na)} vs {len(nb)} groups")
            elif va != vb:
                out.append(f"{k}: {va!r} vs {vb!r}")
    else:
        qa = json.load(open(os.path.join(ref_dir, "hf_quant_config.json")))["quantization"]
        qb = json.load(open(os.path.join(qf_dir, "hf_quant_config.json")))["quantization"]
        for k in sorted(set(qa) | set(qb)):
            va, vb = qa.get(k), qb.get(k)
            if k == "exclude_modules":
                sent = [x for x in va or [] if "\x00" in x]
                va = sorted(x.split(".\x00")[0] for x in va or [])
                vb = sorted(vb or [])
                if sent:
                    out.append(f"exclude_modules: ModelOpt's entries end in a '.\\x00backbone.pt_name_sentinel' suffix ({len(sent)} of {len(qa[k])}; stripped here)")
                if va != vb:
                    out.append(f"exclude_modules: only ModelOpt {sorted(set(va) - set(vb))}, only qforge {sorted(set(vb) - set(va))}")
            elif va != vb:
                out.append(f"{k}: {va!r} vs {vb!r}")
    return out


def spec_check(export, activations):
    """What vLLM's nemotron_h.py needs of a ModelOpt export (specs moe-hybrid §3.4-3.5)."""
    import re
    t = header(export)
    q = json.load(open(os.path.join(export, "hf_quant_config.json")))["quantization"]
    algo = q.get("quant_algo")
    fp8 = algo == "FP8"
    probs, seen = [], set()

    def scalar_f32(k):
        return k in t and t[k][0] == "F32" and t[k][1] in ([], [1])
    for k in t:
        if k.endswith("mixer.conv1d.weight") and t[k][0] != "BF16":
            probs.append(f"`{k}` {t[k][0]} (conv1d must stay BF16)")
        if ".conv1d." in k and not k.endswith((".weight", ".bias")):
            probs.append(f"`{k}`: conv1d carries quantization tensors")
    for k in sorted(t):
        m = re.match(r"(.*\.mixer\.(in_proj|out_proj))\.weight$", k)
        if m:
            p = m.group(1)
            seen.add("mamba")
            # A mixed export (MIXED_PRECISION) says each module's scheme in quantized_layers.
            layer_algo = q.get("quantized_layers", {}).get(p, {}).get("quant_algo", algo)
            if layer_algo == "FP8" or (fp8 and layer_algo == algo):
                if t[k][0] != "F8_E4M3":
                    probs.append(f"`{k}` {t[k][0]}, want F8_E4M3")
                if not scalar_f32(p + ".weight_scale"):
                    probs.append(f"`{p}.weight_scale` {t.get(p + '.weight_scale', ('absent',))[:2]}, want an F32 scalar")
                if activations and not scalar_f32(p + ".input_scale"):
                    probs.append(f"`{p}.input_scale` {t.get(p + '.input_scale', ('absent',))[:2]}, want an F32 scalar")
            else:
                if t[k][0] != "U8" or (p + ".weight_scale_2") not in t:
                    probs.append(f"`{k}` {t[k][0]} without NVFP4 scales")
    # q/k/v: one format and one scale set (vLLM stacks them into qkv_proj)
    for k in sorted(t):
        m = re.match(r"(.*\.mixer\.)q_proj\.weight$", k)
        if not m:
            continue
        seen.add("qkv")
        pre = m.group(1)
        # names and dtypes (shapes differ: q has more rows than k / v under GQA)
        # (the FP8 KV-cache scales ride on k_proj / v_proj: not part of the scale set)
        sets = [sorted((s[len(pre) + 6:], t[s][0]) for s in t if s.startswith(pre + p + "_proj.")
                       and not s.endswith((".k_scale", ".v_scale"))) for p in "qkv"]
        if not (sets[0] == sets[1] == sets[2]):
            probs.append(f"`{pre}q/k/v_proj`: different tensor sets {sets}")
        for sfx in (".weight_scale_2", ".input_scale"):
            vals = {t[pre + p + "_proj" + sfx][2] for p in "qkv" if pre + p + "_proj" + sfx in t}
            if len(vals) > 1:
                probs.append(f"`{pre}q/k/v_proj{sfx}` differ (vLLM takes one)")
    # routed experts: per expert, with the format's scales; input_scale equal across experts
    experts = {}
    for k in t:
        m = re.match(r"(.*\.mixer\.experts)\.(\d+)\.(up_proj|down_proj)\.(.*)$", k)
        if m:
            experts.setdefault((m.group(1), m.group(3)), {}).setdefault(int(m.group(2)), {})[m.group(4)] = t[k]
    for (pre, proj), per in sorted(experts.items()):
        seen.add("experts")
        for e, names in sorted(per.items()):
            # A mixed export's experts follow their own quantized_layers entry.
            layer = q.get("quantized_layers", {}).get(f"{pre}.{e}.{proj}", {}).get("quant_algo", algo)
            eight = layer == "FP8" or (fp8 and layer == algo)
            quantized_input = layer in ("NVFP4", "FP8") if layer != algo else activations
            want = {"weight", "weight_scale"} | ({"weight_scale_2"} if not eight else set()) | \
                ({"input_scale"} if quantized_input else set())
            if set(names) != want:
                probs.append(f"`{pre}.{e}.{proj}`: {sorted(names)}, want {sorted(want)}")
        if activations and len({names.get("input_scale", (0, 0, b""))[2] for names in per.values()}) > 1:
            probs.append(f"`{pre}.*.{proj}.input_scale` differ across experts")
    for part in ("mamba", "qkv", "experts"):
        if part not in seen:
            probs.append(f"no {part} tensors found")
    return probs


def eval_windows(ids, ctx):
    """qforge eval's windows: (inputs, targets) starting every ctx tokens, overlapping by one."""
    out, n, s = [], len(ids), 0
    while s + 1 < n:
        m = min(ctx, n - 1 - s)
        out.append((ids[s:s + m], ids[s + 1:s + m + 1]))
        s += ctx
    return out


def kl_stats(base, quant, windows):
    """KL(base || quant) mean / p99, top-1 agreement, both PPLs, as `qforge eval kl` computes them."""
    import math
    import torch
    kls, agree, nb, nq, n = [], 0, 0.0, 0.0, 0
    with torch.no_grad():
        for x, y in windows:
            xi = torch.tensor([x])
            pb = torch.log_softmax(base(xi).logits[0].double(), -1)
            pq = torch.log_softmax(quant(xi).logits[0].double(), -1)
            kls += (pb.exp() * (pb - pq)).sum(-1).clamp(min=0).tolist()
            agree += int((pb.argmax(-1) == pq.argmax(-1)).sum())
            yi = torch.tensor(y)
            nb -= float(pb[torch.arange(len(y)), yi].sum())
            nq -= float(pq[torch.arange(len(y)), yi].sum())
            n += len(y)
    s = sorted(kls)
    return {"kl_mean": sum(kls) / n, "kl_p99": s[max(math.ceil(0.99 * n), 1) - 1], "top1": agree / n,
            "ppl_base": math.exp(nb / n), "ppl_quant": math.exp(nq / n), "tokens": n}


E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def dequant(t, name):
    """A Linear's weight from qforge's compressed-tensors tensors (NVFP4 or FP8), in float32."""
    import torch
    if name + ".weight_packed" in t:
        p = t[name + ".weight_packed"]
        codes = torch.stack([p & 15, p >> 4], -1).reshape(p.shape[0], -1).long()
        s = t[name + ".weight_scale"].float().repeat_interleave(16, 1)
        return torch.tensor(E2M1)[codes] * s / t[name + ".weight_global_scale"].float()
    return t[name + ".weight"].float() * t[name + ".weight_scale"].float()


def fix_experts(mq, t):
    """Put qforge's routed experts, dequantized here, into transformers' fused NemotronH experts
    (`model.layers.N.mixer.experts.{up,down}_proj [E, out, in]`). Returns the largest difference
    between what transformers loaded and the dequantized weights."""
    import re
    import torch
    sd = mq.state_dict()
    worst = 0.0
    with torch.no_grad():
        for k in t:
            m = re.match(r"backbone\.(layers\.\d+\.mixer\.experts)\.(\d+)\.(up_proj|down_proj)\.(weight_packed|weight)$", k)
            if not m:
                continue
            w = dequant(t, k.rsplit(".", 1)[0])
            dst = sd[f"model.{m.group(1)}.{m.group(3)}"][int(m.group(2))]
            worst = max(worst, float((dst - w).abs().max()))
            dst.copy_(w)
    return worst


def transformers_check(orig, export, windows):
    import torch
    from transformers import AutoModelForCausalLM
    from moe import st_tensors
    base = AutoModelForCausalLM.from_pretrained(orig, dtype=torch.float32).eval()
    mq, info = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32, output_loading_info=True)
    mq.eval()
    info = {k: sorted(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    raw = kl_stats(base, mq, windows)
    loaded_vs_deq = fix_experts(mq, st_tensors(export))
    fixed = kl_stats(base, mq, windows)
    return info, raw, fixed, loaded_vs_deq


def keys_summary(info):
    if not info:
        return "none"
    out = []
    for k, v in info.items():
        short = sorted({x.split(".experts.")[0] + ".experts.*." + x.split(".experts.")[1].split(".", 1)[1]
                        if ".experts." in x else x for x in v})
        out.append(f"{len(v)} {k.split('_')[0]}: " + ", ".join(f"`{x}`" for x in short[:4]) + (" …" if len(short) > 4 else ""))
    return "; ".join(out)


def run(qforge, llmc_python, modelopt_python):
    import torch
    import transformers
    from moe import byte_level_tokenizer
    transformers.logging.set_verbosity_error()
    import compressed_tensors.compressors.nvfp4.base as ct_nvfp4
    # FP4 codes unpack to BF16 whatever the load dtype; float32 loads need float32 (as load_ct.py).
    unpack = ct_nvfp4.unpack_fp4_from_uint8
    ct_nvfp4.unpack_fp4_from_uint8 = lambda a, m, n, dtype=None: unpack(a, m, n, torch.float32)
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, "mixed.yaml"), "w") as f:
        f.write(MIXED_RECIPE)
    md = [f"# Nemotron-H exports against the real tools\n\ntransformers {transformers.__version__}, torch {torch.__version__}; "
          f"qforge `{qforge}`; eval text: first 3000 characters of `{CORPUS}`, windows of 128 "
          f"(qforge's ids and windows); calibration: `{' '.join(CALIB[2:])}` on the same file.\n"]
    problems = []
    for case in CASES:
        src = os.path.join(CONF, case)
        cw = os.path.join(WORK, case)
        subprocess.run(["rm", "-rf", cw], check=True)
        os.makedirs(cw)
        base = os.path.join(cw, "model")
        subprocess.run(["cp", "-r", src, base], check=True)
        json.dump(byte_level_tokenizer(), open(os.path.join(base, "tokenizer.json"), "w"))
        # qforge's eval ids: the tokenizer's ids of the first 3000 characters, BOS first when its
        # tokenizer has one (checked against eval kl's token count below).
        text = open(CORPUS, encoding="utf-8").read()[:3000]
        tf = os.path.join(cw, "eval.txt")
        open(tf, "w", encoding="utf-8").write(text)
        ids = json.loads(qf(qforge, "tokenize", base, "--file", tf, "--json", "--no-bos"))["ids"]
        bos = json.load(open(os.path.join(base, "config.json"))).get("bos_token_id")
        win_json = os.path.join(cw, "calib-windows.json")
        open(win_json, "w").write(qf(qforge, "tokenize", base, *CALIB, "--json"))
        refs = {}
        rows = ["| export | transformers load: missing / unexpected / mismatched keys | KL mean qforge | KL mean transformers (as loaded) | KL mean transformers (experts fixed) | KL p99 qforge / transformers | top-1 qforge / transformers | PPL base qforge / transformers | vs reference: weight tensors identical | config differences | calibrated scales (max rel. diff) | ModelOpt spec check (vLLM §3.5) |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, flags, ref in RUNS:
            kind = "ct" if "compressed-tensors" in flags else "modelopt"
            out = os.path.join(cw, name)
            row = {"load": "n/a (ModelOpt: no transformers loader)", "tkl": "", "tkl_fixed": "", "ref": "", "cfg": "", "cal": "", "spec": "n/a"}
            try:
                qf(qforge, "quantize", base, "-o", out, *flags, "--json", "-q")
                kl = json.loads(qf(qforge, "eval", "kl", base, out, *EVAL, "--json"))
            except RuntimeError as e:
                rows.append(f"| {name} | qforge FAILED: {e} |" + " |" * 10)
                problems.append(f"{case}/{name}: qforge failed: {e}")
                continue
            eval_ids = ([bos] if kl["tokens"] == len(ids) and bos is not None else []) + ids
            windows = eval_windows(eval_ids, 128)
            # Calibrated runs (activations, or a recipe / preset that quantizes them) hand their
            # windows to the reference tool too.
            acts = ("--activations" in flags and flags[flags.index("--activations") + 1] != "none") \
                or "--recipe" in flags or "--preset" in flags
            if kind == "ct":
                try:
                    info, rawkl, fixed, dev = transformers_check(base, out, windows)
                    row["load"] = keys_summary(info)
                    row["tkl"] = f"{rawkl['kl_mean']:.5f}"
                    row["tkl_fixed"] = f"{fixed['kl_mean']:.5f} (loaded experts off by up to {dev:.3g})"
                    row["p99"] = f"{kl['kl_p99']:.4f} / {fixed['kl_p99']:.4f}"
                    row["top1"] = f"{kl['top1']:.4f} / {fixed['top1']:.4f}"
                    row["ppl"] = f"{kl['ppl_base']:.3f} / {fixed['ppl_base']:.3f}"
                    rel = abs(fixed["kl_mean"] / kl["kl_mean"] - 1) if kl["kl_mean"] else 0
                    if rel > 0.05:
                        problems.append(f"{case}/{name}: transformers KL {fixed['kl_mean']:.5f} (experts fixed) vs qforge {kl['kl_mean']:.5f} ({rel:.1%} apart)")
                except Exception as e:  # noqa: BLE001
                    row["load"] = f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    problems.append(f"{case}/{name}: transformers: {row['load']}")
            else:
                sp = spec_check(out, acts)
                row["spec"] = "ok" if not sp else "; ".join(sp[:6])
                problems += [f"{case}/{name}: spec: {p}" for p in sp]
            row.setdefault("p99", f"{kl['kl_p99']:.4f}")
            row.setdefault("top1", f"{kl['top1']:.4f}")
            row.setdefault("ppl", f"{kl['ppl_base']:.3f}")
            if ref:
                tool, scheme = ref
                ref_out = os.path.join(cw, f"ref_{tool}_{scheme}")
                if ref_out not in refs:
                    py = llmc_python if tool == "llmc" else modelopt_python
                    r = subprocess.run(["nice", py, __file__, tool, scheme, base, ref_out] + ([win_json] if acts else []),
                                       capture_output=True, text=True)
                    open(ref_out + ".log", "w").write(r.stdout + r.stderr)
                    refs[ref_out] = None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["failed"])[-1][:200]
                if refs[ref_out]:
                    row["ref"] = f"{tool} FAILED: {refs[ref_out]}"
                    problems.append(f"{case}/{name}: {row['ref']}")
                else:
                    mine = out
                    if tool == "modelopt":  # ModelOpt on the CPU divides exactly: qforge --scale-division cpu
                        mine = out + "_cpudiv"
                        qf(qforge, "quantize", base, "-o", mine, *flags, "--scale-division", "cpu", "--json", "-q")
                    c = compare(ref_out, mine)
                    who = "llm-compressor" if tool == "llmc" else "ModelOpt"
                    txt = f"{who} {scheme}: {c['w_same']}/{c['w_total']}"
                    if c["w_diff"]:
                        txt += " (differ: " + ", ".join(f"`{k}`" for k in c["w_diff"][:3]) + ")"
                    if c["only_ref"] or c["only_qf"]:
                        txt += f"; only {who} {c['only_ref'][:3]}, only qforge {c['only_qf'][:3]}"
                        problems.append(f"{case}/{name}: names only in {who}: {c['only_ref']}, only in qforge: {c['only_qf']}")
                    if c["kind"]:
                        txt += "; dtype/shape: " + ", ".join(c["kind"][:3])
                    if c["other_diff"]:
                        txt += "; other tensors differing: " + ", ".join(f"`{k}`" for k in c["other_diff"][:3])
                    row["ref"] = txt
                    cfg = config_diff(ref_out, mine, "ct" if tool == "llmc" else "modelopt")
                    row["cfg"] = "; ".join(cfg) or "none"
                    cal = calib_rel(ref_out, mine)
                    # Routed experts apart: qforge (like ModelOpt's shared quantizer) gives all
                    # experts of a layer one input_scale, llm-compressor calibrates each expert alone.
                    parts = []
                    for label, sel in (("routed experts", lambda k: ".experts." in k), ("others", lambda k: ".experts." not in k)):
                        sub = {k: v for k, v in cal.items() if sel(k)}
                        if sub:
                            k = max(sub, key=sub.get)
                            parts.append(f"{label}: {len(sub)}, max {sub[k]:.3g} (`{k}`)")
                    row["cal"] = "; ".join(parts)
            rows.append(f"| {name} | {row['load']} | {kl['kl_mean']:.5f} | {row['tkl'] or 'n/a'} | {row['tkl_fixed'] or 'n/a'} | "
                        f"{row['p99']} | {row['top1']} | {row['ppl']} | {row['ref'] or 'no reference'} | {row['cfg'] or 'n/a'} | "
                        f"{row['cal'] or 'n/a'} | {row['spec']} |")
            print(rows[-1], flush=True)
        md.append(f"\n## {case}\n\n" + "\n".join(rows) + "\n")
    md.append("\n## Findings\n\n" + ("\n".join(f"- {p}" for p in problems) or "- none") + "\n")
    path = os.path.join(WORK, "nemotron_h.md")
    open(path, "w").write("\n".join(md))
    print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1] in ("llmc", "modelopt"):
        fn = llmc if sys.argv[1] == "llmc" else modelopt
        fn(*sys.argv[2:5], sys.argv[5] if len(sys.argv) > 5 else None)
    else:
        run(os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4])
