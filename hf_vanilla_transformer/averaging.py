"""Checkpoint averaging (section 6.1: the paper averages the last 5 or 20 checkpoints)."""

import shutil
from pathlib import Path

from safetensors.torch import load_file, save

from .errors import InputError
from .training import checkpoint_folders


def last_checkpoints(run_dir: str | Path, n: int) -> list[Path]:
    """The `n` most recent `checkpoint-<step>` folders of a Trainer run, oldest first."""
    found = checkpoint_folders(run_dir)
    if len(found) < n:
        raise InputError(f"Asked to average the last {n} checkpoints but {run_dir} has {len(found)}.")
    return found[-n:]


def average_checkpoints(checkpoints: list[str | Path], output_dir: str | Path) -> Path:
    """Write the element-wise mean of the checkpoints' weights as a normal model folder.

    Configs, code and tokenizer files are copied from the last checkpoint, so `from_pretrained(output_dir)` loads it.
    """
    if not checkpoints:
        raise InputError("No checkpoints to average.")
    checkpoints = [Path(c) for c in checkpoints]
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
        if weights.keys() != total.keys():
            raise InputError(f"{weights_file} has different tensors from {checkpoints[0] / 'model.safetensors'}.")
        for k, v in weights.items():
            total[k] += v.double()
    average = {k: (v / len(checkpoints)).to(reference[k].dtype) for k, v in total.items()}

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for item in checkpoints[-1].iterdir():
        if (
            item.is_file()
            and item.suffix in {".json", ".py", ".txt", ".model", ".md"}
            and item.name != "trainer_state.json"
        ):
            shutil.copy2(item, output_dir / item.name)
    # Written by Python rather than safetensors' save_file, which gives the file mode 0600 whatever the umask.
    (output_dir / "model.safetensors").write_bytes(save(average, metadata={"format": "pt"}))
    return output_dir
