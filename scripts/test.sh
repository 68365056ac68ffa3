#!/usr/bin/env bash
# The test command (README, .ci/run): the whole suite on the newest releases that pyproject.toml allows, then the fast
# subset on the oldest transformers it allows, each in an environment of its own (.venv, .venv-floor).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
.venv/bin/python -m pytest -q --durations=25
bash scripts/setup.sh --dev --floor
.venv-floor/bin/python -m pytest -q -m "not slow" --durations=25
