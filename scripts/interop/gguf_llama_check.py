"""Checks a Llama GGUF written by `qforge quantize --export gguf` with the `gguf` Python package
(gguf-py, llama.cpp's own reader): the keys llama.cpp's loader requires for arch "llama", with
the value types it reads (src/llama-model.cpp load_hparams, src/llama-vocab.cpp load); every
tensor name one of gguf-py's llama tensors; shapes consistent with the hyperparameters; and
every tensor dequantized by gguf-py to finite values. Run by gguf_check.sh.

usage: python gguf_llama_check.py FILE.gguf     (exit 0 when every check passes)
"""
import sys

import numpy as np
import gguf
from gguf import quants

V = gguf.GGUFValueType
REQUIRED = {
    "general.architecture": V.STRING,
    "general.file_type": V.UINT32,
    "general.quantization_version": V.UINT32,
    "general.alignment": V.UINT32,
    "llama.context_length": V.UINT32,
    "llama.embedding_length": V.UINT32,
    "llama.block_count": V.UINT32,
    "llama.feed_forward_length": V.UINT32,
    "llama.attention.head_count": V.UINT32,
    "llama.attention.head_count_kv": V.UINT32,
    "llama.attention.layer_norm_rms_epsilon": V.FLOAT32,
    "llama.rope.freq_base": V.FLOAT32,
    "llama.rope.dimension_count": V.UINT32,
    "llama.vocab_size": V.UINT32,
    "tokenizer.ggml.model": V.STRING,
    "tokenizer.ggml.pre": V.STRING,
    "tokenizer.ggml.tokens": V.ARRAY,
    "tokenizer.ggml.token_type": V.ARRAY,
    "tokenizer.ggml.bos_token_id": V.UINT32,
    "tokenizer.ggml.eos_token_id": V.UINT32,
    "tokenizer.ggml.add_bos_token": V.BOOL,
}


def main(path):
    r = gguf.GGUFReader(path)
    failures = []

    def check(ok, what):
        if not ok:
            print("FAIL " + what)
            failures.append(what)

    for key, vt in REQUIRED.items():
        f = r.fields.get(key)
        check(f is not None and f.types[0] == vt, f"{key} present as {vt.name}")
    get = lambda k: r.fields[k].contents()
    check(get("general.architecture") == "llama", "architecture llama")
    check(get("general.quantization_version") == 2, "quantization_version 2")
    n_embd, n_layer = get("llama.embedding_length"), get("llama.block_count")
    n_head, n_kv = get("llama.attention.head_count"), get("llama.attention.head_count_kv")
    n_ff, n_vocab = get("llama.feed_forward_length"), get("llama.vocab_size")
    head_dim = n_embd // n_head
    check(get("llama.rope.dimension_count") == head_dim, "rope.dimension_count == head_dim")
    tokens = get("tokenizer.ggml.tokens")
    check(len(tokens) == n_vocab, "one token per embedding row")
    check(len(get("tokenizer.ggml.token_type")) == n_vocab, "one token type per token")
    model = get("tokenizer.ggml.model")
    check(model in ("llama", "gpt2"), "tokenizer.ggml.model llama or gpt2")
    if model == "llama":
        check(len(get("tokenizer.ggml.scores")) == n_vocab, "llama vocab has scores")
    else:
        check(len(get("tokenizer.ggml.merges")) > 0, "gpt2 vocab has merges")

    names = set()
    for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.LLAMA]:
        template = gguf.TENSOR_NAMES[t]
        for bid in range(n_layer):
            names.add(template.format(bid=bid))
    expect = {
        "token_embd": [n_embd, n_vocab], "output": [n_embd, n_vocab], "output_norm": [n_embd],
        "attn_norm": [n_embd], "ffn_norm": [n_embd], "attn_q": [n_embd, n_head * head_dim],
        "attn_k": [n_embd, n_kv * head_dim], "attn_v": [n_embd, n_kv * head_dim],
        "attn_output": [n_head * head_dim, n_embd], "ffn_gate": [n_embd, n_ff],
        "ffn_up": [n_embd, n_ff], "ffn_down": [n_ff, n_embd],
    }
    for t in r.tensors:
        base, leaf = t.name.rsplit(".", 1)
        check(base in names and leaf in ("weight", "scale"), f"{t.name} is a llama tensor name")
        role = base.split(".")[-1]
        if leaf == "weight" and role in expect:
            check(list(t.shape) == expect[role], f"{t.name} ne {list(t.shape)} == {expect[role]}")
        if leaf == "scale":
            check(t.tensor_type == gguf.GGMLQuantizationType.F32 and list(t.shape) == [1],
                  f"{t.name} is F32 [1]")
        if role.endswith("norm"):
            check(t.tensor_type == gguf.GGMLQuantizationType.F32, f"{t.name} is F32")
        y = quants.dequantize(np.asarray(t.data), t.tensor_type)
        check(np.isfinite(y).all(), f"{t.name} ({t.tensor_type.name}) dequantizes to finite values")
    for l in range(n_layer):
        for role in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                     "ffn_gate", "ffn_up", "ffn_down"):
            check(f"blk.{l}.{role}.weight" in {t.name for t in r.tensors}, f"blk.{l}.{role} present")
    types = sorted({t.tensor_type.name for t in r.tensors})
    print(f"{path}: {len(r.tensors)} tensors ({', '.join(types)}), {len(r.fields)} keys, "
          f"tokenizer {model}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
