"""Run qforge on every interop case and compare its export tensor by tensor (and config field by
config field) with the reference tool's. Writes $QF_INTEROP_WORK/summary.md (one row per
model x dtype x format x target, also printed), details.md (every differing tensor and field) and
results.json. Needs numpy only (run it with either interop venv's python).

usage: compare.py QFORGE_BINARY [--only SUBSTRING ...]
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402
import st  # noqa: E402


def run_qforge(qforge, model, dtype, fmt, target):
    out = C.out_dir(model, dtype, fmt, target, "qforge")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [qforge, "quantize", C.input_dir(model, dtype), "-o", out, "-q", "--threads", "2"]
    cmd += C.FORMATS[fmt][0] + C.TARGET_FLAGS[target]
    # ModelOpt's references are made on the CPU, which divides scales exactly.
    if target == "modelopt" and os.environ.get("QF_INTEROP_SCALE_DIVISION", "cpu") == "cpu":
        cmd += ["--scale-division", "cpu"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    err = None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["rc %d" % p.returncode])[-1]
    return out, " ".join(cmd), err


def pct(a, b):
    return f"{100.0 * a / b:.2f}%" if b else "-"


def main():
    qforge = os.path.abspath(sys.argv[1])
    only = sys.argv[3:] if len(sys.argv) > 3 and sys.argv[2] == "--only" else []
    status = {}
    for tool in ("modelopt", "llmc"):
        p = os.path.join(C.WORK, f"status-{tool}.json")
        status[tool] = json.load(open(p)) if os.path.exists(p) else {}
    results, details = [], []
    for model, dtype, fmt, target in C.cases():
        key = f"{model}-{dtype}/{fmt}"
        if only and not any(s in f"{key}/{target}" for s in only):
            continue
        tool = "modelopt" if target == "modelopt" else "llmc"
        res = {"model": model, "dtype": dtype, "format": fmt, "target": target}
        ref = C.out_dir(model, dtype, fmt, target, "ref")
        qf, cmd, err = run_qforge(qforge, model, dtype, fmt, target)
        res["qforge_cmd"] = cmd
        rs = status[tool].get(key)
        if rs is None or not rs.get("ok") or not os.path.exists(ref):
            res["error"] = f"{tool}: " + (rs or {}).get("error", "no reference output")
        elif err:
            res["error"] = f"qforge: {err}"
        else:
            rows, cfg, hq = st.compare_dirs(ref, qf, calibrated=C.CALIBRATED_LEAVES)
            s = st.summarize(rows, cfg, hq)
            res.update(summary=s, cfg=cfg, hq=hq,
                       diffs=[r for r in rows if r["kind"] in ("missing", "extra", "dtype/shape") or r.get("ndiff")])
        results.append(res)
        details.append(res)
        print(f"{key}/{target}: " + (res.get("error") or "compared"), flush=True)

    hdr = ("| model | dtype | format | target | tensors identical | codes differing (tensors; codes) "
           "| scales differing (tensors; values; max ulp) | calibrated scales identical (max ulp; max rel. = eps of the dtype) "
           "| missing / extra | dtype/shape | fields differing: quantization_config / other config.json / hf_quant_config |")
    lines = [hdr, "|" + "---|" * 11]
    for r in results:
        head = f"| {r['model']} | {r['dtype']} | {r['format']} | {'ModelOpt' if r['target'] == 'modelopt' else 'llm-compressor'} |"
        if "error" in r:
            lines.append(head + f" n/a: {r['error'][:120]} | | | | | | |")
            continue
        s = r["summary"]
        codes = "0" if not s["codes_diff"] else f"{s['codes_diff']}; {s['codes_n']} ({pct(s['codes_n'], s['codes_total'])})"
        scales = "0" if not s["scales_diff"] else f"{s['scales_diff']}; {s['scales_n']}; {s['scale_max_ulp']}"
        me = f"{len(s['missing'])} / {len(s['extra'])}"
        ident = f"{s['identical']}/{s['tensors']}"
        nc = len(s["calibrated"])
        # the relative difference also in epsilons of the dtype the reference's forward pass ran in
        eps = s["calib_max_rel"] / {"f32": 2.0 ** -23, "bf16": 2.0 ** -7}[r["dtype"]]
        calib = "-" if not nc else f"{s['calib_identical']}/{nc}" + (
            "" if s["calib_identical"] == nc else
            f" ({s['calib_max_ulp']} ulp; {s['calib_max_rel']:.1e} = {eps:.1f} eps)")
        lines.append(head + f" {ident} | {codes} | {scales} | {calib} | {me} | {len(s['dtype_shape'])} | {s['qcfg_diffs']} / {s['cfg_diffs'] - s['qcfg_diffs']} / {s['hq_diffs']} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(C.WORK, "summary.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(C.WORK, "details.md"), "w") as f:
        for r in details:
            f.write(f"\n## {r['model']} {r['dtype']} {r['format']} {r['target']}\n\n`{r['qforge_cmd']}`\n\n")
            if "error" in r:
                f.write(f"ERROR {r['error']}\n")
                continue
            s = r["summary"]
            for k in ("missing", "extra", "dtype_shape", "calibrated"):
                for x in s[k]:
                    f.write(f"- {k}: {x}\n")
            for d in r["diffs"]:
                if d["kind"] in ("missing", "extra", "dtype/shape"):
                    continue
                f.write(f"- {d['name']} {d['dtype']}{d['shape']} {d['kind']}: {d['ndiff']}/{d['n']} differ"
                        + (f", max {d['max_ulp']} ulp" if "max_ulp" in d else "") + "\n")
            for x in r["cfg"]:
                f.write(f"- config.json {x}\n")
            for x in r["hq"]:
                f.write(f"- hf_quant_config.json {x}\n")
    with open(os.path.join(C.WORK, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(f"\nwritten: {C.WORK}/summary.md, details.md, results.json")


if __name__ == "__main__":
    main()
