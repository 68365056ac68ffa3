"""`hf-vanilla-transformer serve` with faults planted in its engine, for tests/serve: `python -m
tests.serve.faulty_server ARGS` takes the command's options and runs the command's own server path.

In the folder named by `SERVE_GATE`: a batch holding the sentence `POISON` raises; a batch holding `BLOCK` writes
`started` and waits until a file `release` appears.
"""

import os
import sys
import time
from pathlib import Path

from hf_vanilla_transformer.serve.app import create_app, load
from hf_vanilla_transformer.serve.command import build_parser, run, settings_of


POISON = "Das ist Gift."
BLOCK = "Bitte warten."


def plant_faults(translator, gate: Path) -> None:
    tokenizer, generate = translator.tokenizer, translator.backend.generate
    poison, block = (tokenizer(text)["input_ids"] for text in (POISON, BLOCK))

    def faulty(sources, *args, **kwargs):
        if poison in sources:
            raise RuntimeError("a planted fault")
        if block in sources:
            (gate / "started").touch()
            deadline = time.monotonic() + 300
            while not (gate / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return generate(sources, *args, **kwargs)

    translator.backend.generate = faulty


def main(argv: list[str]) -> None:
    args = build_parser("faulty_server").parse_args(argv)
    settings = settings_of(args)
    translator = load(settings)
    plant_faults(translator, Path(os.environ["SERVE_GATE"]))
    run(create_app(settings, translator=translator), args)


if __name__ == "__main__":
    main(sys.argv[1:])
