"""Mixture-of-experts exports against the real tools (issue 10), on the tiny MoE conformance models
(tests/data/conformance/<case>, random weights, vocab 256; a byte-level tokenizer is added so the
qforge CLI can read text).

Per case:
  1. qforge quantize -> NVFP4 weight-only, compressed-tensors and ModelOpt exports, and `qforge eval kl`
     of each against the original (PPL, KL mean / p99, top-1 on README.md).
  2. llm-compressor (ref_llmc venv: `moe.py llmc CASE OUT`): oneshot NVFP4A16, routers ignored; its
     export is compared with qforge's tensor by tensor (bytes) and its quantization_config field by field.
  3. transformers (this venv) loads qforge's compressed-tensors export (missing / unexpected keys), and
     its logits on the reference input_ids are compared with the same model built from qforge's tensors
     dequantized here (w = e2m1 * e4m3 scale / global scale), before and after compensating
     transformers #48371 (NVFP4 MoE experts decompressed without weight_global_scale). gpt-oss's
     linearised experts (llm-compressor's layout) are not loaded by transformers at all: only the
     keys are reported.
  4. gpt-oss only: ModelOpt (its venv, CPU: `moe.py modelopt SRC OUT`, W4A16_NVFP4, max calibration)
     exports the fused `mlp.experts.gate_up_proj*` layout; qforge's ModelOpt export (with
     --scale-division cpu, ModelOpt's CPU arithmetic) is compared with it tensor by tensor (bytes) and hf_quant_config.json / quantization_config field by field.
Writes $QF_INTEROP_WORK/moe/moe.md.

usage: moe.py run QFORGE_BINARY LLMC_PYTHON [MODELOPT_PYTHON]   (the harness, in the MoE venv)
       moe.py llmc SRC OUT                                     (llm-compressor, in its venv)
       moe.py modelopt SRC OUT                                 (ModelOpt, in its venv)
"""
import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONF = os.path.join(ROOT, "tests", "data", "conformance")
WORK = os.path.join(os.environ.get("QF_INTEROP_WORK", "/tmp/qforge-interop"), "moe")
CASES = ["mixtral", "qwen2_moe", "qwen3_moe", "qwen3_moe_fused", "deepseek_v3", "deepseek_v3_q_direct", "gpt_oss"]
README = os.path.join(ROOT, "README.md")


def llmc(src, out):
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    # Routers as llm-compressor's MoE examples ignore them.
    ignore = ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:.*block_sparse_moe.gate$", "re:.*router$"]
    oneshot(model=m, recipe=QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=ignore))
    m.save_pretrained(out, save_compressed=True)


def modelopt(src, out):
    import torch
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    # Weight-only: max calibration needs no data, but quantize() wants a forward loop.
    ids = torch.tensor([[(i * 37 + 11) % 256 for i in range(32)]])
    mtq.quantize(m, mtq.W4A16_NVFP4_CFG, forward_loop=lambda mm: mm(ids))
    export_hf_checkpoint(m, export_dir=out)


def compare_dirs(a_dir, b_dir):
    """(tensors in a, in b, identical, differing names) of two checkpoint folders."""
    a, b = raw_tensors(a_dir), raw_tensors(b_dir)
    same = sum(1 for k in a if k in b and a[k] == b[k])
    diff = sorted(set(a) ^ set(b)) + [k for k in a if k in b and a[k] != b[k]]
    return len(a), len(b), same, diff


def byte_level_tokenizer():
    """tokenizer.json whose 256 tokens are the bytes (GPT-2's byte-to-unicode alphabet, no merges),
    as tests/test_util.cpp writes it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": level,
            "post_processor": None, "decoder": level,
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def st_tensors(path):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(path, f)))
    return out


def raw_tensors(path):
    """name -> (dtype, shape, bytes) of every tensor in a checkpoint folder."""
    import struct
    out = {}
    for f in sorted(os.listdir(path)):
        if not f.endswith(".safetensors"):
            continue
        raw = open(os.path.join(path, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        h = json.loads(raw[8:8 + n])
        h.pop("__metadata__", None)
        for k, v in h.items():
            b, e = v["data_offsets"]
            out[k] = (v["dtype"], v["shape"], raw[8 + n + b:8 + n + e])
    return out


def qf(qforge, *args):
    r = subprocess.run([qforge, *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
    return r.stdout


E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def dequantized_model(orig, export):
    """The original model with every Linear replaced by qforge's compressed-tensors tensors
    dequantized here, and the same model as transformers loads the export."""
    import torch
    from transformers import AutoModelForCausalLM
    e2m1 = torch.tensor(E2M1)
    t = st_tensors(export)

    def deq(name):
        p = t[name + ".weight_packed"]
        codes = torch.stack([p & 15, p >> 4], -1).reshape(p.shape[0], -1).long()
        s = t[name + ".weight_scale"].float().repeat_interleave(16, 1)
        return e2m1[codes] * s / t[name + ".weight_global_scale"].float()

    m = AutoModelForCausalLM.from_pretrained(orig, dtype=torch.float32)
    sd = m.state_dict()
    with torch.no_grad():
        for k in t:
            if not k.endswith(".weight_packed"):
                continue
            name = k[:-len(".weight_packed")]
            w = deq(name)
            if name + ".weight" in sd:
                sd[name + ".weight"].copy_(w)
                continue
            # Experts fused in memory (transformers 5): gate rows then up rows, [E, 2I, H].
            pre, rest = name.split(".experts.")
            e, proj = rest.split(".")
            pre = pre.replace("block_sparse_moe", "mlp")
            e = int(e)
            if proj in ("down_proj", "w2"):
                sd[pre + ".experts.down_proj"][e] = w
            else:
                i = w.shape[0]
                off = 0 if proj in ("gate_proj", "w1") else i
                sd[pre + ".experts.gate_up_proj"][e, off:off + i] = w
    mq, info = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32, output_loading_info=True)
    info = {k: sorted(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return m.eval(), mq.eval(), info, t


def compensate_48371(mq, t):
    """transformers #48371: per-expert NVFP4 weights come back multiplied by their weight_global_scale."""
    import torch
    sd = mq.state_dict()
    with torch.no_grad():
        for k in t:
            if ".experts." not in k or not k.endswith(".weight_global_scale"):
                continue
            name = k[:-len(".weight_global_scale")]
            pre, rest = name.split(".experts.")
            pre = pre.replace("block_sparse_moe", "mlp")
            e, proj = rest.split(".")
            e = int(e)
            g = t[k].float()
            if proj in ("down_proj", "w2"):
                sd[pre + ".experts.down_proj"][e] /= g
            else:
                full = sd[pre + ".experts.gate_up_proj"]
                i = full.shape[1] // 2
                off = 0 if proj in ("gate_proj", "w1") else i
                full[e, off:off + i] /= g


def run(qforge, llmc_python, modelopt_python=None):
    import torch
    import transformers
    from safetensors.torch import load_file
    transformers.logging.set_verbosity_error()
    import compressed_tensors.compressors.nvfp4.base as ct_nvfp4
    # FP4 codes unpack to BF16 whatever the load dtype; float32 loads need float32 (as load_ct.py).
    unpack = ct_nvfp4.unpack_fp4_from_uint8
    ct_nvfp4.unpack_fp4_from_uint8 = lambda a, m, n, dtype=None: unpack(a, m, n, torch.float32)
    os.makedirs(WORK, exist_ok=True)
    quality = ["| case | export | bits/weight | PPL base | PPL NVFP4 | KL mean | KL p99 | top-1 |", "|---|---|---|---|---|---|---|---|"]
    ref = ["| case | tensors | identical to llm-compressor | differing | quantization_config differences |", "|---|---|---|---|---|"]
    load = ["| case | transformers load of qforge's export | max abs logit diff vs qforge tensors dequantized | after #48371 compensation |", "|---|---|---|---|"]
    experts = ["| case | layer | tokens per expert (calibration, W4A4) |", "|---|---|---|"]
    mo = ["| case | tensors (ModelOpt / qforge) | identical | differing | config differences |", "|---|---|---|---|---|"]
    for case in CASES:
        src = os.path.join(CONF, case)
        if not os.path.exists(src):
            continue
        base = os.path.join(WORK, case, "model")
        subprocess.run(["rm", "-rf", os.path.join(WORK, case)], check=True)
        os.makedirs(os.path.join(WORK, case))
        subprocess.run(["cp", "-r", src, base], check=True)
        json.dump(byte_level_tokenizer(), open(os.path.join(base, "tokenizer.json"), "w"))
        outs = {}
        try:
            for name, flags in (("ct", ["--export", "compressed-tensors"]), ("modelopt", [])):
                out = os.path.join(WORK, case, name)
                j = json.loads(qf(qforge, "quantize", base, "-o", out, "--format", "nvfp4", "--json", "-q", *flags))
                outs[name] = out
                kl = json.loads(qf(qforge, "eval", "kl", base, out, "--text", README, "--max-chars", "6000", "--ctx", "128", "--json"))
                quality.append(f"| {case} | {name} | {j['bits_per_quantized_weight']:.3f} | {kl['ppl_base']:.4f} | {kl['ppl_quant']:.4f} | "
                               f"{kl['kl_mean']:.5f} | {kl['kl_p99']:.5f} | {kl['top1']:.4f} |")
            w4a4 = json.loads(qf(qforge, "quantize", base, "-o", os.path.join(WORK, case, "w4a4"), "--format", "nvfp4",
                                 "--activations", "nvfp4", "--calib", README, "--calib-samples", "8", "--calib-seq", "128", "--json", "-q"))
            for layer in w4a4.get("expert_tokens", []):
                experts.append(f"| {case} | {layer['layer']} | {' '.join(str(t) for t in layer['tokens'])} |")
        except RuntimeError as e:
            quality.append(f"| {case} | qforge FAILED: {e} | | | | | | |")
            print(quality[-1], flush=True)
            continue
        print("\n".join(quality[-2:]), flush=True)
        # llm-compressor on the same BF16 input.
        ref_out = os.path.join(WORK, case, "llmc")
        r = subprocess.run([llmc_python, __file__, "llmc", base, ref_out], capture_output=True, text=True)
        if r.returncode:
            ref.append(f"| {case} | llm-compressor FAILED: {r.stderr.strip().splitlines()[-1][:160]} | | | |")
        else:
            a, b = raw_tensors(ref_out), raw_tensors(outs["ct"])
            # llm-compressor 0.14 writes Mixtral experts with transformers 5's in-memory names
            # (gate_proj / up_proj / down_proj); qforge keeps the hub names w1 / w3 / w2 that vLLM's
            # Mixtral loader maps. Compared under one naming; the renames are counted.
            renamed = 0
            if case == "mixtral":
                hub = {".gate_proj.": ".w1.", ".up_proj.": ".w3.", ".down_proj.": ".w2."}
                a2 = {}
                for k, v in a.items():
                    for x, y in hub.items():
                        if ".experts." in k and x in k:
                            k = k.replace(x, y)
                            renamed += 1
                    a2[k] = v
                a = a2
            same = sum(1 for k in a if k in b and a[k] == b[k])
            diff = sorted(set(a) ^ set(b)) + [k for k in a if k in b and a[k] != b[k]]
            qa = json.load(open(os.path.join(ref_out, "config.json")))["quantization_config"]
            qb = json.load(open(os.path.join(outs["ct"], "config.json")))["quantization_config"]
            fields = [k for k in sorted(set(qa) | set(qb)) if k not in ("version",) and
                      (sorted(qa.get(k)) if k == "ignore" else qa.get(k)) != (sorted(qb.get(k)) if k == "ignore" else qb.get(k))]
            note = f" ({renamed} expert names mapped gate_proj/up_proj/down_proj -> w1/w3/w2)" if renamed else ""
            ref.append(f"| {case} | {len(a)} / {len(b)} | {same}{note} | {len(diff)}{': ' + ', '.join(diff[:3]) if diff else ''} | {', '.join(fields) or 'none'} |")
        print(ref[-1], flush=True)
        if case == "gpt_oss" and modelopt_python:
            mo_out = os.path.join(WORK, case, "modelopt_ref")
            r = subprocess.run([modelopt_python, __file__, "modelopt", base, mo_out], capture_output=True, text=True)
            if r.returncode:
                mo.append(f"| {case} | ModelOpt FAILED: {r.stderr.strip().splitlines()[-1][:160]} | | | |")
            else:
                # ModelOpt on the CPU divides by constants exactly: qforge's --scale-division cpu.
                mo_q = os.path.join(WORK, case, "modelopt_cpu")
                qf(qforge, "quantize", base, "-o", mo_q, "--format", "nvfp4", "--scale-division", "cpu", "--json", "-q")
                na, nb, same, diff = compare_dirs(mo_out, mo_q)
                fields = []
                for f, key in (("hf_quant_config.json", "quantization"), ("config.json", "quantization_config")):
                    qa = json.load(open(os.path.join(mo_out, f)))[key]
                    qb = json.load(open(os.path.join(mo_q, f)))[key]
                    fields += [f"{f}:{k}" for k in sorted(set(qa) | set(qb)) if k != "producer" and qa.get(k) != qb.get(k)]
                mo.append(f"| {case} | {na} / {nb} | {same} | {len(diff)}{': ' + ', '.join(diff[:4]) if diff else ''} | {', '.join(fields) or 'none (producer aside)'} |")
            print(mo[-1], flush=True)
        if case == "gpt_oss":
            # transformers keeps gpt-oss experts fused ([E, H, 2I], interleaved): it does not map
            # per-expert names, llm-compressor's own output included. Only the keys are reported.
            from transformers import AutoModelForCausalLM
            _, info = AutoModelForCausalLM.from_pretrained(outs["ct"], dtype=torch.float32, output_loading_info=True)
            n = {k: len(v) for k, v in info.items() if v}
            load.append(f"| {case} | does not load the experts: {json.dumps(n)} (llm-compressor's own export: the same) | | |")
            print(load[-1], flush=True)
            continue
        # transformers loads qforge's export.
        try:
            m, mq, info, t = dequantized_model(base, outs["ct"])
            ids = load_file(os.path.join(src, "reference.safetensors"))["input_ids"].long()[None]
            with torch.no_grad():
                want = m(ids).logits
                got = mq(ids).logits
                d1 = (want - got).abs().max().item()
                compensate_48371(mq, t)
                d2 = (want - mq(ids).logits).abs().max().item()
            load.append(f"| {case} | {'no missing or unexpected keys' if not info else json.dumps(info)[:160]} | {d1:.3g} | {d2:.3g} |")
        except Exception as e:  # noqa: BLE001
            load.append(f"| {case} | FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]} | | |")
        print(load[-1], flush=True)
    text = (f"transformers {transformers.__version__}, torch {torch.__version__}; NVFP4 weight-only unless noted; "
            f"eval text: README.md (6000 characters, windows of 128)\n\n"
            "## NVFP4 vs the original (qforge eval kl)\n\n" + "\n".join(quality) +
            "\n\n## qforge's compressed-tensors export vs llm-compressor's (NVFP4A16, routers ignored)\n\n" + "\n".join(ref) +
            "\n\n## transformers loads qforge's compressed-tensors export\n\n" + "\n".join(load) +
            "\n\n## qforge's ModelOpt export vs ModelOpt's (W4A16_NVFP4, fused gpt-oss experts)\n\n" + "\n".join(mo) +
            "\n\n## Calibration tokens per expert (8 windows of 128 tokens of README.md)\n\n" + "\n".join(experts) + "\n")
    with open(os.path.join(WORK, "moe.md"), "w") as f:
        f.write(text)
    print(f"wrote {os.path.join(WORK, 'moe.md')}")


if __name__ == "__main__":
    if sys.argv[1] == "llmc":
        llmc(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "modelopt":
        modelopt(sys.argv[2], sys.argv[3])
    else:
        run(os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
