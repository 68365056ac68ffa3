"""Publishing a trained folder to the Hugging Face Hub: safetensors weights, tokenizer, code files and a model card.

The folder that is uploaded is built first (`stage_for_hub`), so that `--dry_run` shows exactly what would be
published.
"""

import fnmatch
import tempfile
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoModelForSeq2SeqLM
from transformers.utils import logging

from ..data.folders import (
    check_output_dir,
    check_translation_folder,
    connection_error,
    load_tokenizer,
    resolve_model,
    writes_folder,
)
from ..errors import InputError, one_line
from ..model.pipeline_translation import TranslationPipeline
from .model_card import load_metrics, make_model_card


logger = logging.get_logger(__name__)

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")
# A test BLEU below this means an untrained or broken model; its card would say "BLEU 0.x".
MIN_BLEU = 1.0


def stage_for_hub(
    model_dir: str | Path,
    out_dir: str | Path,
    repo_id: str,
    revision: str = "main",
    license: str = "apache-2.0",
    allow_low_bleu: bool = False,
) -> Path:
    """Write into `out_dir` (new or empty) exactly the files to publish for the trained folder `model_dir`.

    The model and its tokenizer are loaded (weights that do not fit the code, or a tokenizer that does not fit the
    vocabulary, are refused here) and saved as a translation pipeline: safetensors weights, configs, tokenizer, the
    model's code and `pipeline_translation.py`, named in `config.json` as `save_pretrained` names them, for any
    `AutoModelForSeq2SeqLM`. A model card (README.md) is generated from `metrics.json`. Optimizer states, training
    arguments and checkpoints stay behind. Refused: folders whose weights exist only as pickles, and (unless
    `allow_low_bleu`) models whose recorded test BLEU is below `MIN_BLEU`.
    """
    model_dir = Path(resolve_model(model_dir))
    if not model_dir.is_dir():
        raise InputError(f"--model {model_dir}: publishing needs a local model folder, not a Hub id.")
    names = sorted(path.name for path in model_dir.iterdir() if path.is_file())
    if not any(fnmatch.fnmatch(name, "*.safetensors") for name in names):
        pickles = [name for name in names if any(fnmatch.fnmatch(name, p) for p in PICKLE_PATTERNS)]
        raise InputError(
            f"{model_dir} holds no safetensors weights{f' (only the pickles {pickles})' if pickles else ''}: only "
            "safetensors are published. Load the model and call `save_pretrained`, which writes safetensors."
        )
    metrics = load_metrics(model_dir)
    bleu = (metrics.get("test") or {}).get("bleu")
    if bleu is not None and bleu < MIN_BLEU and not allow_low_bleu:
        raise InputError(
            f"{model_dir}/metrics.json records a test BLEU of {bleu:.2f}, which the model card would publish: the "
            "model is untrained or broken. Train it longer, or pass allow_low_bleu=True (--allow_low_bleu) to "
            "publish it anyway."
        )

    check_output_dir(out_dir)  # empty: the staged folder holds only what is published
    check_translation_folder(str(model_dir))
    model, info = AutoModelForSeq2SeqLM.from_pretrained(model_dir, output_loading_info=True, use_safetensors=True)
    problems = {key: value for key, value in info.items() if value and key != "error_msgs"}
    if problems or info.get("error_msgs"):
        raise InputError(f"The weights in {model_dir} do not match the model code: {problems or info['error_msgs']}.")
    try:
        translator = TranslationPipeline(model=model, tokenizer=load_tokenizer(str(model_dir)))
    except ValueError as error:  # the tokenizer does not fit the model
        raise InputError(f"{model_dir}: {error}") from error
    card = make_model_card(model_dir, repo_id, revision=revision, license=license, metrics=metrics)
    with writes_folder(out_dir) as folder:
        translator.save_pretrained(folder)
        (folder / "README.md").write_text(str(card), encoding="utf-8")
    out_dir = Path(out_dir)
    left_behind = sorted(set(names) - {path.name for path in out_dir.iterdir()})
    if left_behind:
        logger.warning(f"Not publishing {left_behind}: only the model, its code, tokenizer and card are.")
    return out_dir


def check_login(api: HfApi) -> None:
    """Refuse to start without a login that the Hub accepts (or without the network), before any work."""
    from huggingface_hub.errors import LocalTokenNotFoundError

    try:
        api.whoami()
    except LocalTokenNotFoundError:
        raise InputError("publishing needs a Hugging Face login: run `hf auth login`, or set HF_TOKEN.") from None
    except HfHubHTTPError as error:
        if error.response is None or error.response.status_code != 401:
            raise InputError(f"the Hub refused to say who is logged in ({one_line(error)}).") from None
        raise InputError(
            "the Hub does not accept the saved login (HTTP 401: the token is invalid or expired): run "
            "`hf auth login` again, or set HF_TOKEN."
        ) from None
    except Exception as error:
        if not connection_error(error):
            raise
        why = f"{type(error).__name__}: {one_line(error)}"
        raise InputError(f"publishing needs the Hugging Face Hub, which cannot be reached ({why}).") from None


def publish_to_hub(
    model_dir: str | Path,
    repo_id: str,
    private: bool = False,
    dry_run: str | Path | None = None,
    license: str = "apache-2.0",
    allow_low_bleu: bool = False,
    token: str | None = None,
    api: HfApi | None = None,
) -> str:
    """Publish the trained folder `model_dir` as the Hub model `repo_id` and return the commit to pin as `revision`.

    With `dry_run`, only write the folder that would be uploaded there and return its path. Publishing replaces the
    repository's files (so no stale pickle survives), then pins the card's usage code to the commit just made: a card
    cannot name its own commit, so it goes in a second commit.
    """
    if dry_run is not None:
        return str(stage_for_hub(model_dir, dry_run, repo_id, license=license, allow_low_bleu=allow_low_bleu))
    api = api or HfApi(token=token)
    check_login(api)
    with tempfile.TemporaryDirectory() as tmp:
        folder = stage_for_hub(model_dir, Path(tmp) / "repo", repo_id, license=license, allow_low_bleu=allow_low_bleu)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
        except HfHubHTTPError as error:  # a namespace the login may not write to, a name the Hub does not take
            raise InputError(f"--repo_id {repo_id}: the Hub refused to create it ({one_line(error)}).") from None
        commit = api.upload_folder(
            repo_id=repo_id, folder_path=folder, delete_patterns="*", commit_message="Upload model, code and card"
        )
    card = make_model_card(model_dir, repo_id, revision=commit.oid, license=license)
    api.upload_file(
        path_or_fileobj=str(card).encode("utf-8"),
        path_in_repo="README.md",
        repo_id=repo_id,
        commit_message=f"Pin the model card's usage code to {commit.oid[:10]}",
    )
    return commit.oid


__all__ = ["publish_to_hub", "stage_for_hub"]
