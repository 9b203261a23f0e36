#!/usr/bin/env bash
# Install prefcall and everything it needs into ./.venv (or $PREFCALL_VENV).
#
# - torch is installed first, pinned to the CPU build, so that sentence-transformers does not
#   pull several GB of CUDA wheels. GPU users: install their own torch into the venv first.
# - llama-cpp-python builds from source. The default flags below give a portable CPU build:
#   a native build (-DGGML_NATIVE=ON) can crash with SIGILL in ggml_backend_amx_mul_mat on VMs
#   whose CPUs advertise AMX without supporting it. Set CMAKE_ARGS yourself for CUDA or Metal:
#     CMAKE_ARGS="-DGGML_CUDA=on"  bash scripts/install.sh      # NVIDIA
#     CMAKE_ARGS="-DGGML_METAL=on" bash scripts/install.sh      # Apple silicon
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PREFCALL_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip wheel
"${pip[@]}" install --quiet "torch==2.13.0"
echo "prefcall: building llama-cpp-python with CMAKE_ARGS=$CMAKE_ARGS (first time: ~5 minutes)" >&2
# [test] includes [server]: llama-cpp-python's server extra (fastapi, starlette-context, ...) for the served-engine
# tests; it adds Python packages only, llama-cpp-python is built once.
"${pip[@]}" install --quiet -e "$here[test]"
echo "prefcall: installed into $venv (activate with: source $venv/bin/activate)" >&2
