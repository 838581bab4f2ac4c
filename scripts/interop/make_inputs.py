"""Make the inputs of the interop run under $QF_INTEROP_WORK/inputs: each fixture as it is (F32,
files symlinked) and a BF16 copy (every F32 tensor rounded to BF16 by torch, tensor names and the
safetensors metadata kept, so TinyStories-656K keeps its tied-embedding alias; config.json says
torch_dtype bfloat16). The fixtures are never copied into the repository. Also writes the
calibration token windows qforge selects for each model (cases.calib_windows_path), which the
reference tools' forward passes then use.

usage: make_inputs.py QFORGE_BINARY"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import cases as C  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def main():
    qforge = sys.argv[1]
    for model, src in C.MODELS.items():
        f32 = C.input_dir(model, "f32")
        if os.path.exists(f32):
            shutil.rmtree(f32)
        os.makedirs(f32)
        for f in os.listdir(src):
            os.symlink(os.path.join(src, f), os.path.join(f32, f))
        bf16 = C.input_dir(model, "bf16")
        if os.path.exists(bf16):
            shutil.rmtree(bf16)
        os.makedirs(bf16)
        for f in os.listdir(src):
            if f in ("model.safetensors", "config.json"):
                continue
            shutil.copy(os.path.join(src, f), os.path.join(bf16, f))
        st = os.path.join(src, "model.safetensors")
        with open(st, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            meta = json.loads(fh.read(n)).get("__metadata__") or {}
        t = {k: (v.to(torch.bfloat16) if v.dtype == torch.float32 else v) for k, v in load_file(st).items()}
        save_file(t, os.path.join(bf16, "model.safetensors"), metadata=meta)
        cfg = json.load(open(os.path.join(src, "config.json")))
        cfg["torch_dtype"] = "bfloat16"
        json.dump(cfg, open(os.path.join(bf16, "config.json"), "w"), indent=2)
        windows = subprocess.run([qforge, "tokenize", src, "--json"] + C.QF_CALIB,
                                 capture_output=True, text=True, check=True).stdout
        with open(C.calib_windows_path(model), "w") as f:
            f.write(windows)
        print(f"inputs: {f32}, {bf16}; calibration windows: {C.calib_windows_path(model)}")


if __name__ == "__main__":
    main()
