"""Developers' tools, run from the repository root as modules: `python -m scripts.benchmark`, `python -m
scripts.profile_decoding`, `python -m scripts.benchmark_translate`, `python -m scripts.memory_scaling`. Users' workflows
are sub-commands of `hf-vanilla-transformer`."""
