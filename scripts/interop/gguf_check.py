"""Reads a qforge-written GGUF with the `gguf` Python package (gguf-py, llama.cpp's own reader)
and checks its metadata, tensor names, shapes and types, and that gguf-py's dequantization of
every quantized tensor `q.<type>` equals qforge's, stored beside it as `deq.<type>` (F32); where
gguf-py has a quantizer for the type, also that it gives qforge's bytes from qforge's input.
Written for the sample of tests/io/gguf_interop_sample_test.cpp; run by gguf_check.sh.

usage: python gguf_check.py FILE.gguf     (exit 0 when every check passes)
"""
import sys
from importlib.metadata import version

import numpy as np
import gguf
from gguf import quants

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "MXFP4", "NVFP4"]


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def main(path):
    r = gguf.GGUFReader(path)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    check(field(r, "general.architecture") == "llama", "general.architecture == llama")
    check(field(r, "llama.block_count") == 1, "llama.block_count == 1 (uint32)")
    check(abs(field(r, "llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-12,
          "layer_norm_rms_epsilon == 1e-5 (float32)")
    check(field(r, "tokenizer.ggml.add_bos_token") is True, "add_bos_token is bool true")
    check(field(r, "tokenizer.ggml.tokens") == ["<unk>", "<s>", "</s>", "hello"],
          "tokenizer.ggml.tokens (string array)")
    check(field(r, "tokenizer.ggml.scores") == [0.0, 0.0, 0.0, -1.5], "tokenizer.ggml.scores")
    check(field(r, "tokenizer.ggml.token_type") == [2, 3, 3, 1], "tokenizer.ggml.token_type")
    check(field(r, "qforge.test.i64") == -42, "int64 value")
    check(field(r, "qforge.test.f64") == 0.375, "float64 value")

    tensors = {t.name: t for t in r.tensors}
    for name in TYPES:
        low = name.lower().replace("_k", "_K")  # ggml's spelling: q4_K
        q = tensors.get("q." + low)
        d = tensors.get("deq." + low)
        if q is None or d is None:
            check(False, f"tensors q.{low} and deq.{low} present")
            continue
        qtype = gguf.GGMLQuantizationType[name]
        check(q.tensor_type == qtype, f"q.{low} has type {name}")
        check(list(q.shape) == [256, 4], f"q.{low} has ne [256, 4]")
        ours = np.asarray(d.data, dtype=np.float32).reshape(4, 256)
        theirs = quants.dequantize(np.asarray(q.data), qtype).astype(np.float32).reshape(4, 256)
        # Equal as floats: ggml's FP4 code 8 decodes to +0 where E2M1 says -0.
        check(np.array_equal(ours, theirs), f"gguf-py dequantize({name}) == qforge's, exactly")
    scale = tensors.get("q.nvfp4.scale")
    check(scale is not None and scale.tensor_type == gguf.GGMLQuantizationType.F32
          and float(scale.data[0]) == 0.5, "q.nvfp4.scale sidecar is F32 [1] = 0.5")
    print(f"{len(failures)} failures, gguf-py {version('gguf')}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
