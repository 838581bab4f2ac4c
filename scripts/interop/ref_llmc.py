"""Quantize the fixtures with llm-compressor on the CPU (oneshot + QuantizationModifier, round to
nearest with the default memoryless_minmax weight observer) and save with
save_pretrained(save_compressed=True). Runs in the llm-compressor venv. One process for all cases.

usage: ref_llmc.py [--only SUBSTRING ...]
"""
import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402

import torch  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from datasets import Dataset  # noqa: E402
from llmcompressor import oneshot  # noqa: E402
from llmcompressor.modifiers.quantization import QuantizationModifier  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16}


def int_w(group_size=None, bits=4):
    strategy = "group" if group_size else "channel"
    return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=bits, type="int", symmetric=True, strategy=strategy, group_size=group_size, dynamic=False))


def modifier(model, fmt):
    ignore = ["lm_head"] + C.excluded(model, fmt, "ct")
    if fmt == "nvfp4":
        return QuantizationModifier(targets="Linear", scheme="NVFP4A16", ignore=ignore)
    if fmt == "nvfp4_w4a4":
        return QuantizationModifier(targets="Linear", scheme="NVFP4", ignore=ignore)
    if fmt == "mxfp4":
        return QuantizationModifier(targets="Linear", scheme="MXFP4A16", ignore=ignore)
    if fmt == "fp8_channel":
        return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=ignore)
    if fmt == "fp8_tensor":  # static per-tensor W8A8, as qforge --activations fp8
        return QuantizationModifier(targets="Linear", scheme="FP8", ignore=ignore)
    if fmt == "fp8_kv":  # and a static per-tensor FP8 KV cache, as qforge --kv-cache fp8
        return QuantizationModifier(targets="Linear", scheme="FP8", ignore=ignore,
                                    kv_cache_scheme=QuantizationArgs(
                                        num_bits=8, type="float", strategy="tensor", symmetric=True,
                                        dynamic=False))
    if fmt == "int4_g128":
        return QuantizationModifier(targets="Linear", scheme="W4A16", ignore=ignore)
    if fmt == "int4_g32":
        return QuantizationModifier(config_groups={"group_0": int_w(32)}, ignore=ignore)
    if fmt == "int4_channel":
        return QuantizationModifier(config_groups={"group_0": int_w(None)}, ignore=ignore)
    if fmt == "int8":  # W8A8: channel INT8 weights (the preset's activations are dynamic per token)
        return QuantizationModifier(targets="Linear", scheme="W8A8", ignore=ignore)
    raise ValueError(fmt)


def calib_dataset(model_name):
    ids = C.calib_windows(model_name)
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(w) for w in ids]})


def run(model, dtype, fmt, out):
    src = C.input_dir(model, dtype)
    m = AutoModelForCausalLM.from_pretrained(src, dtype=DT[dtype])
    kw = {}
    if fmt in C.CALIBRATED:
        # the data is already token ids; oneshot still wants a processor and cannot build one
        # for stories260K (sentencepiece tokenizer.model only), so any fast tokenizer does
        tok = AutoTokenizer.from_pretrained(C.MODELS["tinystories-656K"])
        kw = dict(dataset=calib_dataset(model), num_calibration_samples=C.CALIB_SAMPLES,
                  max_seq_length=C.CALIB_SEQ, processor=tok)
    oneshot(model=m, recipe=modifier(model, fmt), **kw)
    if os.path.exists(out):
        shutil.rmtree(out)
    m.save_pretrained(out, save_compressed=True)


def main():
    C.run_reference("llmc", "ct", run, sys.argv)


if __name__ == "__main__":
    main()
