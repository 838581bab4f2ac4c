# Builds llama.cpp tools outside the repository, for the scripts that compare with llama.cpp
# (scripts/interop/gguf_llama_cpp.sh, scripts/bench/llama_cpp_side_by_side.sh). Sourced, not run:
#
#   source scripts/interop/llama_cpp_build.sh
#   llama_cpp_build WORK [SOURCE_DIR] TARGET...   # sets LLAMA_CPP_BIN (the build's bin/)
#
# SOURCE_DIR: a llama.cpp source tree; empty: the one inside the pinned llama-cpp-python source
# package from PyPI, downloaded into WORK once. The build directory is $BUILD (default
# WORK/build), reused when it exists (Release, GGML_NATIVE, no curl/server/tests, then the words
# of $LLAMA_CPP_CMAKE_ARGS, which may override those); JOBS (default 2) builds in parallel. WORK
# must lie outside the repository.
llama_cpp_pinned_version="0.3.36"

llama_cpp_build() {
  local work="$1" src="$2"
  shift 2
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  case "$work" in "$root"|"$root"/*) echo "WORK must be outside the repository" >&2; return 2;; esac
  mkdir -p "$work"
  if [[ -z "$src" ]]; then
    src="$work/llama_cpp_python-$llama_cpp_pinned_version/vendor/llama.cpp"
    if [[ ! -d "$src" ]]; then
      python3 -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$llama_cpp_pinned_version" -d "$work" || return 2
      tar -xzf "$work/llama_cpp_python-$llama_cpp_pinned_version.tar.gz" -C "$work" || return 2
    fi
  fi
  [[ -f "$src/CMakeLists.txt" ]] || { echo "$src: not a llama.cpp source tree" >&2; return 2; }
  local build="${BUILD:-$work/build}"
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
    ${LLAMA_CPP_CMAKE_ARGS:-} >/dev/null || return 2
  ninja -C "$build" -j"${JOBS:-2}" "$@" >/dev/null || return 2
  LLAMA_CPP_BIN="$build/bin"
}
