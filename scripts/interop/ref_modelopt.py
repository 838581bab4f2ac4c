"""Quantize the fixtures with NVIDIA ModelOpt on the CPU (round to nearest, `max` calibration on
qforge's own calibration windows; Four Over Six with its preset's MSE calibration) and export them
with export_hf_checkpoint. Runs in the ModelOpt venv. One process for all cases.

Four Over Six: ModelOpt's static-block NVFP4 fake quant (what its MSE calibration evaluates each
block's M=6 / M=4 candidates with) exists only as a Triton kernel, which ModelOpt enables with a
GPU alone; on a CPU `mtq.quantize(model, NVFP4_FOUR_OVER_SIX_CFG)` stops with "RuntimeError:
static_blockwise_fp4_fake_quant requires triton". Here that one kernel launch is replaced by
cpu_static_blockwise_fp4_fake_quant: ModelOpt's own compute_fp4_scales (PyTorch, CPU) and the
kernel's per-element code (nvfp4_scalar_quant) in PyTorch, with IEEE division where Triton's
`div.full` may be 2 ulp off. Everything else (candidates, argmin, global amax groups, export)
is ModelOpt's code.

usage: ref_modelopt.py [--only SUBSTRING ...]
"""
import copy
import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402

import torch  # noqa: E402
import modelopt.torch.quantization as mtq  # noqa: E402
from modelopt.torch.export import export_hf_checkpoint  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16}


def cpu_static_blockwise_fp4_fake_quant(x, amax, global_amax=None, quantize_block_scales=True,
                                        fp8_max_for_normalization=448.0, out_dtype=None):
    """fp4_kernel.static_blockwise_fp4_fake_quant without Triton (same arguments)."""
    from modelopt.torch.kernels.quantization.gemm.fp4_kernel import compute_fp4_scales
    n = amax.numel()
    if x.numel() % n:
        raise ValueError("x.numel() is not a multiple of amax.numel()")
    scale = compute_fp4_scales(amax, global_amax, quantize_block_scales,
                               fp8_max_for_normalization=fp8_max_for_normalization)
    xf = x.contiguous().view(n, -1).to(torch.float32)
    s = scale.contiguous().view(n, 1).to(torch.float32)
    # nvfp4_quant.py::nvfp4_scalar_quant and fp4_round_magnitude, element by element
    zero = s == 0.0
    safe = torch.where(zero | torch.isnan(s) | torch.isinf(s), torch.ones_like(s), s)
    a = xf.abs() / safe
    q = torch.where(a <= 0.25, 0.0, torch.where(a < 0.75, 0.5, torch.where(a <= 1.25, 1.0, torch.where(
        a < 1.75, 1.5, torch.where(a <= 2.5, 2.0, torch.where(a < 3.5, 3.0, torch.where(a <= 5.0, 4.0, 6.0)))))))
    r = q * safe
    xq = torch.where(xf >= 0, r, -r)
    xq = torch.where(zero, torch.zeros_like(xq), xq)
    return xq.to(out_dtype or x.dtype).view(x.shape)


def install_cpu_fp4_kernel():
    import modelopt.torch.kernels.quantization.gemm as triton_kernel
    if triton_kernel.IS_AVAILABLE:
        return
    triton_kernel.static_blockwise_fp4_fake_quant = cpu_static_blockwise_fp4_fake_quant
    triton_kernel.IS_AVAILABLE = True  # read at run time by tensor_quant.py only
    print("modelopt: static_blockwise_fp4_fake_quant -> PyTorch on the CPU (no GPU for Triton)",
          flush=True)


OFF_INPUT = {"quantizer_name": "*input_quantizer", "enable": False}


def config(model, fmt):
    shapes = C.linear_shapes(model)
    if fmt == "nvfp4":
        cfg = copy.deepcopy(mtq.W4A16_NVFP4_CFG)
    elif fmt == "nvfp4_w4a4":
        cfg = copy.deepcopy(mtq.NVFP4_DEFAULT_CFG)
    elif fmt == "mxfp4":  # MXFP4 weights only: the preset's input quantizer switched off
        cfg = copy.deepcopy(mtq.MXFP4_DEFAULT_CFG)
        cfg["quant_cfg"].append(OFF_INPUT)
        cfg["algorithm"] = "max"
    elif fmt == "fp8_channel":
        cfg = copy.deepcopy(mtq.FP8_PER_CHANNEL_PER_TOKEN_CFG)
    elif fmt == "fp8_tensor":
        cfg = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
    elif fmt == "fp8_kv":
        cfg = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
        cfg["quant_cfg"] += copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])
    elif fmt in ("int4_g128", "int4_g32"):
        cfg = copy.deepcopy(mtq.INT4_BLOCKWISE_WEIGHT_ONLY_CFG)
        g = int(fmt.split("_g")[1])
        # edit the preset's entry in place: an appended "*weight_quantizer" entry would come after
        # the preset's "*lm_head*" disable and quantize the head too
        for e in cfg["quant_cfg"]:
            if e.get("quantizer_name") == "*weight_quantizer":
                e["cfg"]["block_sizes"] = {-1: g, "type": "static"}
    elif fmt == "int4_channel":  # group = the whole input row, per module (as qforge documents)
        cfg = copy.deepcopy(mtq.INT4_BLOCKWISE_WEIGHT_ONLY_CFG)
        for name, (o, i) in shapes.items():
            leaf = name.split(".")[-1]
            cfg["quant_cfg"].append({"quantizer_name": f"*{leaf}.weight_quantizer",
                                     "cfg": {"num_bits": 4, "block_sizes": {-1: i, "type": "static"}}})
    elif fmt == "int8":
        cfg = copy.deepcopy(mtq.INT8_DEFAULT_CFG)
    elif fmt == "nvfp4_4o6":  # the preset with its NVFP4 input quantizers switched off: W4A16
        cfg = copy.deepcopy(mtq.NVFP4_FOUR_OVER_SIX_CFG)
        cfg["quant_cfg"].append(OFF_INPUT)
    elif fmt == "nvfp4_4o6_w4a4":
        cfg = copy.deepcopy(mtq.NVFP4_FOUR_OVER_SIX_CFG)
    else:
        raise ValueError(fmt)
    for name in C.excluded(model, fmt, "modelopt"):
        cfg["quant_cfg"].append({"quantizer_name": f"*{name}*", "enable": False})
    return cfg


def forward_loop_for(model_name):
    ids = torch.tensor(C.calib_windows(model_name))

    def loop(m):
        with torch.no_grad():
            for row in ids:
                m(row[None])
    return loop


def run(model, dtype, fmt, out):
    src = C.input_dir(model, dtype)
    m = AutoModelForCausalLM.from_pretrained(src, dtype=DT[dtype])
    m.eval()
    loop = forward_loop_for(model) if fmt in C.CALIBRATED else None
    mtq.quantize(m, config(model, fmt), forward_loop=loop)
    if os.path.exists(out):
        shutil.rmtree(out)
    export_hf_checkpoint(m, export_dir=out)


def main():
    install_cpu_fp4_kernel()
    C.run_reference("modelopt", "modelopt", run, sys.argv)


if __name__ == "__main__":
    main()
