#!/usr/bin/env bash
# Installs the Debian 12 packages qforge needs to build and test. Skips apt when all are present.
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libhwy-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libyaml-cpp-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3 bc time
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
