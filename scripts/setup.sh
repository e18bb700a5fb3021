#!/usr/bin/env bash
# Installs everything zplan needs on a fresh Debian 12 machine: the Debian packages of the build and a
# Python virtual environment (.venv) holding the test oracles (onnx, onnxruntime, numpy) and what the Python
# package builds and tests with (nanobind, scikit-build-core, pytest; python/, docs/python.md). strace is for
# e2e/checkpoint/*/durable, which traces a save's system calls and would otherwise report itself skipped.
# Idempotent: a second run finds everything in place and returns in a second or two.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

pkgs=(cmake ninja-build g++ ccache
      libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
      libonnx-dev libprotobuf-dev protobuf-compiler
      libflatbuffers-dev flatbuffers-compiler
      openmpi-bin libopenmpi-dev libopenblas-dev
      nlohmann-json3-dev libcli11-dev libgtest-dev googletest
      clang-22 libclang-rt-22-dev
      python3-venv python3-dev
      strace)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv="$top/.venv"
if [ ! -x "$venv/bin/python" ] ||
   ! "$venv/bin/python" -c 'import onnx, onnxruntime, numpy, nanobind, scikit_build_core, pytest' 2>/dev/null; then
  echo "setup: creating the Python test-oracle environment in .venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check onnx onnxruntime numpy nanobind scikit-build-core pytest
fi

# Where nvcc is found (the CUDA backend is then built), the machine-code check of the wgmma attention kernels
# (ctest cuda/wgmma_sass, tests/cuda/check_wgmma_sass.py) needs cuobjdump and the nvdisasm it runs. A CUDA
# install of the compilers alone (CI's: nvcc, ptxas, fatbinary, nvlink) has neither; NVIDIA's wheels carry
# both (5 MB, into .venv/lib/python3*/site-packages/nvidia/cu13/bin, where CMake looks). 13.2.51 is the
# oldest release of these wheels, the nearest to the CUDA 13.0 nvcc here; a newer cuobjdump reads an older
# ptxas's sm_90a code. Pinned, because the check parses the listing's text.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump" >/dev/null ||
     ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm" >/dev/null; then
    echo "setup: installing cuobjdump and nvdisasm into .venv (the machine-code check of the CUDA kernels)"
    "$venv/bin/pip" install -q --disable-pip-version-check nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51
  fi
fi
echo "setup: ok"
