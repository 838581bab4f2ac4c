"""Load every compressed-tensors export (llm-compressor's and qforge's) with transformers'
AutoModelForCausalLM.from_pretrained (compressed-tensors decompresses it) in the llm-compressor venv,
report missing/unexpected keys, and compare the logits of the two loads on fixed token ids
(max |difference|, and the relative difference of their PPL on those ids). Appends a table to
$QF_INTEROP_WORK/load.md."""
import json
import math
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()


def load(path):
    """F32 first; NVFP4/MXFP4 decompress to BF16 weights on the CPU and then fail in F32
    ("expected m1 and m2 to have the same dtype"), so those retry in BF16 (said in the row)."""
    for dt in (torch.float32, torch.bfloat16):
        m, info = AutoModelForCausalLM.from_pretrained(path, dtype=dt, output_loading_info=True)
        info = {k: sorted(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        try:
            with torch.no_grad():
                m(torch.zeros((1, 2), dtype=torch.long))
            return m.eval(), info, str(dt).replace("torch.", "")
        except RuntimeError:
            if dt == torch.bfloat16:
                raise


def main():
    rows = ["| model | dtype | format | llm-compressor load | qforge load | max abs logit diff | PPL rel. diff |",
            "|---|---|---|---|---|---|---|"]
    for model, dtype, fmt, target in C.cases():
        if target != "ct":
            continue
        vocab = json.load(open(os.path.join(C.MODELS[model], "config.json")))["vocab_size"]
        ids = torch.randint(0, vocab, (1, 64), generator=torch.Generator().manual_seed(1))
        res, logits = [], []
        for who in ("ref", "qforge"):
            p = C.out_dir(model, dtype, fmt, target, who)
            if not os.path.exists(os.path.join(p, "config.json")):
                res.append("no output"); logits.append(None); continue
            try:
                m, info, dt = load(p)
                with torch.no_grad():
                    logits.append(m(ids).logits.float())
                res.append(f"ok ({dt})" if not info else f"ok ({dt}), " + json.dumps(info)[:200])
            except Exception as e:
                res.append(f"FAILED {type(e).__name__}: {str(e).splitlines()[0][:160]}"); logits.append(None)
        d = ppl = "-"
        if logits[0] is not None and logits[1] is not None:
            d = f"{(logits[0] - logits[1]).abs().max().item():.3g}"
            nll = [torch.nn.functional.cross_entropy(l[0, :-1], ids[0, 1:]).item() for l in logits]
            ppl = f"{abs(math.exp(nll[1]) / math.exp(nll[0]) - 1):.3g}"
        rows.append(f"| {model} | {dtype} | {fmt} | {res[0]} | {res[1]} | {d} | {ppl} |")
        print(rows[-1], flush=True)
    with open(os.path.join(C.WORK, "load.md"), "w") as f:
        f.write(f"transformers {transformers.__version__}, torch {torch.__version__}\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
