"""Model cards generated from a trained folder: its `config.json`, weights and the training run's `metrics.json`."""

import json
import math
import shlex
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from safetensors import safe_open
from transformers.utils import logging

from ..training.report import read_run_report


logger = logging.get_logger(__name__)

TEMPLATE_PATH = Path(__file__).with_name("model_card_template.md")
REQUIRED_METADATA = ("license", "library_name", "pipeline_tag", "tags")
EXAMPLES = {"de": "Wo ist der Bahnhof?", "en": "Where is the train station?", "fr": "Où est la gare ?"}
# metrics.json keys -> row names of the card's training table.
TRAINING_ROWS = {
    "steps": "Optimizer steps",
    "epochs": "Epochs",
    "train_samples": "Training pairs",
    "per_device_train_batch_size": "Batch size per device",
    "learning_rate": "Peak learning rate",
    "warmup_steps": "Warmup steps",
    "label_smoothing": "Label smoothing",
    "hardware": "Hardware",
    "runtime_seconds": "Training time",
    "averaged_checkpoints": "Final weights",
}


def _reproducible_command(command: str | None) -> str | None:
    """The training command as the card shows it: without `--output_dir`, a path on the machine that trained the
    model (readers reproduce the run into a folder of their own)."""
    if not command:
        return command
    words = shlex.split(command)
    output_dir = {i for i, word in enumerate(words) if word.split("=")[0] == "--output_dir"}
    output_dir |= {i + 1 for i in output_dir if words[i] == "--output_dir"}
    return shlex.join(word for i, word in enumerate(words) if i not in output_dir)


def load_metrics(model_dir: str | Path) -> dict:
    """The run report saved with the model (`metrics.json`), or `{}` with a warning for a folder without one."""
    report = read_run_report(model_dir)
    if not report:
        logger.warning(f"{model_dir} has no run report: the model card will lack languages, results and recipe.")
    return report


def make_model_card(
    model_dir: str | Path,
    repo_id: str,
    revision: str = "main",
    license: str = "apache-2.0",
    metrics: dict | None = None,
    origin: str = "trained from scratch",
) -> ModelCard:
    """The Hub card of the model in `model_dir`, to be published as `repo_id`; usage code pins `revision`.

    `metrics` defaults to the folder's `metrics.json`; every key of it is optional, and missing ones leave their part
    of the card out. `origin` says where its weights come from (a distilled student's teacher). `license` is the
    license of the model weights; the data's own license is quoted with its attribution.
    """
    model_dir = Path(model_dir)
    metrics = load_metrics(model_dir) if metrics is None else metrics
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    src, tgt = metrics.get("source_lang"), metrics.get("target_lang")
    dataset, test, training = (metrics.get(key) or {} for key in ("dataset", "test", "training"))
    dataset_name = dataset.get("name")
    # The Hub links `datasets` entries to dataset repositories: only a Hub dataset the model was trained on has one
    # (the bundled corpus, manythings.org's selection of Tatoeba, has none).
    dataset_id = dataset.get("id")

    scores = [("bleu", "BLEU", test.get("bleu")), ("chrf", "chrF", test.get("chrf"))]
    scores = [(key, name, value) for key, name, value in scores if value is not None]
    eval_results = [
        EvalResult(
            task_type="translation",
            task_name="Translation",
            dataset_type=dataset_id or "custom",
            dataset_name=dataset_name or "test set",
            dataset_split="test",
            metric_type=key,
            metric_name=name,
            metric_value=value,
        )
        for key, name, value in scores
    ] or None
    model_type = config.get("model_type", "transformer")
    card_data = ModelCardData(
        language=[lang for lang in (src, tgt) if lang] or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        datasets=[dataset_id] if dataset_id else None,
        tags=["translation", "seq2seq", model_type, "attention-is-all-you-need", "safetensors", "custom_code"],
        model_name=repo_id.split("/")[-1],
        eval_results=eval_results,
    )
    decoding = [
        f"beam size {test['num_beams']}" if "num_beams" in test else None,
        f"length penalty {test['length_penalty']}" if "length_penalty" in test else None,
    ]
    card = ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        title=repo_id.split("/")[-1],
        origin=origin,
        repo_id=repo_id,
        revision=revision,
        direction=f"{src or '?'}→{tgt or '?'}",
        example=EXAMPLES.get(src, "Hello, world!"),
        architecture=_architecture_rows(model_dir, config),
        results=[(name, f"{value:.1f}") for _, name, value in scores],
        num_samples=test.get("num_samples"),
        decoding=" and ".join(part for part in decoding if part),
        training=[
            (TRAINING_ROWS[key], _format(key, training[key])) for key in TRAINING_ROWS if training.get(key, []) != []
        ],
        command=_reproducible_command(metrics.get("command")),
        dataset_name=dataset_name,
        dataset_license=dataset.get("license"),
        attribution=dataset.get("attribution"),
    )
    return check_model_card(str(card))


def check_model_card(card: str | Path) -> ModelCard:
    """Parse a card (its text or a path) as the Hub does, and raise `ValueError` if required metadata is missing."""
    text = Path(card).read_text(encoding="utf-8") if isinstance(card, Path) else card
    parsed = ModelCard(text, ignore_metadata_errors=False)  # raises on a malformed model-index
    missing = [key for key in REQUIRED_METADATA if not getattr(parsed.data, key, None)]
    if missing:
        raise ValueError(f"The model card lacks the metadata {missing}.")
    return parsed


def _architecture_rows(model_dir: Path, config: dict) -> list[tuple[str, str]]:
    names = {
        "d_model": "d_model",
        "encoder_layers": "Encoder layers",
        "decoder_layers": "Decoder layers",
        "encoder_attention_heads": "Attention heads",
        "encoder_ffn_dim": "Feed-forward width",
        "vocab_size": "Shared vocabulary",
        "max_position_embeddings": "Maximum length",
    }
    rows = [(label, str(config[key])) for key, label in names.items() if key in config]
    if "norm_first" in config:
        rows.append(("Layer norm", "pre-norm" if config["norm_first"] else "post-norm (as in the paper)"))
    num_parameters = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(path, framework="pt") as weights:
            num_parameters += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
    if num_parameters:
        rows.append(("Parameters", f"{num_parameters / 1e6:.1f}M" if num_parameters >= 1e5 else f"{num_parameters:,}"))
    return rows


def _format(key: str, value) -> str:
    if key == "runtime_seconds" and isinstance(value, (int, float)):
        return f"{value / 60:.0f} min" if value >= 60 else f"{value:.0f} s"
    if key == "averaged_checkpoints":
        return f"the mean of {', '.join(value)} (section 6.1)"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


__all__ = ["check_model_card", "load_metrics", "make_model_card"]
