#!/usr/bin/env bash
# Renders qforge's HTML reports in a real browser: for each fixture model, the `sensitivity
# --html` page and the `quantize --auto --html` page, each screenshotted by headless Chromium at
# 1200x2000; fails unless every screenshot exists and is not blank (enough non-white pixels, and
# coloured ones: the charts drew). Installs Chromium (Debian package) when missing. Not part of
# the test suite: it needs a browser and takes a minute or two.
#
#   scripts/check_html_reports.sh [OUT_DIR]   (default build/html-check; QFORGE=path/to/qforge)
#
# The screenshots stay in OUT_DIR for a look: *-sensitivity.png, *-auto.png.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
qforge=${QFORGE:-$root/build/qforge}
fixtures=${QFORGE_FIXTURES:-$root/../shared/fixtures}
out=${1:-$root/build/html-check}
start=$(date +%s)

[ -x "$qforge" ] || { echo "no $qforge: build first (scripts/build.sh)" >&2; exit 1; }
[ -d "$fixtures/models" ] || { echo "no fixtures at $fixtures" >&2; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "installing chromium (apt-get)" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends \
    chromium fonts-dejavu-core >/dev/null
  browser=$(command -v chromium)
fi

mkdir -p "$out"
calib="$fixtures/corpora/tinyshakespeare.txt"
pages=()
for model in stories260K-hf tinystories-656K-hf; do
  m="$fixtures/models/$model"
  "$qforge" sensitivity "$m" --calib "$calib" --calib-samples 8 --calib-seq 64 \
    --formats nvfp4,fp8 --threads 2 -q --html "$out/$model-sensitivity.html" >/dev/null
  "$qforge" quantize "$m" -o "$out/$model-auto-out" --force --calib "$calib" --calib-samples 8 \
    --calib-seq 64 --threads 2 -q --auto --target-bits 5 --html "$out/$model-auto.html" >/dev/null
  rm -rf "$out/$model-auto-out"
  pages+=("$out/$model-sensitivity" "$out/$model-auto")
done

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
for p in "${pages[@]}"; do
  rm -f "$p.png"
  # Chromium prints its own chatter on stderr; the PNG check below is the verdict.
  "$browser" --headless --disable-gpu --no-sandbox --hide-scrollbars --no-first-run \
    --user-data-dir="$profile" --window-size=1200,2000 --screenshot="$p.png" \
    "file://$p.html" >/dev/null 2>&1 || true
done

# PNG decoding with the standard library only (zlib + the five scanline filters).
python3 - "${pages[@]/%/.png}" <<'EOF'
import struct, sys, zlib

def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if depth != 8 or ctype not in (2, 6):
        raise ValueError(f"unexpected PNG depth {depth} colour type {ctype}")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows

failed = False
for path in sys.argv[1:]:
    try:
        w, h, bpp, rows = pixels(path)
    except (OSError, ValueError, zlib.error) as e:
        print(f"FAIL {path}: {e}")
        failed = True
        continue
    ink = colour = 0
    for line in rows:
        for i in range(0, w * bpp, bpp):
            r, g, b = line[i], line[i + 1], line[i + 2]
            if min(r, g, b) < 230:
                ink += 1
            if max(r, g, b) - min(r, g, b) > 60:
                colour += 1
    total = w * h
    ok = ink > total * 0.01 and colour > total * 0.002
    print(f"{'ok  ' if ok else 'FAIL'} {path}: {w}x{h}, {100 * ink / total:.1f}% non-white, "
          f"{100 * colour / total:.2f}% coloured")
    failed |= not ok
sys.exit(1 if failed else 0)
EOF
echo "screenshots in $out ($(( $(date +%s) - start )) s)"
