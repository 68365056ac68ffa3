#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite at both ends of the range pyproject.toml allows, each in an
# environment of its own: the newest releases, torch's newest included (.venv-torch-newest), then the oldest torch and
# transformers with the rest at their newest (.venv-floor). Each end costs an install of torch (several GB where only
# PyPI's CUDA build can be had) and a run of the suite; docs/development.md gives the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev --torch newest
.venv-torch-newest/bin/python -m pytest -q --durations=25
bash scripts/setup.sh --dev --floor
.venv-floor/bin/python -m pytest -q --durations=25
