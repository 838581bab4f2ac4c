"""Quantize the fixtures with NVIDIA ModelOpt on the CPU (round to nearest, `max` calibration on
qforge's own calibration windows) and export them with export_hf_checkpoint. Runs in the ModelOpt venv. One process for all cases.

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
    C.run_reference("modelopt", "modelopt", run, sys.argv)


if __name__ == "__main__":
    main()
