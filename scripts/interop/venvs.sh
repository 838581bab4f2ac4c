# The pinned throwaway venvs of the interop harnesses (sourced by run.sh and moe.sh): versions and
# the function that creates or updates a venv when its pins change.

# torch 2.15.0 / transformers 5.24.0 are the conformance venv's versions (pip cache).
# modelopt 0.47.0 imports requests without declaring it.
PINS_MODELOPT=(
  "nvidia-modelopt==0.47.0" "torch==2.15.0" "transformers==5.24.0"
  "safetensors==0.8.0" "numpy==2.4.6" "requests==2.34.2"
)
# llmcompressor 0.14.0.1 requires torch<=2.14.0; these are what pip resolved for it.
PINS_LLMC=(
  "llmcompressor==0.14.0.1" "compressed-tensors==0.19.0" "torch==2.14.0" "transformers==5.17.0"
  "accelerate==1.15.0" "datasets==5.2.0" "safetensors==0.8.0" "numpy==2.4.6"
)

setup_venv() {  # venv, pins...
  local venv="$1"; shift
  local stamp="$venv/.qforge-interop-pins"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating venv $venv"
    "$PYTHON" -m venv "$venv"
  fi
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$*" ]]; then
    echo "installing $* into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    printf '%s' "$*" >"$stamp"
  fi
}

# The MoE harness: the conformance versions of torch / transformers with compressed-tensors,
# which transformers needs to load compressed-tensors exports.
PINS_MOE=(
  "torch==2.15.0" "transformers==5.24.0" "safetensors==0.8.0" "numpy==2.4.6"
  "compressed-tensors==0.19.0"
)

# The GGUF check (gguf_check.sh): llama.cpp's gguf-py reader and its NumPy dequantizers.
PINS_GGUF=("gguf==0.19.0" "numpy==2.4.6")
