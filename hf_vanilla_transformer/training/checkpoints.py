"""Trainer checkpoints: finding them, checking them before a resume, and averaging the last ones (section 6.1)."""

import json
import re
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save
from transformers import TrainerCallback
from transformers.trainer_pt_utils import safe_globals
from transformers.utils import logging

from ..data.folders import apply_umask, check_output_dir, model_files, writes_folder
from ..errors import InputError


logger = logging.get_logger(__name__)


class FileModesCallback(TrainerCallback):
    """Checkpoints get the file modes of the process umask ([`apply_umask`]) rather than safetensors' owner-only."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            apply_umask(Path(args.output_dir) / f"checkpoint-{state.global_step}")


def save_model(trainer) -> None:
    """`trainer.save_model()` into its output folder, with the file modes of the process umask."""
    trainer.save_model()
    if trainer.is_world_process_zero():
        apply_umask(trainer.args.output_dir)


def verify_checkpoint(checkpoint: str | Path) -> None:
    """Raise, naming the file, if a checkpoint to resume from is truncated or corrupt.

    Resuming would otherwise fail deep inside Trainer, or worse, quietly start from fresh weights.
    """
    checkpoint = Path(checkpoint)
    for required in ("model.safetensors", "trainer_state.json"):  # the state is written last: its absence = cut short
        if not (checkpoint / required).is_file():
            raise InputError(f"{checkpoint / required} is missing: {checkpoint} is not a complete checkpoint.")
    weights = checkpoint / "model.safetensors"
    try:
        with safe_open(weights, framework="pt") as f:
            for name in f.keys():
                f.get_slice(name)[-1:]  # reads the last bytes of every tensor: catches truncated files
    except Exception as error:
        raise InputError(f"{weights} is corrupt or truncated ({error}); resume from an earlier checkpoint.") from error
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        path = checkpoint / name
        if not path.is_file():
            continue
        try:
            if path.suffix == ".json":
                json.loads(path.read_text())
            else:
                with safe_globals():  # the numpy types Trainer itself allows in rng_state.pth
                    torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise InputError(
                f"{path} is corrupt or truncated ({error}); resume from an earlier checkpoint."
            ) from error


def checkpoint_folders(run_dir: str | Path) -> list[Path]:
    """The `checkpoint-<step>` folders of a Trainer run, oldest (lowest step) first."""
    found = [path for path in Path(run_dir).glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", path.name)]
    return sorted((path for path in found if path.is_dir()), key=lambda path: int(path.name.split("-")[1]))


def last_complete_checkpoint(run_dir: str | Path) -> Path:
    """The newest `checkpoint-<step>` that passes `verify_checkpoint`, skipping (and reporting) newer ones that a crash
    or a kill left half-written: Trainer does not write checkpoints atomically."""
    problems = []
    for checkpoint in reversed(checkpoint_folders(run_dir)):
        try:
            verify_checkpoint(checkpoint)
        except InputError as error:
            logger.warning(f"Skipping an incomplete checkpoint: {error}")
            problems.append(str(error))
            continue
        return checkpoint
    raise InputError(f"No complete checkpoint-<step> folder in {run_dir} to resume from. " + " ".join(problems))


def finished(checkpoint: str | Path, max_steps: int, num_train_epochs: float) -> str | None:
    """Why resuming from `checkpoint` has nothing to train (a message), or None: its step already reaches `max_steps`
    (where above 0), else its epoch reaches `num_train_epochs`. Trainer would save the model and scores again anyway,
    replacing the run's finished model with the checkpoint's weights."""
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    step, epoch = state["global_step"], state.get("epoch") or 0
    if max_steps > 0 and step >= max_steps:
        return f"already trained {step} steps (--max_steps {max_steps}): nothing to do; a larger --max_steps goes on."
    if max_steps <= 0 and epoch >= num_train_epochs:
        return (
            f"already trained {epoch:g} epochs (--num_train_epochs {num_train_epochs:g}): nothing to do; a larger "
            "--num_train_epochs (or --max_steps) continues it."
        )
    return None


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The `n` most recent `checkpoint-<step>` folders of a Trainer run, oldest first."""
    if not Path(run_dir).is_dir():
        raise InputError(f"--run_dir {run_dir}: no such folder.")
    found = checkpoint_folders(run_dir)
    if len(found) < n:
        raise InputError(f"--last {n}: {run_dir} has {len(found)} checkpoint-<step> folder(s), fewer than {n}.")
    return found[-n:]


def mean_weights(checkpoints: list[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' `model.safetensors` weights (summed in float64)."""
    if not checkpoints:
        raise InputError("No checkpoints to average.")
    checkpoints = [Path(c) for c in checkpoints]
    for checkpoint in checkpoints:
        if not checkpoint.is_dir():
            raise InputError(f"{checkpoint}: no such checkpoint folder.")
    total, reference = None, None
    for checkpoint in checkpoints:
        weights_file = checkpoint / "model.safetensors"
        if not weights_file.is_file():
            raise InputError(f"{weights_file} does not exist: average only safetensors checkpoints.")
        weights = load_file(weights_file)
        if total is None:
            reference = weights
            total = {k: v.double() for k, v in weights.items()}
            continue
        first = checkpoints[0] / "model.safetensors"
        if weights.keys() != total.keys():
            raise InputError(f"{weights_file} has different tensors from {first}: average checkpoints of one run.")
        for k, v in weights.items():
            if v.shape != total[k].shape:
                raise InputError(
                    f"{weights_file} holds {k} of shape {list(v.shape)}, {first} of shape {list(total[k].shape)}: "
                    "these are checkpoints of different models; average checkpoints of one run."
                )
            total[k] += v.double()
    return {k: (v / len(checkpoints)).to(reference[k].dtype) for k, v in total.items()}


def average_checkpoints(checkpoints: list[str | Path], output_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the element-wise mean of the checkpoints' weights as a normal model folder, whole or not at all.

    Configs, code and tokenizer files are copied from the last checkpoint, so `from_pretrained(output_dir)` loads it.
    """
    check_output_dir(output_dir, overwrite)
    average = mean_weights(checkpoints)
    with writes_folder(output_dir, overwrite) as folder:
        for item in model_files(checkpoints[-1]):
            if item.suffix != ".safetensors":
                shutil.copy2(item, folder / item.name)
        # Written by Python rather than safetensors' save_file, which gives the file mode 0600 whatever the umask.
        (folder / "model.safetensors").write_bytes(save(average, metadata={"format": "pt"}))
    return Path(output_dir)


def load_average(model: torch.nn.Module, checkpoints: list[str | Path]) -> None:
    """Put the mean of the checkpoints' weights into `model` (the run that saved them). Tied weights, saved once,
    follow the tensor they share."""
    average = mean_weights(checkpoints)
    missing, unexpected = model.load_state_dict(average, strict=False)
    state = model.state_dict()
    loaded = {state[name].data_ptr() for name in average if name in state}
    untied = [name for name in missing if state[name].data_ptr() not in loaded]
    if unexpected or untied:
        raise InputError(f"{checkpoints[-1]} does not hold this model's weights: {sorted(unexpected or untied)[:3]}.")
