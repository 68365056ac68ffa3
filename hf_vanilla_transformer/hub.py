"""Publishing a trained folder to the Hugging Face Hub: safetensors weights, tokenizer, code files and a model card.

The folder that is uploaded is built first (`stage_for_hub`), so that `--dry_run` shows exactly what would be published.
"""

import fnmatch
import json
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import HfApi
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import logging

from . import configuration_vanilla_transformer, modeling_vanilla_transformer, pipeline_translation
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .model_card import make_model_card
from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel
from .pipeline_translation import TranslationPipeline


logger = logging.get_logger(__name__)

# Everything else in a trained folder (optimizer state, `training_args.bin`, checkpoints, logs) stays behind.
PUBLISHED_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "*.spm",
    "chat_template.jinja",
)
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt")
# Replaced by this package's copies: they are the code the published weights are checked against.
CODE_FILES = tuple(
    Path(module.__file__).name
    for module in (configuration_vanilla_transformer, modeling_vanilla_transformer, pipeline_translation)
)


def _reference(cls: type) -> str:
    """`module.Class` as remote code names it: the file name inside the repository, not the package path."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def _update_config(folder: Path, **entries):
    path = folder / "config.json"
    config = {**json.loads(path.read_text(encoding="utf-8")), **entries}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def add_translation_pipeline(folder: str | Path):
    """Make a saved seq2seq folder work with `pipeline("translation", model=folder, trust_remote_code=True)`.

    Copies `pipeline_translation.py` and names it in `config.json`'s `custom_pipelines`, as `Pipeline.save_pretrained`
    does; works for any `AutoModelForSeq2SeqLM` folder.
    """
    folder = Path(folder)
    shutil.copy2(pipeline_translation.__file__, folder / Path(pipeline_translation.__file__).name)
    entry = {"impl": _reference(TranslationPipeline), "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    _update_config(folder, custom_pipelines={"translation": entry})


def add_model_code(folder: str | Path):
    """Copy the model's code files into `folder` and point `auto_map` at them, so the folder loads as remote code."""
    folder = Path(folder)
    for module in (configuration_vanilla_transformer, modeling_vanilla_transformer):
        shutil.copy2(module.__file__, folder / Path(module.__file__).name)
    _update_config(
        folder,
        auto_map={
            "AutoConfig": _reference(VanillaTransformerConfig),
            "AutoModel": _reference(VanillaTransformerModel),
            "AutoModelForSeq2SeqLM": _reference(VanillaTransformerForConditionalGeneration),
        },
    )


def stage_for_hub(
    model_dir: str | Path, out_dir: str | Path, repo_id: str, revision: str = "main", license: str = "apache-2.0"
) -> Path:
    """Write into `out_dir` (new or empty) exactly the files to publish for the trained folder `model_dir`.

    Keeps the safetensors weights, configs and tokenizer files; adds the code files (taken from this package, which is
    the code the weights are checked against below), the translation pipeline and a model card (README.md) generated
    from `metrics.json`. Refuses folders whose weights exist only as pickles.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    names = sorted(path.name for path in model_dir.iterdir() if path.is_file())
    if not any(fnmatch.fnmatch(name, "*.safetensors") for name in names):
        pickles = [name for name in names if any(fnmatch.fnmatch(name, p) for p in PICKLE_PATTERNS)]
        raise ValueError(
            f"{model_dir} holds no safetensors weights{f' (only the pickles {pickles})' if pickles else ''}: only "
            "safetensors are published. Load the model and call `save_pretrained`, which writes safetensors."
        )
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty: the staged folder must hold only what is published.")
    out_dir.mkdir(parents=True, exist_ok=True)

    published = [name for name in names if any(fnmatch.fnmatch(name, p) for p in PUBLISHED_PATTERNS)]
    skipped = sorted(set(names) - set(published) - set(CODE_FILES))
    if skipped:
        logger.warning(f"Not publishing {skipped}: only weights (safetensors), configs and tokenizer files are.")
    for name in published:
        shutil.copy2(model_dir / name, out_dir / name)
    config = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") == VanillaTransformerConfig.model_type:
        add_model_code(out_dir)
    add_translation_pipeline(out_dir)
    card = make_model_card(model_dir, repo_id, revision=revision, license=license)
    (out_dir / "README.md").write_text(str(card), encoding="utf-8")
    _check_loads(out_dir)
    return out_dir


def _check_loads(folder: Path):
    """Fail before uploading if the weights do not fit the code or the tokenizer does not fit the vocabulary."""
    model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True, use_safetensors=True)
    problems = {key: value for key, value in info.items() if value and key != "error_msgs"}
    if problems or info.get("error_msgs"):
        raise ValueError(f"The weights in {folder} do not match the model code: {problems or info['error_msgs']}.")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary only {model.config.vocab_size}."
        )


def publish_to_hub(
    model_dir: str | Path,
    repo_id: str,
    private: bool = False,
    dry_run: str | Path | None = None,
    license: str = "apache-2.0",
    token: str | None = None,
    api: HfApi | None = None,
) -> str:
    """Publish the trained folder `model_dir` as the Hub model `repo_id` and return the commit to pin as `revision`.

    With `dry_run`, only write the folder that would be uploaded there and return its path. Publishing replaces the
    repository's files (so no stale pickle survives), then pins the card's usage code to the commit just made: a card
    cannot name its own commit, so it goes in a second commit.
    """
    if dry_run is not None:
        return str(stage_for_hub(model_dir, dry_run, repo_id, license=license))
    api = api or HfApi(token=token)
    with tempfile.TemporaryDirectory() as tmp:
        folder = stage_for_hub(model_dir, Path(tmp) / "repo", repo_id, license=license)
        api.create_repo(repo_id, private=private, exist_ok=True)
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


__all__ = ["add_model_code", "add_translation_pipeline", "publish_to_hub", "stage_for_hub"]
