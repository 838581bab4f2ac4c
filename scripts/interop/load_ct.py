"""Load every compressed-tensors export (llm-compressor's and qforge's) with transformers'
AutoModelForCausalLM.from_pretrained (compressed-tensors decompresses it) in the llm-compressor venv,
report missing/unexpected keys, and compare
  - the logits of the two loads on fixed token ids (max |difference|, relative PPL difference), and
  - the perplexity transformers computes on qforge's export with `qforge eval ppl` on the same
    folder, over the same token windows (ids from `qforge tokenize`, windows as qforge cuts them),
    both in float32.
Writes $QF_INTEROP_WORK/load.md.

usage: load_ct.py QFORGE_BINARY
"""
import json
import math
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
import compressed_tensors.compressors.nvfp4.base as ct_nvfp4  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()

# The evaluation text and window of the PPL comparison.
EVAL_TEXT = os.path.join(C.FIXTURES, "corpora/tinystories_valid_subset.txt")
EVAL_CHARS, EVAL_CTX = 3000, 64

# compressed-tensors unpacks FP4 codes to BF16 (unpack_fp4_from_uint8's default dtype) whatever
# dtype the model is loaded in, so an F32 load of an NVFP4/MXFP4 export fails ("expected m1 and m2
# to have the same dtype"). The F32 loads here pass dtype=float32 to it: the only change.
_unpack_bf16 = ct_nvfp4.unpack_fp4_from_uint8
ct_nvfp4.unpack_fp4_from_uint8 = lambda a, m, n, dtype=None: _unpack_bf16(a, m, n, torch.float32)


def load(path):
    m, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    info = {k: sorted(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return m.eval(), info


def eval_ids(qforge, model):
    """BOS + the ids of the evaluation text, as `qforge eval ppl` tokenizes it."""
    text_path = os.path.join(C.WORK, "eval-text.txt")
    with open(EVAL_TEXT, encoding="utf-8") as f:
        text = f.read()[:EVAL_CHARS]
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)
    out = subprocess.run([qforge, "tokenize", C.MODELS[model], "--file", text_path, "--no-bos", "--json"],
                         capture_output=True, text=True, check=True).stdout
    bos = json.load(open(os.path.join(C.MODELS[model], "config.json")))["bos_token_id"]
    return text_path, [bos] + json.loads(out)["ids"]


def transformers_ppl(m, ids, ctx):
    """qforge's windows: inputs ids[s:s+n], targets ids[s+1:s+n+1], each window from position 0;
    log-softmax in float64 as qforge does."""
    nll, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, ctx):
            n = min(ctx, len(ids) - 1 - s)
            x = torch.tensor(ids[s:s + n])[None]
            logits = m(x).logits[0].double()
            y = torch.tensor(ids[s + 1:s + n + 1])
            nll -= torch.log_softmax(logits, -1)[torch.arange(n), y].sum().item()
            count += n
    return math.exp(nll / count), count


def qforge_ppl(qforge, path, text_path):
    out = subprocess.run([qforge, "eval", "ppl", path, "--text", text_path, "--ctx", str(EVAL_CTX), "--json"],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1])
    j = json.loads(out.stdout)
    return j["ppl"], j["tokens"]


def main():
    qforge = os.path.abspath(sys.argv[1])
    rows = ["| model | dtype | format | llm-compressor load | qforge load | max abs logit diff | PPL rel. diff |",
            "|---|---|---|---|---|---|---|"]
    ppl_rows = ["| model | dtype | format | transformers PPL | qforge eval ppl | rel. diff |",
                "|---|---|---|---|---|---|"]
    for model, dtype, fmt, target in C.cases():
        if target != "ct":
            continue
        vocab = json.load(open(os.path.join(C.MODELS[model], "config.json")))["vocab_size"]
        ids = torch.randint(0, vocab, (1, 64), generator=torch.Generator().manual_seed(1))
        res, logits, models = [], [], []
        for who in ("ref", "qforge"):
            p = C.out_dir(model, dtype, fmt, target, who)
            models.append(None)
            if not os.path.exists(os.path.join(p, "config.json")):
                res.append("no output"); logits.append(None); continue
            try:
                m, info = load(p)
                models[-1] = m
                with torch.no_grad():
                    logits.append(m(ids).logits.float())
                res.append("ok" if not info else "ok, " + json.dumps(info)[:200])
            except Exception as e:
                res.append(f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}"); logits.append(None)
        d = ppl = "-"
        if logits[0] is not None and logits[1] is not None:
            d = f"{(logits[0] - logits[1]).abs().max().item():.3g}"
            nll = [torch.nn.functional.cross_entropy(l[0, :-1], ids[0, 1:]).item() for l in logits]
            ppl = f"{abs(math.exp(nll[1]) / math.exp(nll[0]) - 1):.3g}"
        rows.append(f"| {model} | {dtype} | {fmt} | {res[0]} | {res[1]} | {d} | {ppl} |")
        print(rows[-1], flush=True)
        if models[1] is not None:
            text_path, eids = eval_ids(qforge, model)
            try:
                tp, tn = transformers_ppl(models[1], eids, EVAL_CTX)
                qp, qn = qforge_ppl(qforge, C.out_dir(model, dtype, fmt, target, "qforge"), text_path)
                if tn != qn:
                    raise RuntimeError(f"token counts differ: transformers {tn}, qforge {qn}")
                ppl_rows.append(f"| {model} | {dtype} | {fmt} | {tp:.9g} | {qp:.9g} | {abs(qp / tp - 1):.2e} |")
            except Exception as e:
                ppl_rows.append(f"| {model} | {dtype} | {fmt} | FAILED {type(e).__name__}: {str(e)[:160]} | | |")
            print(ppl_rows[-1], flush=True)
    with open(os.path.join(C.WORK, "load.md"), "w") as f:
        f.write(f"transformers {transformers.__version__}, torch {torch.__version__}, every load in float32 "
                "(FP4 codes unpacked to float32)\n\n" + "\n".join(rows) + "\n\n"
                f"PPL of qforge's compressed-tensors exports, {EVAL_CHARS} characters of "
                f"{os.path.basename(EVAL_TEXT)}, windows of {EVAL_CTX}:\n\n" + "\n".join(ppl_rows) + "\n")


if __name__ == "__main__":
    main()
