"""The whole translation demo as the README runs it, its test BLEU printed next to the recorded figures.

    python -m scripts.demo_benchmark [--output_dir outputs/demo-benchmark] [--threads N]

Runs `hf-vanilla-transformer train translation` with the demo's defaults (2,300 steps, about 15 minutes on 2 cores)
in a new process, then prints the run report's test BLEU and chrF (beam 4, length penalty 0.6) beside `DEMO_BLEU`,
the figure of the last recorded full run, and the README's figure, with the wall time. It exits 1 when the BLEU is
more than `DEMO_BLEU_MARGIN` below `DEMO_BLEU`. Not part of the test suite, which pins the demo's first steps instead
(tests/recipes/test_demo_trajectory.py). Record a run's figures in a dated file under docs/results/.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hf_vanilla_transformer.recipes.translation import DEMO_BLEU, DEMO_BLEU_MARGIN, DEMO_RESULT
from hf_vanilla_transformer.training.report import read_run_report


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_bleu(readme: Path = README) -> float | None:
    """The demo's BLEU as the README states it ("scores **BLEU 36.19"), or None where it states none."""
    found = re.search(r"\*\*BLEU (\d+(?:\.\d+)?)", readme.read_text(encoding="utf-8")) if readme.is_file() else None
    return float(found.group(1)) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="outputs/demo-benchmark", help="the run's folder (replaced)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the run (default: torch's choice)")
    args = parser.parse_args(argv)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
    command = [sys.executable, "-m", "hf_vanilla_transformer", "train", "translation"]
    command += ["--output_dir", args.output_dir, "--overwrite"]
    started = time.time()
    subprocess.run(command, env=env, check=True, stdin=subprocess.DEVNULL)
    minutes = (time.time() - started) / 60
    report = read_run_report(args.output_dir)
    test, training = report["test"], report["training"]
    readme = readme_bleu()
    print(
        f"\nDemo: test BLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f} ({test['num_samples']} pairs, beam "
        f"{test['num_beams']}, length penalty {test['length_penalty']}); recorded {DEMO_BLEU:.2f} ({DEMO_RESULT}), "
        f"README {readme if readme is not None else 'states none'}; difference {test['bleu'] - DEMO_BLEU:+.2f}"
    )
    print(f"{training['steps']:,} steps in {minutes:.1f} min wall time on {training['hardware']}")
    return 1 if test["bleu"] < DEMO_BLEU - DEMO_BLEU_MARGIN else 0


if __name__ == "__main__":
    sys.exit(main())
