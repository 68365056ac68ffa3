"""The paper's training recipe (section 5) on `Seq2SeqTrainer`: loss, learning rate, metrics, time budget."""

import json
import math
import time
from pathlib import Path

import evaluate
import numpy as np
import torch
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices, safe_globals

from .pipeline_translation import check_tokenizer_fits_model


BLEU_CHRF_PATH = str(Path(__file__).parent / "bleu_chrf")


def noam_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak of lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3).

    With this peak, transformers' `inverse_sqrt` schedule (linear warm-up, then lr0 * sqrt(warmup / step)) is exactly the
    paper's formula.
    """
    return scale * d_model**-0.5 * warmup_steps**-0.5


class TranslationDataCollator(DataCollatorForSeq2Seq):
    """`DataCollatorForSeq2Seq` that also marks the target padding it adds in `decoder_attention_mask`.

    With that mask the model skips padded target positions; labels of -100 inside a target stay real decoder inputs.
    """

    def __call__(self, features, return_tensors=None):
        lengths = [len(feature["labels"]) for feature in features] if "labels" in features[0] else None
        batch = super().__call__(features, return_tensors)
        if lengths is not None and "decoder_input_ids" in batch:
            positions = torch.arange(batch["labels"].shape[1])
            batch["decoder_attention_mask"] = (positions[None, :] < torch.tensor(lengths)[:, None]).long()
        return batch


class SeededLengthGroupedSampler(LengthGroupedSampler):
    """transformers' length-grouped sampler with an order that depends only on (seed, epoch).

    The stock one draws from the global RNG, so a run resumed after the first epoch sees other batches than the
    uninterrupted run; here resuming reproduces it exactly.
    """

    def __init__(self, *args, seed: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` for translation: exact distributed evaluation, reproducible batches, a tokenizer check.

    - `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the examples that the distributed
      sampler repeats to fill the last batch; BLEU would count them twice. This gathers with `gather_for_metrics`.
    - Length-grouped batches come from `SeededLengthGroupedSampler`, so that resumed runs see the same batches.
    - A tokenizer (`processing_class`) that does not fit the model is refused before training starts.

    Label smoothing is the model's `config.label_smoothing` (one fused loss over the target tokens). transformers'
    `label_smoothing_factor` also works but smooths over full logits outside the model, the slower route.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.processing_class is not None and hasattr(self.processing_class, "pad_token_id"):
            check_tokenizer_fits_model(self.processing_class, self.model.config)

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if type(sampler) is LengthGroupedSampler:
            sampler = SeededLengthGroupedSampler(sampler.batch_size, lengths=sampler.lengths, seed=self.args.seed)
        return sampler

    def evaluation_loop(self, *args, **kwargs):
        self.gather_function = self.accelerator.gather_for_metrics
        return super().evaluation_loop(*args, **kwargs)


def build_compute_metrics(tokenizer):
    """BLEU and chrF of generated ids against labels, both decoded with the tokenizer (-100 means padding)."""
    metric = evaluate.load(BLEU_CHRF_PATH)

    def compute_metrics(eval_prediction):
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = metric.compute(predictions=hypotheses, references=references)
        lengths = [np.count_nonzero(row != tokenizer.pad_token_id) for row in predictions]
        return {
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "num_samples": scores["num_samples"],
            "gen_len": float(np.mean(lengths)),
        }

    return compute_metrics


class TimeBudgetCallback(TrainerCallback):
    """Stop training (with a final checkpoint) after `minutes` of wall-clock training time."""

    def __init__(self, minutes: float):
        self.seconds = minutes * 60
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()
        if state.is_world_process_zero:
            print(f"Training for at most {self.seconds / 60:g} minutes (the progress bar counts to the epoch limit).")

    def on_step_end(self, args, state, control, **kwargs):
        stop = torch.tensor(float(time.monotonic() - self.start >= self.seconds), device=args.device)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.broadcast(stop, src=0)  # every process must stop after the same step, or DDP hangs
        if stop.item():
            control.should_training_stop = True
            control.should_save = True
        return control


def verify_checkpoint(checkpoint: str | Path) -> None:
    """Raise, naming the file, if a checkpoint to resume from is truncated or corrupt.

    Resuming would otherwise fail deep inside Trainer, or worse, quietly start from fresh weights.
    """
    from safetensors import safe_open

    checkpoint = Path(checkpoint)
    for required in ("model.safetensors", "trainer_state.json"):  # the state is written last: its absence = cut short
        if not (checkpoint / required).is_file():
            raise ValueError(f"{checkpoint / required} is missing: {checkpoint} is not a complete checkpoint.")
    weights = checkpoint / "model.safetensors"
    try:
        with safe_open(weights, framework="pt") as f:
            for name in f.keys():
                f.get_slice(name)[-1:]  # reads the last bytes of every tensor: catches truncated files
    except Exception as error:
        raise ValueError(f"{weights} is corrupt or truncated ({error}); resume from an earlier checkpoint.") from error
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
            raise ValueError(
                f"{path} is corrupt or truncated ({error}); resume from an earlier checkpoint."
            ) from error


def last_complete_checkpoint(run_dir: str | Path) -> Path:
    """The newest `checkpoint-<step>` that passes `verify_checkpoint`, skipping (and reporting) newer ones that a crash
    or a kill left half-written: Trainer does not write checkpoints atomically."""
    checkpoints = [
        p for p in Path(run_dir).glob("checkpoint-*") if p.is_dir() and p.name[len("checkpoint-") :].isdigit()
    ]
    problems = []
    for checkpoint in sorted(checkpoints, key=lambda p: int(p.name[len("checkpoint-") :]), reverse=True):
        try:
            verify_checkpoint(checkpoint)
        except ValueError as error:
            print(f"Skipping an incomplete checkpoint: {error}")
            problems.append(str(error))
            continue
        return checkpoint
    raise ValueError(f"No complete checkpoint-<step> folder in {run_dir} to resume from. " + " ".join(problems))


def write_json(path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def epochs_seen(state) -> float:
    return round(state.epoch, 2) if state.epoch is not None and not math.isnan(state.epoch) else 0.0
