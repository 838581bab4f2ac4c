"""Compares the tensor bytes of two GGUF files by name (metadata is not compared): prints one
line per tensor (same / DIFFERENT with the count of differing bytes / missing) and exits 1 when
any tensor in both files differs or the type/shape differ. Pure Python (no numpy, no gguf-py),
so it runs wherever llama.cpp's tools do.

usage: python3 gguf_tensor_diff.py A.gguf B.gguf [--only NAME_SUBSTRING]
"""
import struct
import sys

# Scalar sizes of GGUF metadata value types (gguf.h: UINT8=0 .. FLOAT64=12; 8 = STRING, 9 = ARRAY).
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def skip_value(t):
        nonlocal pos
        if t == 8:
            string()
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n):
                skip_value(et)
        else:
            pos += SIZES[t]

    assert data[:4] == b"GGUF", path
    pos = 4
    _version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key, t = string(), take("I")
        if key == "general.alignment" and t == 4:
            alignment = take("I")
        else:
            skip_value(t)
    infos = []
    for _ in range(n_tensors):
        name, nd = string(), take("I")
        ne = [take("Q") for _ in range(nd)]
        typ, off = take("I"), take("Q")
        infos.append((name, ne, typ, off))
    start = (pos + alignment - 1) // alignment * alignment
    ends = sorted(o for _, _, _, o in infos) + [len(data) - start]
    tensors = {}
    for name, ne, typ, off in infos:
        nxt = min(e for e in ends if e > off) if any(e > off for e in ends) else len(data) - start
        tensors[name] = (ne, typ, data[start + off:start + nxt])
    return tensors


def main():
    a, b = read_gguf(sys.argv[1]), read_gguf(sys.argv[2])
    only = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--only" else ""
    bad = 0
    for name in sorted(set(a) | set(b)):
        if only and only not in name:
            continue
        if name not in a or name not in b:
            print(f"missing  {name} (only in {'A' if name in a else 'B'})")
            continue
        (nea, ta, da), (neb, tb, db) = a[name], b[name]
        if nea != neb or ta != tb:
            print(f"DIFFERENT {name}: type/shape {ta} {nea} vs {tb} {neb}")
            bad += 1
            continue
        n = min(len(da), len(db))  # the padding after the last tensor may differ
        diff = sum(1 for x, y in zip(da[:n], db[:n]) if x != y)
        print(("same      " if diff == 0 else f"DIFFERENT ({diff} bytes) ") + name)
        bad += diff != 0
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
