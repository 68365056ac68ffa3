#!/usr/bin/env bash
# Installs the project into .venv (or into the active virtualenv), picking the right PyTorch build:
#   - a torch that already imports (for example your CUDA build) is kept;
#   - with an NVIDIA GPU visible, the default (CUDA) wheel from PyPI;
#   - otherwise the CPU wheel from download.pytorch.org, falling back to the default index if that is unreachable.
# Usage: bash scripts/setup.sh [--dev] [--export]   (--benchmark is an alias of --export: the engines it times)
set -euo pipefail
cd "$(dirname "$0")/.."

extras=()
for arg in "$@"; do
  case "$arg" in
    --dev) extras+=(dev) ;;
    --export | --benchmark) extras+=(export) ;;
    *) echo "setup.sh: unknown option $arg (expected --dev and/or --export)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if [ -z "${VIRTUAL_ENV:-}" ]; then
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  python=.venv/bin/python
fi
pip=("$python" -m pip --disable-pip-version-check -q)

if ! "$python" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" install "torch>=2.6"
  else
    "${pip[@]}" install --retries 1 --timeout 20 --index-url https://download.pytorch.org/whl/cpu "torch>=2.6" \
      || "${pip[@]}" install "torch>=2.6"
  fi
fi

spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi
"${pip[@]}" install -e "$spec"
echo "Installed into $("$python" -c 'import sys; print(sys.prefix)') (torch $("$python" -c 'import torch; print(torch.__version__)'))"
