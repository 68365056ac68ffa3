"""The paper's training recipe (section 5) on `Seq2SeqTrainer`: learning rate, metrics, progress, checkpoints."""

import copy
import json
import math
import platform
import re
import time
from pathlib import Path

import numpy as np
import sacrebleu
import torch
from safetensors import safe_open
from transformers import DataCollatorForSeq2Seq, ProgressCallback, Seq2SeqTrainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices, safe_globals
from transformers.utils import logging

from .errors import InputError
from .pipeline_translation import check_tokenizer_fits_model, max_new_tokens_for


logger = logging.get_logger(__name__)


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
    """`Seq2SeqTrainer` for translation: exact distributed evaluation, reproducible batches, a tokenizer check,
    the paper's length limit, and a real progress display.

    - `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the examples that the distributed
      sampler repeats to fill the last batch; BLEU would count them twice. This gathers with `gather_for_metrics`.
    - Length-grouped batches come from `SeededLengthGroupedSampler`, so that resumed runs see the same batches.
    - A tokenizer (`processing_class`) that does not fit the model is refused before training starts.
    - Evaluation generates at most the paper's source length + 50 tokens per batch (as the translation pipeline does)
      unless `generation_max_length` or a generation argument sets a limit, and leaves the model's generation config
      as it was (`Seq2SeqTrainer` fills it with transformers' defaults, `max_length=20` included, which would then be
      saved with the model).
    - `max_train_minutes` stops training after that much time; the progress bar and the log show the real total
      number of steps and the time left, with or without a time budget ([`TrainingProgressCallback`]).

    Label smoothing is the model's `config.label_smoothing` (one fused loss over the target tokens). transformers'
    `label_smoothing_factor` also works but smooths over full logits outside the model, the slower route.
    """

    def __init__(self, *args, max_train_minutes: float = 0, **kwargs):
        super().__init__(*args, **kwargs)
        if self.processing_class is not None and hasattr(self.processing_class, "pad_token_id"):
            check_tokenizer_fits_model(self.processing_class, self.model.config)
        bar = next((c for c in self.callback_handler.callbacks if isinstance(c, ProgressCallback)), None)
        self.add_callback(TrainingProgressCallback(max_train_minutes, bar))

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if type(sampler) is LengthGroupedSampler:
            sampler = SeededLengthGroupedSampler(sampler.batch_size, lengths=sampler.lengths, seed=self.args.seed)
        return sampler

    def evaluation_loop(self, *args, **kwargs):
        self.gather_function = self.accelerator.gather_for_metrics
        return super().evaluation_loop(*args, **kwargs)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        gen_kwargs = gen_kwargs or dict(getattr(self, "_gen_kwargs", {}))
        if gen_kwargs.get("max_length") is None and gen_kwargs.get("max_new_tokens") is None:
            max_positions = getattr(self.model.config, "max_position_embeddings", None)
            capacity = max_positions - 1 if max_positions else None  # the decoder start token takes one position
            gen_kwargs["max_new_tokens"] = max_new_tokens_for(inputs["input_ids"].shape[1], capacity)
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU (sacrebleu's default 13a tokenisation) and chrF, one reference per hypothesis."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
    }


def build_compute_metrics(tokenizer):
    """BLEU and chrF of generated ids against labels, both decoded with the tokenizer (-100 means padding)."""

    def compute_metrics(eval_prediction):
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        lengths = [np.count_nonzero(row != tokenizer.pad_token_id) for row in predictions]
        return {
            **corpus_scores(hypotheses, references),
            "num_samples": len(hypotheses),
            "gen_len": float(np.mean(lengths)),
        }

    return compute_metrics


class TrainingProgressCallback(TrainerCallback):
    """Logs the real total number of steps and the time left; with `max_train_minutes`, stops there.

    Under a time budget, the total is the number of steps the budget allows at the speed so far: the progress bar
    (`bar`, the trainer's [`ProgressCallback`]) is told, so that its total and remaining time are real rather than the
    epoch limit's. Training stops with a final checkpoint, after the same step in every process.
    """

    def __init__(self, max_train_minutes: float = 0, bar: ProgressCallback | None = None):
        self.budget = max_train_minutes * 60
        self.bar = bar
        self.start = self.first_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start, self.first_step = time.monotonic(), state.global_step
        if state.is_world_process_zero:
            plan = f"for at most {self.budget / 60:g} minutes" if self.budget else f"{state.max_steps:,} steps"
            logger.info(f"Training {plan} from step {state.global_step:,}.")

    def total_steps(self, state) -> int:
        """The step training will stop at: `max_steps`, or the last step that fits in the time budget."""
        if not self.budget or state.global_step == self.first_step:
            return state.max_steps
        done, elapsed = state.global_step - self.first_step, time.monotonic() - self.start
        return min(state.max_steps, max(state.global_step, self.first_step + int(done * self.budget / elapsed)))

    def on_step_end(self, args, state, control, **kwargs):
        if self.budget:
            out_of_time = torch.tensor(float(time.monotonic() - self.start >= self.budget), device=args.device)
            # Every process must stop after the same step, or DDP hangs.
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.broadcast(out_of_time, src=0)
            if out_of_time.item():
                control.should_training_stop = control.should_save = True
            elif self.bar is not None and self.bar.training_bar is not None:
                self.bar.training_bar.total = self.total_steps(state)
                self.bar.training_bar.refresh()
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        done = state.global_step - self.first_step
        if state.is_world_process_zero and done > 0 and logs and "loss" in logs:
            total = self.total_steps(state)
            left = (time.monotonic() - self.start) / done * (total - state.global_step)
            logger.info(f"Step {state.global_step:,} of {total:,}, about {left / 60:.1f} min left.")


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


def write_json(path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def epochs_seen(state) -> float:
    return round(state.epoch, 2) if state.epoch is not None and not math.isnan(state.epoch) else 0.0


def cpu_model() -> str:
    """The CPU's model name with its widest vector instructions: cloud CPUs often report only "AMD EPYC", and the
    vector width is what sets the speed of these models."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            first_cpu = f.read().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    info = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first_cpu.splitlines())}
    flags = set(info.get("flags", "").split())
    vectors = next((name for flag, name in CPU_VECTORS if flag in flags), None)
    name = info.get("model name") or platform.machine()
    return f"{name} ({vectors})" if vectors else name


CPU_VECTORS = [("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2, no AVX-512")]
