"""Model folders and outputs on disk, handled the same way by every command: which files make a model folder, which
folder `--model` names, and writing a new folder or file (never over existing files unless asked, with the file modes
the process umask gives)."""

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError

from ..errors import InputError, one_line
from .model_json import check_json_files
from .saved_code import warn_if_outdated


# What a saved model folder holds (weights, configs, code, tokenizer, card, run report); a checkpoint also holds the
# trainer's state, which is not part of the model.
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "*.py", "*.txt", "*.model", "*.md", "*.png")
TRAINER_STATE_FILES = ("trainer_state.json",)
# The files a tokenizer loads from: a fast tokenizer's tokenizer.json, or the vocabularies of slow ones (OPUS-MT's
# sentencepiece models, BPE merges, WordPiece vocabularies), which transformers converts.
TOKENIZER_FILE_PATTERNS = ("tokenizer.json", "*.spm", "*.model", "vocab.json", "vocab.txt", "merges.txt")
HUB_LOOKUP_SECONDS = 10


def model_files(folder: str | Path) -> list[Path]:
    """The files of the model saved in `folder` (a model folder or a Trainer checkpoint), sorted by name."""
    found = {path for pattern in MODEL_FILE_PATTERNS for path in Path(folder).glob(pattern) if path.is_file()}
    return sorted((path for path in found if path.name not in TRAINER_STATE_FILES), key=lambda path: path.name)


def resolve_model(name: str | Path, option: str = "--model") -> str:
    """`name` as a local model folder, or as a Hub model id when it can only be one.

    huggingface_hub takes any string of the form "name" or "namespace/name" for a Hub id once no local folder has that
    name, and retries the network before failing, so a mistyped local path would fail only after that. Here a path
    that cannot be a Hub id, or whose first component exists on disk, is local: missing, it is named at once. Any other
    name is looked up once, in the Hub cache and then on the Hub ([`check_hub_model`]). A local folder must hold a
    model (`config.json`), and its JSON files must parse.
    """
    name = str(name)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(
                f"{option} {name}: the folder holds no model (no config.json; it has {contents(path)}): give a folder "
                "saved by save_pretrained or by training."
            )
        check_json_files(path, option)
        return str(path)
    if path.exists():
        raise InputError(f"{option} {name} is a file: expected a model folder or a Hub model id.")
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise InputError(f"{option} {name}: no such model folder.") from None
    if "/" in name and Path(name.split("/")[0]).expanduser().exists():
        raise InputError(f"{option} {name}: no such model folder.")
    check_hub_model(name, option)
    return name


def check_hub_model(name: str, option: str = "--model") -> None:
    """Refuse at once a Hub id that names no local folder when neither the Hub cache nor the Hub has that model:
    transformers would retry the network for half a minute, then blame the connection. One lookup, no retries."""
    from huggingface_hub import HfApi, is_offline_mode, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    missing = f"{option} {name}: no such model folder"
    if is_offline_mode():
        raise InputError(f"{missing}, nor a Hub model of that id in the cache (offline: HF_HUB_OFFLINE is set).")
    try:
        HfApi().model_info(name, timeout=HUB_LOOKUP_SECONDS)
    except GatedRepoError:
        return  # it exists: transformers explains the access it needs
    except RepositoryNotFoundError:
        raise InputError(f"{missing}, nor a Hub model of that id (or one that your login can read).") from None
    except Exception as error:
        if not connection_error(error):
            raise
        raise InputError(
            f"{missing}; as a Hub model id it cannot be looked up ({type(error).__name__}: {one_line(error)}): check "
            "the path, or the network for a Hub model."
        ) from None


def connection_error(error: Exception) -> bool:
    """Whether `error` is the network's (no connection, offline mode, a timeout, a proxy, an HTTP error), whichever
    HTTP library huggingface_hub uses."""
    return isinstance(error, OSError) or type(error).__module__.split(".")[0] in ("httpx", "httpx2", "requests")


def load_tokenizer(name: str, option: str = "--model", **kwargs):
    """`AutoTokenizer.from_pretrained(name, **kwargs)` for a model folder or Hub id (`resolve_model`), refusing by name
    a local folder with no tokenizer files: transformers would ask to install sentencepiece or tiktoken, when the
    file is what is missing."""
    from transformers import AutoTokenizer

    name = resolve_model(name, option)
    path = Path(name)
    if path.is_dir() and not any(next(path.glob(pattern), None) for pattern in TOKENIZER_FILE_PATTERNS):
        raise InputError(
            f"{option} {name}: the folder holds no tokenizer (no tokenizer.json; it has {contents(path)}): copy the "
            "tokenizer files saved with the model into it (tokenizer.json, tokenizer_config.json)."
        )
    return AutoTokenizer.from_pretrained(name, **kwargs)


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


def check_model_type(name: str, model_class, option: str = "--model") -> None:
    """Refuse a local folder whose `config.json` is another model type's than `model_class`'s (this package's model,
    which `export` and `verify-export` read): transformers would load its weights into `model_class` with a warning,
    and the model would translate into nonsense. The message says what the folder is; a MarianMTModel or ONNX folder
    may be an export of this package's model, or a model of its own (OPUS-MT), and the cure of each is named."""
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        return
    model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    ours = model_class.config_class.model_type
    if model_type == ours:
        return
    if list(path.glob("onnx/*.onnx")):
        kind = "an ONNX model folder"
    elif model_type == "marian":
        kind = "a MarianMTModel folder"
    else:
        kind = f"a {model_type} model folder"
    message = (
        f"{option} {name} is {kind} (model_type {model_type!r}), not a folder of this package's model (model_type "
        f"{ours!r}, {model_class.__name__}), which is what this command reads"
    )
    if model_type == "marian":
        message += (
            ". If it was written by `hf-vanilla-transformer export`, give the folder it was exported from; a "
            "MarianMTModel of its own (as OPUS-MT's) becomes one with "
            "`hf_vanilla_transformer.interop.marian.from_marian(folder).save_pretrained(...)`"
        )
    raise InputError(message + ".")


def load_translation_model(name: str, option: str = "--model", model_class=None, **kwargs):
    """`model_class.from_pretrained(name, **kwargs)` (default: `AutoModelForSeq2SeqLM`) for a translation model,
    refusing by name what is not one (`check_translation_folder`) and a folder whose weights do not cover the model,
    which transformers would fill with fresh random weights that translate into nonsense."""
    from transformers import AutoModelForSeq2SeqLM

    name = resolve_model(name, option)
    check_translation_folder(name, option)
    if model_class is not None:
        check_model_type(name, model_class, option)
    warn_if_outdated(name)
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


def cache_root() -> Path:
    """Where the package keeps what it makes once and reuses (CTranslate2 conversions, the pinned transformers.js):
    `$HF_VANILLA_TRANSFORMER_CACHE`, else `~/.cache/hf_vanilla_transformer`."""
    return Path(os.environ.get("HF_VANILLA_TRANSFORMER_CACHE") or Path.home() / ".cache" / "hf_vanilla_transformer")


def check_output_dir(
    path: str | Path, overwrite: bool = False, option: str = "--output_dir", other_cure: str = ""
) -> Path:
    """`path` as a folder to write: one that exists and is not empty is refused unless `overwrite` (the message
    ends with `other_cure` where there is one), and so is one that cannot be written ([`check_writable`])."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is a file: expected a folder to write into.")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise InputError(
            f"{option} {path} is not empty: choose a new folder, or pass --overwrite to replace what it holds."
            + (f" {other_cure}" if other_cure else "")
        )
    check_writable(path, option)
    return path


def write_whole(path: str | Path, data: str | bytes) -> Path:
    """Write the file `path` whole or not at all: into a temporary file beside it, renamed over it, so that a kill
    leaves the earlier file (or none), never half of one. Text is written as UTF-8."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(temporary, path)
    return path


@contextlib.contextmanager
def writes_folder(path: str | Path, overwrite: bool = False, option: str = "--output_dir") -> Iterator[Path]:
    """Write the folder `path` completely or not at all: the block writes into a new hidden folder beside it, which
    gets the file modes of the process umask and replaces `path` when the block ends; when the block fails, it is
    removed and `path` stays as it was. `path` is checked first ([`check_output_dir`]).

        with writes_folder(output_dir, overwrite) as folder:
            model.save_pretrained(folder)
    """
    path = check_output_dir(path, overwrite, option)
    temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}-", suffix=".partial", dir=existing_folder(path.parent)))
    try:
        yield temporary
        apply_umask(temporary)
        os.chmod(temporary, 0o777 & ~_umask())  # mkdtemp makes it private to its owner
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            replaced = temporary.with_name(temporary.name.replace(".partial", ".replaced"))
            os.rename(path, replaced)
            os.rename(temporary, path)
            shutil.rmtree(replaced)
        else:
            os.rename(temporary, path)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def check_writable(path: str | Path, option: str = "--output_dir") -> None:
    """Refuse, naming `option`, a `path` that cannot be written: a folder is created in it (or, where it does not exist
    yet, in the folder it would go into) and removed again. Unlike `os.access`, this sees what the file system itself
    refuses (read-only mounts) as well as permissions."""
    folder = existing_folder(Path(path))
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=folder))
    except OSError as error:
        why = error.strerror or error
        raise InputError(
            f"{option} {path}: cannot write into {folder} ({why}): choose a folder you can write to."
        ) from None


def existing_folder(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists: where a new `path` would be created."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_file(path: str | Path, overwrite: bool = False, option: str = "--output") -> Path:
    """`path`, refused if it exists and is not empty unless `overwrite`, or if it cannot be written; the folders it
    goes into are created, as `--output_dir`'s are ([`writes_folder`]): the one rule of every command's output."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder: expected a file name.")
    if path.is_file() and path.stat().st_size and not overwrite:
        raise InputError(f"{option} {path} already exists: choose another file, or pass --overwrite to replace it.")
    if path.is_file():
        try:
            open(path, "ab").close()  # opens it for writing, changes nothing
        except OSError as error:
            raise InputError(f"{option} {path}: cannot write it ({error.strerror or error}).") from None
    else:
        check_writable(path, option)
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _umask() -> int:
    umask = os.umask(0o077)  # reading the umask means setting it
    os.umask(umask)
    return umask


def apply_umask(folder: str | Path) -> None:
    """Give every file under `folder` the mode the process umask gives new files. safetensors writes its files through
    a temporary file of mode 0600, readable by its owner only."""
    umask = _umask()
    for root, _, names in os.walk(folder):
        for name in names:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


__all__ = [
    "MODEL_FILE_PATTERNS",
    "apply_umask",
    "cache_root",
    "check_hub_model",
    "check_model_type",
    "check_output_dir",
    "check_output_file",
    "check_translation_folder",
    "check_writable",
    "connection_error",
    "contents",
    "existing_folder",
    "load_tokenizer",
    "load_translation_model",
    "model_files",
    "resolve_model",
    "write_whole",
    "writes_folder",
]
