"""`Seq2SeqTrainer` for translation with the paper's learning rate (section 5.3), reproducible length-grouped batches,
exact distributed evaluation and the paper's length limit."""

import copy

import torch
from transformers import DataCollatorForSeq2Seq, ProgressCallback, Seq2SeqTrainer
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices
from transformers.utils import logging

from ..model.configuration_vanilla_transformer import max_new_tokens_for
from ..model.pipeline_translation import check_tokenizer_fits_model
from .progress import TrainingProgressCallback


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
            gen_kwargs["max_new_tokens"] = max_new_tokens_for(inputs["input_ids"].shape[1], max_positions)
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config
