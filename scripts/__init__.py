"""Developers' tools, run from the repository root as modules (`python -m scripts.benchmark`, ...): benchmarks,
profiles, scaling runs and the GPU acceptance run. scripts/README.md says what each measures and how to run it; their
figures go into dated files under docs/results/. Users' workflows are sub-commands of `hf-vanilla-transformer`."""
