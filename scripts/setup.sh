#!/usr/bin/env bash
# Installs the project into .venv (or into the active virtualenv), picking the right PyTorch build:
#   - a torch that already imports (for example your CUDA build) is kept;
#   - with an NVIDIA GPU visible, the default (CUDA) wheel from PyPI;
#   - otherwise the CPU wheel from download.pytorch.org, falling back to the default index if that is unreachable.
# Usage: bash scripts/setup.sh [--dev] [--export] [--floor | --torch VERSION]
#   --dev     the test tools, every optional engine, and what the browser and transformers.js tests run:
#             Debian's chromium and chromium-driver (with apt-get, as root or with passwordless sudo) and the pinned
#             transformers.js (with npm, into ~/.cache/hf_vanilla_transformer). Where one cannot be installed, the
#             tests that need it skip and name this command.
#   --export  the inference engines the model exports to (CTranslate2, ONNX Runtime).
#   --floor   into .venv-floor, with the oldest torch and the oldest transformers that pyproject.toml allows (the rest
#             at their newest): the other end of the supported range, which scripts/test.sh tests too.
#   --torch VERSION
#             into .venv-torch-VERSION, with that torch release (as above: the CPU build where PyTorch's index has it
#             and no GPU is visible); `--torch newest` takes the newest release the package index offers, each time.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=()
dev=0
venv=.venv
floor=0
torch_release=
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) extras+=(dev); dev=1 ;;
    --export) extras+=(export) ;;
    --floor) venv=.venv-floor; floor=1 ;;
    --torch)
      [ $# -ge 2 ] || { echo "setup.sh: --torch needs a release (such as 2.12.1) or newest" >&2; exit 2; }
      torch_release=$2; venv=.venv-torch-$2; shift ;;
    *) echo "setup.sh: unknown option $1 (expected --dev, --export, --floor or --torch VERSION)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$floor" = 1 ] && [ -n "$torch_release" ]; then
  echo "setup.sh: --floor installs the oldest torch allowed; give --torch without --floor for another" >&2
  exit 2
fi

python=${PYTHON:-python3}
if [ -z "${VIRTUAL_ENV:-}" ] || [ "$venv" != .venv ]; then
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  python=$venv/bin/python
fi
pip=("$python" -m pip --disable-pip-version-check -q)

# A package's lower bound in pyproject.toml ("torch>=2.10" gives 2.10).
lower_bound() {
  "$python" -c 'import re, sys; print(re.search(rf"\"{sys.argv[1]}>=([\w.]+)", open("pyproject.toml").read())[1])' "$1"
}

cpu_index=https://download.pytorch.org/whl/cpu
install_torch() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" install "$1"
  elif ! "${pip[@]}" install --retries 1 --timeout 20 --index-url "$cpu_index" "$1" 2>/dev/null; then
    echo "setup.sh: $1 is not to be had from $cpu_index; PyPI's build instead (with CUDA: several GB)." >&2
    "${pip[@]}" install "$1"
  fi
}

if [ "$floor" = 1 ]; then
  install_torch "torch==$(lower_bound torch)"
elif [ "$torch_release" = newest ]; then
  newest=$("$python" -m pip index versions torch 2>/dev/null | sed -n 's/^torch (\(.*\))$/\1/p')
  [ -n "$newest" ] || { echo "setup.sh: the package index did not say which torch release is the newest" >&2; exit 1; }
  install_torch "torch==$newest"
elif [ -n "$torch_release" ]; then
  install_torch "torch==$torch_release"
elif ! "$python" -c "import torch" >/dev/null 2>&1; then
  install_torch "torch>=$(lower_bound torch)"
fi

spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi
pins=()
if [ "$floor" = 1 ]; then pins=("transformers==$(lower_bound transformers)"); fi
"${pip[@]}" install -e "$spec" "${pins[@]}"

if [ "$dev" = 1 ]; then
  # The browser tests drive Debian's Chromium; never fatal: those tests skip, naming this command.
  if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo -n)
    if [ ${#sudo[@]} = 0 ] || sudo -n true 2>/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      "${sudo[@]}" apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
        || { "${sudo[@]}" apt-get update -q >/dev/null 2>&1 \
             && "${sudo[@]}" apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } \
        || echo "setup.sh: could not install chromium and chromium-driver: the browser tests will skip." >&2
    fi
  fi
  if command -v npm >/dev/null 2>&1; then
    "$python" -c "from hf_vanilla_transformer.interop.onnx_runtime import install_transformers_js as i; i()" \
      || echo "setup.sh: could not install transformers.js with npm: its tests will skip." >&2
  fi
fi
echo "Installed into $("$python" -c 'import sys; print(sys.prefix)') (torch $("$python" -c 'import torch; print(torch.__version__)'))"
