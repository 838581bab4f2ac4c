"""Test each suspected cause of a difference with numbers: recompute the reference tool's scales
and codes from the input weights with candidate formulas (torch on the CPU) and count how many
values each formula reproduces, for the reference export and for qforge's. Writes
$QF_INTEROP_WORK/explain.md. Run after compare.py (either venv's python)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402
import st  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

F8 = torch.float8_e4m3fn
LINES = []


def out(s):
    print(s, flush=True)
    LINES.append(s)


def inputs(model, dtype):
    t = load_file(os.path.join(C.input_dir(model, dtype), "model.safetensors"))
    return {k[: -len(".weight")]: v for k, v in t.items() if k.endswith("_proj.weight")}


def raw(d, name):
    """a tensor of an export as torch, from its raw bytes."""
    dt, shape, r = d[name]
    tt = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F8_E4M3": F8,
          "U8": torch.uint8, "I8": torch.int8, "I32": torch.int32}[dt]
    return torch.frombuffer(bytearray(r.tobytes()), dtype=tt).reshape(shape)


def same(a, b):
    """number of equal values, bit for bit."""
    iv = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
    a = a.reshape(-1).contiguous()
    b = b.reshape(-1).contiguous()
    return int((a.view(iv[a.element_size()]) == b.view(iv[b.element_size()])).sum())


def tally(label, model, dtype, fmt, target, fn):
    """fn(W, ref, qf, name) -> list of (formula label, candidate tensor, which export tensor)."""
    ref, _ = st.read_dir(C.out_dir(model, dtype, fmt, target, "ref"))
    qf, _ = st.read_dir(C.out_dir(model, dtype, fmt, target, "qforge"))
    W = inputs(model, dtype)
    acc = {}
    for name, w in W.items():
        if name in C.excluded(model, fmt, target):
            continue
        for flabel, cand, key, which in fn(w, ref, qf, name, W):
            src = ref if which == "ref" else qf
            if key not in src:
                continue
            t = raw(src, key)
            n = same(cand.to(t.dtype) if cand.dtype != t.dtype else cand, t)
            a = acc.setdefault((which, flabel), [0, 0])
            a[0] += n
            a[1] += t.numel()
    out(f"\n### {label}: {model} {dtype} {fmt} {target}")
    for (which, flabel), (n, tot) in sorted(acc.items()):
        out(f"- {which:6s} matches {flabel}: {n}/{tot}" + (" (all)" if n == tot else ""))


R448 = torch.tensor(1 / 448, dtype=torch.float32)


def fp8_channel_modelopt(w, ref, qf, name, W):
    amax = w.float().abs().amax(1)
    s_div = amax / 448.0
    s_mul = amax * R448
    res = [("scale amax/448 (IEEE division, PyTorch CPU)", s_div, name + ".weight_scale", "ref"),
           ("scale amax*fl32(1/448) (PyTorch CUDA)", s_mul, name + ".weight_scale", "ref"),
           ("scale amax*fl32(1/448)", s_mul, name + ".weight_scale", "qforge")]
    s_ref = raw(ref, name + ".weight_scale").float()
    res.append(("codes e4m3(W/ref scale) (W in its dtype promoted to F32)", (w / s_ref[:, None]).to(F8),
                name + ".weight", "ref"))
    return res


def fp8_tensor_modelopt(w, ref, qf, name, W):
    amax = w.float().abs().amax()
    s_ref = raw(ref, name + ".weight_scale").float()
    return [("scale amax/448 (IEEE)", amax / 448.0, name + ".weight_scale", "ref"),
            ("codes e4m3(W / 0-dim F32 scale), computed in W's dtype", (w / s_ref).to(F8), name + ".weight", "ref"),
            ("codes e4m3(F32(W) / F32 scale)", (w.float() / s_ref).to(F8), name + ".weight", "ref"),
            ("codes e4m3(F32(W) / F32 scale)", (w.float() / raw(qf, name + ".weight_scale").float()).to(F8),
             name + ".weight", "qforge")]


def mx_blocks(w):
    return w.float().reshape(w.shape[0], -1, 32)


def mxfp4_modelopt(w, ref, qf, name, W):
    amax = mx_blocks(w).abs().amax(-1)
    k_ceil = torch.ceil(torch.log2(amax / 6.0)).clamp(min=-127)
    return [("E8M0 = ceil(log2(amax/6)) + 127", (k_ceil + 127).to(torch.uint8), name + ".weight_scale", "ref"),
            ("E8M0 = ceil(log2(amax/6)) + 127", (k_ceil + 127).to(torch.uint8), name + ".weight_scale", "qforge")]


def nvfp4_global(w, ref, qf, name, W):
    # compressed-tensors: global scale over the fused group (q/k/v, gate/up)
    leaf = name.rsplit(".", 1)
    group = {"q_proj": ["q_proj", "k_proj", "v_proj"], "k_proj": ["q_proj", "k_proj", "v_proj"],
             "v_proj": ["q_proj", "k_proj", "v_proj"], "gate_proj": ["gate_proj", "up_proj"],
             "up_proj": ["gate_proj", "up_proj"]}.get(leaf[1], [leaf[1]])
    ws = [W[f"{leaf[0]}.{g}"] for g in group]
    amax_w = torch.stack([x.abs().amax() for x in ws]).amax()  # in the weight dtype
    g_wd = (torch.tensor(2688.0, dtype=w.dtype) / amax_w).float()
    g_qf = 1.0 / (amax_w.float() * torch.tensor(1 / 2688, dtype=torch.float32))
    # python_float / tensor is Tensor.__rtruediv__ = reciprocal(tensor) * float, in the tensor's dtype
    g_rcp = (torch.reciprocal(amax_w) * 2688.0).float()
    key = name + ".weight_global_scale"
    return [("global = 2688/amax, IEEE division in the weight dtype", g_wd.reshape(1), key, "ref"),
            ("global = reciprocal(amax)*2688, both steps in the weight dtype", g_rcp.reshape(1), key, "ref"),
            ("global = 1/(amax*fl32(1/2688))", g_qf.reshape(1), key, "qforge")]



def ct_fp8_channel(w, ref, qf, name, W):
    amax = w.abs().amax(1, keepdim=True)  # weight dtype
    s_f32 = amax.float() / 448.0
    key = name + ".weight_scale"
    s_ref = raw(ref, key)
    res = [("scale amax/448 (IEEE, F32)", s_f32.to(s_ref.dtype), key, "ref"),
           ("scale amax*fl32(1/448)", (amax.float() * R448).to(s_ref.dtype), key, "qforge")]
    res.append(("codes e4m3(W / scale) in the weight dtype", (w / s_ref.to(w.dtype)).to(F8), name + ".weight", "ref"))
    res.append(("codes e4m3(F32(W) / F32(scale))", (w.float() / s_ref.float()).to(F8), name + ".weight", "ref"))
    res.append(("codes e4m3(F32(W) / F32(scale))", (w.float() / s_ref.float()).to(F8), name + ".weight", "qforge"))
    return res


def ct_int(bits, group):
    def fn(w, ref, qf, name, W):
        g = w.shape[1] if group is None else group
        amax = w.float().reshape(w.shape[0], -1, g).abs().amax(-1)
        key = name + ".weight_scale"
        t = raw(ref, key)
        q = {4: (7.0, 7.5), 8: (127.0, 127.5)}[bits]
        return [(f"scale amax/{q[1]} (F32, IEEE)", (amax / q[1]).to(t.dtype).reshape(t.shape), key, "ref"),
                (f"scale amax/{q[0]}", (amax / q[0]).to(t.dtype).reshape(t.shape), key, "ref"),
                (f"scale amax*fl32(1/{q[0]})", (amax * torch.tensor(1 / q[0])).to(t.dtype).reshape(t.shape), key, "qforge")]
    return fn


def modelopt_int(bits, group):
    def fn(w, ref, qf, name, W):
        g = w.shape[1] if group is None else group
        amax = w.float().reshape(w.shape[0], -1, g).abs().amax(-1)
        key = name + ".weight_scale"
        t = raw(ref, key)
        c = {4: 7.0, 8: 127.0}[bits]
        return [(f"scale amax/{c} (IEEE)", (amax / c).reshape(t.shape), key, "ref"),
                (f"scale amax*fl32(1/{c})", (amax * torch.tensor(1 / c)).reshape(t.shape), key, "qforge")]
    return fn


def main():
    for model in C.MODELS:
        for dtype in C.DTYPES:
            for fmt, target, label, fn in [
                ("fp8_channel", "modelopt", "ModelOpt FP8 per channel", fp8_channel_modelopt),
                ("fp8_tensor", "modelopt", "ModelOpt FP8 per tensor", fp8_tensor_modelopt),
                ("mxfp4", "modelopt", "ModelOpt MXFP4 scale", mxfp4_modelopt),
                ("int4_g32", "modelopt", "ModelOpt INT4 g32", modelopt_int(4, 32)),
                ("int4_channel", "modelopt", "ModelOpt INT4 channel", modelopt_int(4, None)),
                ("int8", "modelopt", "ModelOpt INT8", modelopt_int(8, None)),
                ("nvfp4", "ct", "llm-compressor NVFP4 global scale", nvfp4_global),
                ("fp8_channel", "ct", "llm-compressor FP8 per channel", ct_fp8_channel),
                ("int4_g32", "ct", "llm-compressor INT4 g32", ct_int(4, 32)),
                ("int4_channel", "ct", "llm-compressor INT4 channel", ct_int(4, None)),
                ("int8", "ct", "llm-compressor INT8", ct_int(8, None)),
            ]:
                ref_dir = C.out_dir(model, dtype, fmt, target, "ref")
                if not os.path.exists(ref_dir):
                    continue
                try:
                    tally(label, model, dtype, fmt, target, fn)
                except Exception as e:
                    out(f"\n### {label}: {model} {dtype}: explain failed: {type(e).__name__}: {e}")
    with open(os.path.join(C.WORK, "explain.md"), "w") as f:
        f.write("\n".join(LINES) + "\n")


if __name__ == "__main__":
    main()
