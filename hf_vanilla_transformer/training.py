"""The paper's training recipe (section 5) on `Seq2SeqTrainer`: loss, learning rate, metrics, time budget."""

import json
import math
import time
from pathlib import Path

import evaluate
import numpy as np
import torch
from transformers import Seq2SeqTrainer, TrainerCallback


BLEU_CHRF_PATH = str(Path(__file__).parent / "bleu_chrf")


def noam_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak of lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3).

    With this peak, transformers' `inverse_sqrt` schedule (linear warm-up, then lr0 * sqrt(warmup / step)) is exactly the
    paper's formula.
    """
    return scale * d_model**-0.5 * warmup_steps**-0.5


def label_smoothed_cross_entropy(epsilon: float):
    """A `compute_loss_func` for `Trainer`: one fused cross-entropy with label smoothing over the tokens that have a
    target, normalised by `num_items_in_batch` (the token count of the whole accumulated batch)."""

    def compute_loss(outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            labels.flatten().to(logits.device),
            ignore_index=-100,
            reduction="sum",
            label_smoothing=epsilon,
        )
        if num_items_in_batch is None:
            num_items_in_batch = (labels != -100).sum().clamp(min=1)
        return loss / (num_items_in_batch.to(loss.device) if torch.is_tensor(num_items_in_batch) else num_items_in_batch)

    return compute_loss


class TranslationTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` whose distributed evaluation scores every example exactly once.

    `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the examples that the distributed sampler
    repeats to fill the last batch; BLEU would then count them twice.
    """

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
        return {"bleu": scores["bleu"], "chrf": scores["chrf"], "num_samples": scores["num_samples"],
                "gen_len": float(np.mean(lengths))}  # fmt: skip

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


def fast_bf16_available() -> bool:
    """Whether bf16 autocast speeds training up here: a GPU with bf16, or a CPU with AVX-512 BF16 or AMX tiles.

    Elsewhere bf16 on the CPU is emulated and slower than float32.
    """
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)() or getattr(cpu, "_is_amx_tile_supported", lambda: False)())


def write_json(path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def epochs_seen(state) -> float:
    return round(state.epoch, 2) if state.epoch is not None and not math.isnan(state.epoch) else 0.0
