"""The model's speed before and after a change, in one process: the model room of an earlier commit and today's, with
the same weights, alternating within each repeat.

    python -m scripts.before_after --before ee12a84             # the benchmark's small size, float32, 2 threads

The model files of `--before` are read from git into a temporary folder and imported as a separate package (they import
nothing else of the package). Both models get the weights of today's freshly built benchmark model; the
tasks are the benchmark's: one training pass over its batches (Adam with learning rate 0, so the weights stay equal),
greedy and beam-4 generation of its 64 sources in batches of 16. Beam-4 outputs are checked identical; medians are
reported with the ratio of the speeds (above 1: today's is faster).
"""

import argparse
import importlib
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import benchmark


def model_room_at(revision: str, folder: Path):
    """The model room of `revision`, written into `folder` and imported as the package `model_<rev>`: returns its
    configuration and modeling modules."""
    name = "model_" + re.sub(r"\W", "_", revision)
    package = folder / name
    package.mkdir()
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", revision, "hf_vanilla_transformer/model/"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for path in listing:
        text = subprocess.run(["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True).stdout
        (package / Path(path).name).write_text(text)
    # The code files alone: the room's own __init__ registers its classes with transformers, which would make the
    # revision's classes this process's Auto classes.
    (package / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    return tuple(
        importlib.import_module(f"{name}.{kind}_vanilla_transformer") for kind in ("configuration", "modeling")
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a git revision of this repository")
    parser.add_argument("--size", default="small", choices=benchmark.SIZES)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchmark.quiet()
    with tempfile.TemporaryDirectory() as folder:
        configuration, modeling = model_room_at(args.before, Path(folder))
        after = benchmark.build_model("ours-sdpa", args.size)
        config = configuration.VanillaTransformerConfig(**after.config.to_diff_dict())
        before = modeling.VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation="sdpa")
        before.load_state_dict(after.state_dict(), strict=True)
        models = {"before": before, "after": after}
        workload = benchmark.make_workload(after.config.vocab_size)
        batches = [benchmark.training_batch(pairs, "cpu") for pairs in workload["train"]]
        sources = benchmark.generation_batches("greedy", workload["sources"], "cpu")
        optimizers = {name: torch.optim.Adam(model.parameters(), lr=0.0) for name, model in models.items()}

        def train(name):
            model = models[name].train()
            for batch in batches:
                benchmark.training_loss(model, "ours-sdpa", batch).backward()
                optimizers[name].step()
                optimizers[name].zero_grad(set_to_none=True)

        def generate(name, beams):
            with torch.no_grad():
                return [benchmark.generate(models[name].eval(), "ours-sdpa", *s, beams) for s in sources]

        tasks = {"train": train, "greedy": lambda name: generate(name, 1), "beam4": lambda name: generate(name, 4)}
        for name in models:  # warm-up: every shape once
            for task in tasks.values():
                task(name)
        identical = all(torch.equal(a, b) for a, b in zip(generate("before", 4), generate("after", 4)))
        seconds = {(task, name): [] for task in tasks for name in models}
        for repeat in range(args.repeats):
            for task, run in tasks.items():
                for name in ("before", "after") if repeat % 2 == 0 else ("after", "before"):
                    start = time.perf_counter()
                    run(name)
                    seconds[(task, name)].append(time.perf_counter() - start)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(
        f"{args.before} -> {commit} (working tree), {args.size}, float32, {args.threads} threads, "
        f"{args.repeats} repeats"
    )
    print(f"beam-4 outputs identical: {identical}")
    for task in tasks:
        old, new = (statistics.median(seconds[(task, name)]) for name in ("before", "after"))
        print(f"{task:7s} before {old:.3f} s  after {new:.3f} s  speed after/before {old / new:.3f}x")
    return identical


if __name__ == "__main__":
    main()
