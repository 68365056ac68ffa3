"""Model folders and outputs on disk, handled the same way by every command: which files make a model folder, which
folder `--model` names, and writing a new folder or file (never over existing files unless asked, with the file modes
the process umask gives)."""

import json
import os
import shutil
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError

from ..errors import InputError


# What a saved model folder holds (weights, configs, code, tokenizer, card, run report); a checkpoint also holds the
# trainer's state, which is not part of the model.
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "*.py", "*.txt", "*.model", "*.md", "*.png")
TRAINER_STATE_FILES = ("trainer_state.json",)


def model_files(folder: str | Path) -> list[Path]:
    """The files of the model saved in `folder` (a model folder or a Trainer checkpoint), sorted by name."""
    found = {path for pattern in MODEL_FILE_PATTERNS for path in Path(folder).glob(pattern) if path.is_file()}
    return sorted((path for path in found if path.name not in TRAINER_STATE_FILES), key=lambda path: path.name)


def resolve_model(name: str | Path, option: str = "--model") -> str:
    """`name` as a local model folder, or as a Hub model id when it can only be one.

    huggingface_hub takes any string of the form "name" or "namespace/name" for a Hub id once no local folder has that
    name, and retries the network before failing, so a mistyped local path would fail only after that. Here a path
    that cannot be a Hub id, or whose first component exists on disk, is local: missing, it is named at once. A
    local folder must hold a model (`config.json`).
    """
    name = str(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                f"{option} {name}: the folder holds no model (no config.json; it has {contents(path)}): give a folder "
                "saved by save_pretrained or by training."
            )
        return str(path)
    if path.exists():
        raise InputError(f"{option} {name} is a file: expected a model folder or a Hub model id.")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise InputError(f"{option} {name}: no such model folder.") from None
    if "/" in name and Path(name.split("/")[0]).expanduser().exists():
        raise InputError(f"{option} {name}: no such model folder.")
    return name


def contents(folder: str | Path, limit: int = 8) -> str:
    """The first `limit` names in `folder`, for messages that say what a folder holds."""
    names = sorted(child.name for child in Path(folder).iterdir())
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "") or "nothing"


# Heads that do not translate, by how their class names end (`config.architectures`), and what they are.
NOT_TRANSLATION = {
    "ForCausalLM": "a decoder-only language model",
    "LMHeadModel": "a decoder-only language model",
    "ForSequenceClassification": "a sequence classifier",
    "ForTokenClassification": "a token classifier",
    "ForMaskedLM": "a masked language model",
    "ForQuestionAnswering": "a question-answering model",
}


def check_translation_folder(name: str, option: str = "--model", ctranslate2: bool = False) -> None:
    """Refuse by name a local folder (from `resolve_model`) that holds no translation model: a head that does not
    translate (its weights would leave the translation head freshly initialised), or a CTranslate2 export where
    `ctranslate2` is False. Hub ids pass: their files are checked when they load."""
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        return
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if "model_type" not in config and (path / "model.bin").is_file():
        if not ctranslate2:
            raise InputError(
                f"{option} {name} is a CTranslate2 model folder (model.bin): `translate --backend ctranslate2` reads "
                "it; here, give the transformers folder it was exported from."
            )
        return
    for architecture in config.get("architectures") or []:
        kind = next((kind for end, kind in NOT_TRANSLATION.items() if architecture.endswith(end)), None)
        if kind is not None or config.get("is_encoder_decoder") is False:
            raise InputError(
                f"{option} {name} holds {kind or 'a decoder-only model'} ({architecture}), not a translation model: "
                "give a folder trained for translation (`hf-vanilla-transformer train translation`, or any "
                "AutoModelForSeq2SeqLM)."
            )


def load_translation_model(name: str, option: str = "--model", model_class=None, **kwargs):
    """`model_class.from_pretrained(name, **kwargs)` (default: `AutoModelForSeq2SeqLM`) for a translation model,
    refusing by name what is not one (`check_translation_folder`) and a folder whose weights do not cover the model,
    which transformers would fill with fresh random weights that translate into nonsense."""
    from transformers import AutoModelForSeq2SeqLM

    name = resolve_model(name, option)
    check_translation_folder(name, option)
    try:
        model, loading = (model_class or AutoModelForSeq2SeqLM).from_pretrained(
            name, output_loading_info=True, **kwargs
        )
    except OSError as error:  # no weights file
        if not Path(name).is_dir():
            raise
        raise InputError(
            f"{option} {name}: no weights to load ({error}); the folder holds {contents(name)}."
        ) from None
    except SafetensorError as error:  # transformers passes it on without naming the folder
        raise InputError(
            f"{option} {name}: its safetensors weights cannot be read ({error}): the file is corrupt or only partly "
            "downloaded (a git-lfs pointer, an interrupted copy). Download or copy it again."
        ) from None
    if loading["missing_keys"]:
        missing = sorted(loading["missing_keys"])
        raise InputError(
            f"{option} {name}: its weights lack {len(missing)} of {type(model).__name__}'s tensors "
            f"({missing[0]}, ...), which would translate with fresh random values; the folder holds {contents(name)}."
        )
    return model


def check_output_dir(path: str | Path, overwrite: bool = False, option: str = "--output_dir") -> Path:
    """`path` as a folder to write: one that exists and is not empty is refused unless `overwrite`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is a file: expected a folder to write into.")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise InputError(
            f"{option} {path} is not empty: choose a new folder, or pass --overwrite to replace what it holds."
        )
    return path


def new_output_dir(path: str | Path, overwrite: bool = False, option: str = "--output_dir") -> Path:
    """The folder `path`, created and empty (see [`check_output_dir`]; `overwrite` empties it)."""
    path = check_output_dir(path, overwrite, option)
    if path.is_dir() and any(path.iterdir()):
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_output_file(path: str | Path, overwrite: bool = False, option: str = "--output") -> Path:
    """`path`, refused if it exists and is not empty unless `overwrite`."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder: expected a file name.")
    if path.is_file() and path.stat().st_size and not overwrite:
        raise InputError(f"{option} {path} already exists: choose another file, or pass --overwrite to replace it.")
    return path


def apply_umask(folder: str | Path) -> None:
    """Give every file under `folder` the mode the process umask gives new files. safetensors writes its files through
    a temporary file of mode 0600, readable by its owner only."""
    umask = os.umask(0o077)  # reading the umask means setting it
    os.umask(umask)
    for root, _, names in os.walk(folder):
        for name in names:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


__all__ = [
    "MODEL_FILE_PATTERNS",
    "apply_umask",
    "check_output_dir",
    "check_translation_folder",
    "contents",
    "load_translation_model",
    "check_output_file",
    "model_files",
    "new_output_dir",
    "resolve_model",
]
