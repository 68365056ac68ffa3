"""Developers' tools, run from the repository root as modules: `python -m scripts.benchmark` (speed against
MarianMTModel, torch.nn.Transformer, CTranslate2 and ONNX Runtime), `scripts.profile_decoding` (where a decoding step
spends its time), `scripts.benchmark_translate` (the translate command against pipeline loops), `scripts.demo_benchmark`
(the whole translation demo, its BLEU beside the recorded figure), `scripts.memory_scaling`, and the GPU acceptance run
`scripts.gpu_acceptance` (with `scripts.gpu_benchmark`, `scripts.gpu_training` and `scripts.gpu_environment`;
docs/gpu.md). Users' workflows are sub-commands of `hf-vanilla-transformer`."""
