"""Minimal safetensors reading and tensor-by-tensor comparison (numpy only, no torch).

Used by compare.py in either interop venv. Tensors are compared on their raw bytes, so FP8, E8M0,
BF16 and packed 4-bit codes need no framework support.
"""
import glob
import json
import os
import struct

import numpy as np

# bytes per element and the integer view used for bit comparisons
_DT = {
    "F32": (4, np.uint32), "F16": (2, np.uint16), "BF16": (2, np.uint16), "F64": (8, np.uint64),
    "F8_E4M3": (1, np.uint8), "F8_E5M2": (1, np.uint8), "F8_E8M0": (1, np.uint8),
    "U8": (1, np.uint8), "I8": (1, np.uint8), "I16": (2, np.uint16), "I32": (4, np.uint32),
    "I64": (8, np.uint64), "BOOL": (1, np.uint8),
}
_SIGN = {"F32": 1 << 31, "F16": 1 << 15, "BF16": 1 << 15, "F64": 1 << 63, "F8_E4M3": 0x80, "F8_E5M2": 0x80}


def read_dir(path):
    """name -> (dtype, shape, raw uint view) over every *.safetensors file of a checkpoint folder."""
    out, meta = {}, {}
    for f in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
            data = fh.read()
        meta.update(hdr.pop("__metadata__", None) or {})
        for name, t in hdr.items():
            a, b = t["data_offsets"]
            _, view = _DT[t["dtype"]]
            out[name] = (t["dtype"], list(t["shape"]), np.frombuffer(data[a:b], dtype=view).copy())
    return out, meta


def _ordered(bits, dtype):
    """IEEE bit patterns -> integers whose difference is the distance in ulps."""
    s = _SIGN[dtype]
    b = bits.astype(np.int64) if dtype != "F64" else bits.astype(np.int64)
    mag = b & (s - 1)
    return np.where((b & s) != 0, -mag, mag)


def is_packed4(name, dtype):
    return (name.endswith(".weight") or name.endswith(".weight_packed")) and dtype in ("U8", "I32")


def is_scale(name):
    leaf = name.rsplit(".", 1)[-1]
    return leaf in ("weight_scale", "weight_scale_2", "weight_global_scale", "input_scale",
                    "input_global_scale", "k_scale", "v_scale", "weight_zero_point", "pre_quant_scale")


def floats(raw, dtype):
    """float64 values of a float tensor's raw integer view."""
    if dtype == "F32":
        return raw.view(np.float32).astype(np.float64)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float64)
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise ValueError(dtype)


def nibbles(raw, dtype):
    b = raw.view(np.uint8)
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(-1)


def compare_tensor(name, ta, tb):
    """One comparison row: kind, n, ndiff, max ulp (scales/floats), notes."""
    da, sa, ra = ta
    db, sb, rb = tb
    row = {"name": name, "dtype": da, "shape": sa, "n": int(np.prod(sa)) if sa else 1}
    if da != db or sa != sb:
        row.update(kind="dtype/shape", ndiff=None, note=f"{da}{sa} vs {db}{sb}")
        # still compare the values where the bytes line up (e.g. [out] vs [out,1], F32 vs BF16 is not)
        if da == db and ra.size == rb.size:
            row["ndiff"] = int((ra != rb).sum())
        return row
    if is_packed4(name, da):
        na, nb = nibbles(ra, da), nibbles(rb, db)
        row.update(kind="codes4", n=int(na.size), ndiff=int((na != nb).sum()))
        return row
    row["kind"] = "scale" if is_scale(name) else ("codes" if da in ("F8_E4M3", "I8", "U8") else "float")
    row["ndiff"] = int((ra != rb).sum())
    if row["ndiff"] and da in _SIGN:
        row["max_ulp"] = int(np.abs(_ordered(ra, da) - _ordered(rb, db)).max())
        if da in ("F32", "F16", "BF16"):
            fa, fb = floats(ra, da), floats(rb, db)
            row["max_rel"] = float((np.abs(fa - fb) / np.maximum(np.abs(fa), 1e-38)).max())
    elif row["ndiff"] and da in ("U8", "F8_E8M0", "I8"):
        ia, ib = ra.astype(np.int64), rb.astype(np.int64)
        if da == "I8":
            ia, ib = ra.view(np.int8).astype(np.int64), rb.view(np.int8).astype(np.int64)
        row["max_ulp"] = int(np.abs(ia - ib).max())
    return row


def flatten(d, prefix=""):
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and d and all(isinstance(x, (dict, list)) for x in d):
        for i, v in enumerate(d):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = sorted(d) if isinstance(d, list) and all(isinstance(x, str) for x in d) else d
    return out


# fields that name the producer or the library versions, not the quantization
VOLATILE = ("transformers_version", "producer.name", "producer.version", "quantization_config.version",
            "_name_or_path")


def compare_json(pa, pb):
    """Differing fields (dotted paths) of two JSON files; missing files count as {}."""
    def load(p):
        if not os.path.exists(p):
            return None
        with open(p) as f:
            return json.load(f)
    a, b = load(pa), load(pb)
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"{os.path.basename(pa)}: only in {'qforge' if a is None else 'reference'}"]
    fa, fb = flatten(a), flatten(b)
    diffs = []
    for k in sorted(set(fa) | set(fb)):
        if any(k.endswith(v) for v in VOLATILE):
            continue
        if fa.get(k, "<absent>") != fb.get(k, "<absent>"):
            diffs.append(f"{k}: ref={json.dumps(fa.get(k, '<absent>'))} qforge={json.dumps(fb.get(k, '<absent>'))}")
    return diffs


def compare_dirs(ref, qf, calibrated=()):
    """Compare a reference export with qforge's. calibrated: leaf names (input_scale, k_scale, ...)
    of scales that come from a forward pass, summarised apart (distance in ulps) from the weight
    tensors, which must be identical."""
    A, _ = read_dir(ref)
    B, _ = read_dir(qf)
    rows = []
    for name in sorted(set(A) | set(B)):
        if name not in B:
            rows.append({"name": name, "kind": "missing", "dtype": A[name][0], "shape": A[name][1]})
        elif name not in A:
            rows.append({"name": name, "kind": "extra", "dtype": B[name][0], "shape": B[name][1]})
        else:
            r = compare_tensor(name, A[name], B[name])
            r["calibrated"] = name.rsplit(".", 1)[-1] in calibrated
            rows.append(r)
    cfg = compare_json(os.path.join(ref, "config.json"), os.path.join(qf, "config.json"))
    hq = compare_json(os.path.join(ref, "hf_quant_config.json"), os.path.join(qf, "hf_quant_config.json"))
    return rows, cfg, hq


def summarize(rows, cfg, hq):
    qcfg = [x for x in cfg if x.startswith("quantization_config")]
    s = {"tensors": 0, "identical": 0, "codes_diff": 0, "codes_n": 0, "codes_total": 0,
         "scales_diff": 0, "scales_n": 0, "scale_max_ulp": 0, "other_diff": 0, "missing": [], "extra": [],
         "dtype_shape": [], "calibrated": [], "calib_identical": 0, "calib_max_ulp": 0, "calib_max_rel": 0.0,
         "cfg_diffs": len(cfg), "qcfg_diffs": len(qcfg), "hq_diffs": len(hq)}
    for r in rows:
        if r["kind"] == "missing":
            s["missing"].append(r["name"]); continue
        if r["kind"] == "extra":
            s["extra"].append(r["name"]); continue
        if r.get("calibrated"):
            s["calibrated"].append(r["name"] + ("" if not r.get("ndiff") else
                                                f" (differs: {r.get('max_ulp', '?')} ulp, rel {r.get('max_rel', 0):.2e})"))
            if r["kind"] == "dtype/shape":
                s["dtype_shape"].append(f"{r['name']}: {r['note']}")
            elif r["ndiff"] == 0:
                s["calib_identical"] += 1
            else:
                s["calib_max_ulp"] = max(s["calib_max_ulp"], r.get("max_ulp", 0))
                s["calib_max_rel"] = max(s["calib_max_rel"], r.get("max_rel", 0.0))
            continue
        s["tensors"] += 1
        if r["kind"] == "dtype/shape":
            s["dtype_shape"].append(f"{r['name']}: {r['note']}"); continue
        if r["ndiff"] == 0:
            s["identical"] += 1
        if r["kind"] in ("codes4", "codes"):
            s["codes_total"] += r["n"]
            if r["ndiff"]:
                s["codes_diff"] += 1; s["codes_n"] += r["ndiff"]
        elif r["kind"] == "scale":
            if r["ndiff"]:
                s["scales_diff"] += 1; s["scales_n"] += r["ndiff"]
                s["scale_max_ulp"] = max(s["scale_max_ulp"], r.get("max_ulp", 0))
        elif r["ndiff"]:
            s["other_diff"] += 1
    return s
