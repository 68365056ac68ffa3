"""The steps of `hf-vanilla-transformer distill` and their records: each step writes its result into the output folder
and `steps/<step>.json`, the settings (inputs and options) it was made with, whether it completed, its result and its
wall time. A rerun skips the complete steps, resumes the interrupted one, and refuses, naming the option and both
values, settings that differ from those a step's result was made with.
"""

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..data.folders import write_whole
from ..errors import InputError


RECORDS = "steps"


@dataclass
class Step:
    """`run()` does the work and returns what the record keeps. `outputs`: what it writes in the output folder
    (default: the folder named after it). `resumes`: whether its run continues from what an interrupted one left
    there; the others write their outputs whole (`writes_folder`), so finding some of them without a record of their
    completion means a run ended between the two, and nothing tells whether they are complete. `check()`, before the
    record changes, refuses what an interrupted run left that this one cannot resume from. `kept()`: whether what a
    failed or interrupted run left holds work that a rerun keeps (default: any of its outputs is there); where not,
    a rerun may take other settings, and starts the step afresh."""

    name: str
    settings: dict
    run: Callable[[], dict]
    outputs: tuple[str, ...] = ()
    resumes: bool = False
    check: Callable[[], None] = lambda: None
    kept: Callable[[], bool] | None = None

    def __post_init__(self):
        self.outputs = self.outputs or (self.name,)
        self.settings = json.loads(json.dumps(self.settings))  # as the record will read it back


def option_values(argv: list[str]) -> dict[str, str]:
    """`--name value...` words as {"--name": "value ..."} (a flag: ""), to compare options one by one."""
    options, name = {}, None
    for word in argv:
        if word.startswith("--"):
            name, _, value = word.partition("=")
            options[name] = value
        elif name is not None:
            options[name] = f"{options[name]} {word}".strip()
    return options


class Steps:
    """The records of the steps run in `output_dir`."""

    def __init__(self, output_dir: Path):
        self.output_dir = Path(output_dir)
        self.folder = self.output_dir / RECORDS

    def read(self, name: str) -> dict | None:
        path = self.folder / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def write(self, name: str, record: dict) -> None:
        """Whole or not at all: a kill leaves the earlier record."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_whole(self.folder / f"{name}.json", json.dumps(record, indent=1, ensure_ascii=False) + "\n")

    def left(self, step: Step) -> list[Path]:
        return [self.output_dir / output for output in step.outputs if (self.output_dir / output).exists()]

    def keeps(self, step: Step) -> bool:
        """Whether what an earlier run of `step` left holds work (see `Step.kept`)."""
        return step.kept() if step.kept and self.left(step) else bool(self.left(step))

    def check(self, steps: list[Step]) -> None:
        """Before any work: refuse an output folder that holds something else, outputs without a record, and settings
        other than those of a step's existing result."""
        taken = (
            [p for p in self.output_dir.iterdir() if not p.name.startswith(".")] if self.output_dir.is_dir() else []
        )
        if taken and not self.folder.is_dir():
            raise InputError(
                f"--output_dir {self.output_dir} is not empty and holds no distillation run ({RECORDS}/): choose a "
                "new folder."
            )
        for step in steps:
            record, left = self.read(step.name), self.left(step)
            if record is None:
                if left:
                    raise InputError(
                        f"{left[0]} exists but no record says which run made it ({RECORDS}/{step.name}.json): move it "
                        "away, or choose another --output_dir."
                    )
                continue
            if not (record["complete"] or self.keeps(step)):
                continue  # nothing of it is kept: this run starts it with its own settings
            for name, before, now in differences(record["settings"], step.settings):
                raise InputError(
                    f"--output_dir {self.output_dir}: its {step.name} step was made with {name} "
                    f"{_shown(before)}; this run gives {_shown(now)}. Give the earlier value to complete that "
                    "run, or choose another --output_dir."
                )

    def run(self, step: Step) -> dict:
        """Run `step` unless its record says it completed; its record's result."""
        record = self.read(step.name)
        if record is not None and record["complete"]:
            print(f"{step.name}: complete ({self.folder / step.name}.json)")
            return record["result"]
        for partial in self.output_dir.glob(".*.partial"):  # a folder that a killed step was writing
            if partial.name.startswith(tuple(f".{Path(output).name}-" for output in step.outputs)):
                shutil.rmtree(partial, ignore_errors=True)
        if not self.keeps(step):  # an earlier run's files without work in them (a failure at its start)
            for path in self.left(step):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        left = self.left(step)
        if left and not step.resumes:
            raise InputError(
                f"{left[0]}: an interrupted run of the {step.name} step left it, and nothing tells whether it is "
                f"complete ({RECORDS}/{step.name}.json does not say so): remove it to make that step again."
            )
        step.check()
        attempts = (record or {}).get("attempts", 0) + 1
        print(f"{step.name}: {'resuming' if left else 'starting'}")
        self.write(step.name, dict(settings=step.settings, complete=False, attempts=attempts))
        started = time.time()
        result = step.run()
        seconds = round(time.time() - started, 1)
        self.write(
            step.name, dict(settings=step.settings, complete=True, attempts=attempts, seconds=seconds, result=result)
        )
        return result

    def wait(self, step: Step, poll: float = 5.0) -> dict:
        """The result of a step that another process runs, once its record says it completed."""
        while True:
            record = self.read(step.name)
            if record is not None and record["complete"]:
                return record["result"]
            time.sleep(poll)

    def seconds(self, steps: list[Step]) -> dict[str, float]:
        """The wall time of each of `steps` that is complete (of the run that completed it)."""
        records = {step.name: self.read(step.name) or {} for step in steps}
        return {name: record["seconds"] for name, record in records.items() if record.get("complete")}


def differences(before: dict, now: dict, prefix: str = ""):
    """(name, earlier value, value) of each setting that differs; in settings that are dicts (files and their stamps),
    each entry that differs."""
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            yield from differences(old, new, f"{prefix}{name} ")
        elif old != new:
            yield f"{prefix}{name}", old, new


def _shown(value) -> str:
    return "(not given)" if value is None else json.dumps(value, ensure_ascii=False)
