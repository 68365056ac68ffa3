"""`Seq2SeqTrainer` for translation with the paper's learning rate (section 5.3), batches by token budget or by length,
both reproducible, exact distributed evaluation and the paper's length limit."""

import copy
import functools
import inspect

import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, ProgressCallback, Seq2SeqTrainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import seed_worker
from transformers.utils import logging

from ..data.corpus import pair_lengths
from ..errors import InputError
from ..model.configuration_vanilla_transformer import max_new_tokens_for, target_positions
from ..model.pipeline_translation import check_tokenizer_fits_model
from .batching import (
    LengthSortedSampler,
    SeededLengthGroupedSampler,
    TokenBatchSampler,
    accumulation_steps_for,
    auto_max_tokens,
)
from .checkpoints import FileModesCallback
from .loss import chunked_token_cross_entropy
from .progress import TrainingProgressCallback
from .schedule import CooldownSchedule


logger = logging.get_logger(__name__)

# `max_tokens="auto"` without a GPU to measure: fairseq's WMT batches, which a CPU's memory holds at the paper's sizes.
CPU_MAX_TOKENS = 4096


def noam_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak of lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (section 5.3).

    With this peak, transformers' `inverse_sqrt` schedule (linear warm-up, then lr0 * sqrt(warmup / step)) is exactly
    the paper's formula.
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


class _TokenBatchEpochs(TrainerCallback):
    """Starts each epoch of the token batches from the step count. accelerate's data loader hands `set_epoch` on to a
    batch sampler, but not through the wrappers of a run resumed mid-epoch under several processes."""

    def __init__(self, sampler: TokenBatchSampler, updates_per_epoch: int):
        self.sampler, self.updates_per_epoch = sampler, updates_per_epoch

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.sampler.set_epoch(state.global_step // self.updates_per_epoch)


class TranslationTrainer(CooldownSchedule, Seq2SeqTrainer):
    """`Seq2SeqTrainer` for translation: exact distributed evaluation, reproducible batches, a tokenizer check,
    the paper's length limit, and a real progress display.

    - `Seq2SeqTrainer` gathers predictions with `accelerator.gather`, which keeps the examples that the distributed
      sampler repeats to fill the last batch; BLEU would count them twice. This gathers with `gather_for_metrics`.
    - With `max_tokens`, batches hold pairs of similar length up to that many padded source and target tokens
      ([`TokenBatchSampler`], counting the padding of the collator's `pad_to_multiple_of`); `"auto"` sizes them
      for the GPU's free memory ([`auto_max_tokens`], the smallest over all processes; `CPU_MAX_TOKENS` on a CPU).
      With `tokens_per_update`, gradient accumulation is derived so that an update holds
      about that many target tokens over all processes. The loss of an update is normalised by its real target
      tokens over every process and accumulation step (transformers' `num_items_in_batch`), so two processes give
      the losses of one process accumulating two batches. The log reports `target_tokens_per_update`.
    - Otherwise batches of pairs of similar source length come from [`SeededLengthGroupedSampler`]. Both orders
      depend only on (seed, epoch): resumed runs see the batches of the uninterrupted run.
    - A tokenizer (`processing_class`) that does not fit the model is refused before training starts.
    - Evaluation generates at most the paper's source length + 50 tokens per batch (as the translation pipeline does)
      unless `generation_max_length` or a generation argument sets a limit, and leaves the model's generation config
      as it was (`Seq2SeqTrainer` fills it with transformers' defaults, `max_length=20` included, which would then be
      saved with the model).
    - `max_train_minutes` stops training after that much time; the progress bar and the log show the real total
      number of steps and the time left, with or without a time budget ([`TrainingProgressCallback`]).

    - The loss is the model's own (`token_cross_entropy`, label smoothed by the model's `config.label_smoothing`),
      computed from the logits through `Trainer`'s loss hook (`compute_loss_func`) in float32 one chunk of rows at a
      time ([`chunked_token_cross_entropy`]): no float32 copy of all the logits. transformers' `label_smoothing_factor`
      replaces it with its `LabelSmoother`, which smooths over a float32 log-softmax of all the logits (MarianMT's
      route in the recipe, as its config has no label smoothing).
    """

    def __init__(
        self,
        *args,
        max_tokens: int | str | None = None,
        tokens_per_update: int | None = None,
        max_train_minutes: float = 0,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if tokens_per_update and not max_tokens:
            raise InputError("--tokens_per_update derives gradient accumulation for token batches: set --max_tokens.")
        self.max_tokens, self.tokens_per_update = max_tokens, tokens_per_update
        # A checkpoint holds each weight under one name (a tied output projection and the stacks' shared embedding as
        # the embedding alone); resuming, Trainer ties the keys that `_keys_to_ignore_on_save` names instead of
        # reporting them missing.
        tied = {name for name, _ in self.model.named_parameters(remove_duplicate=False)}
        tied -= {name for name, _ in self.model.named_parameters()}
        if tied:
            self.model._keys_to_ignore_on_save = set(self.model._keys_to_ignore_on_save or ()) | tied
        self._update_tokens = []  # target tokens of each update since the last log
        if self.compute_loss_func is None and self.label_smoother is None:
            self.compute_loss_func = self.token_loss
        if self.processing_class is not None and hasattr(self.processing_class, "pad_token_id"):
            check_tokenizer_fits_model(self.processing_class, self.model.config)
        bar = next((c for c in self.callback_handler.callbacks if isinstance(c, ProgressCallback)), None)
        self.add_callback(TrainingProgressCallback(max_train_minutes, bar))
        self.add_callback(FileModesCallback())

    def token_loss(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        smoothing = getattr(self.model.config, "label_smoothing", 0.0)
        return chunked_token_cross_entropy(outputs.logits, labels, num_items_in_batch, smoothing)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The loss hook takes the labels away: the model gets from them what it would have taken itself, and no
        # key/value cache (one for nothing, with which this package's decoder would also compute a right-padded
        # target's padding rather than skip it).
        inputs = {**inputs, "use_cache": False}
        if "labels" in inputs and "decoder_input_ids" not in inputs and "decoder_inputs_embeds" not in inputs:
            inputs["decoder_input_ids"] = self.model.prepare_decoder_input_ids_from_labels(labels=inputs["labels"])
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def get_train_dataloader(self) -> DataLoader:
        """With `max_tokens`: a data loader over [`TokenBatchSampler`] batches, handed to accelerate, which gives
        each process every `num_processes`-th batch. Sets the gradient accumulation of `tokens_per_update`."""
        if not self.max_tokens:
            return super().get_train_dataloader()
        args = self.args
        if self.max_tokens == "auto":
            self.max_tokens = self.auto_max_tokens()
        lengths = pair_lengths(self.train_dataset)
        multiple = getattr(self.data_collator, "pad_to_multiple_of", None) or 1
        if self.tokens_per_update:
            batches = len(TokenBatchSampler(*lengths, self.max_tokens, args.seed, pad_to_multiple_of=multiple))
            args.gradient_accumulation_steps = accumulation_steps_for(
                self.tokens_per_update, int(lengths[1].sum()), batches, args.world_size
            )
        per_update = args.world_size * args.gradient_accumulation_steps
        sampler = TokenBatchSampler(
            *lengths, self.max_tokens, args.seed, batches_multiple=per_update, pad_to_multiple_of=multiple
        )
        if self.is_world_process_zero():
            shapes = sampler.shapes()
            logger.warning(
                f"Token batches: {len(sampler):,} batches per epoch of at most {self.max_tokens:,} padded source and "
                f"target tokens, {shapes['target'].mean():,.0f} real target tokens per batch on average "
                f"({1 - shapes['target'].sum() / shapes['padded_target'].sum():.1%} padding); {args.world_size} "
                f"process(es) x {args.gradient_accumulation_steps} accumulation step(s): about "
                f"{shapes['target'].mean() * per_update:,.0f} target tokens per update"
                + (f" (--tokens_per_update {self.tokens_per_update:,})." if self.tokens_per_update else ".")
            )
        for callback in [c for c in self.callback_handler.callbacks if isinstance(c, _TokenBatchEpochs)]:
            self.remove_callback(callback)
        self.add_callback(_TokenBatchEpochs(sampler, len(sampler) // per_update))
        accepted = set(inspect.signature(self.model.forward).parameters) | {"labels"}
        dataset = self.train_dataset.select_columns([c for c in self.train_dataset.column_names if c in accepted])
        workers = args.dataloader_num_workers
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
            worker_init_fn=functools.partial(seed_worker, num_workers=workers, rank=args.process_index),
        )
        return self.accelerator.prepare(loader)

    def auto_max_tokens(self) -> int:
        """`max_tokens="auto"`: sized for the free memory of the GPU (the smallest over the processes, which must cut
        the same batches), logged."""
        device = self.args.device
        if device.type != "cuda":
            tokens = CPU_MAX_TOKENS
        else:
            free = torch.tensor(torch.cuda.mem_get_info(device)[0], device=device)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.all_reduce(free, op=torch.distributed.ReduceOp.MIN)
            parameters = sum(p.numel() for p in self.model.parameters())
            half = self.args.bf16 or self.args.fp16
            per_process = self.tokens_per_update and -(-self.tokens_per_update // self.args.world_size)
            tokens = auto_max_tokens(int(free), self.model.config, parameters, half, per_process)
        if self.is_world_process_zero():
            where = f"{int(free) / 2**30:.1f} GiB free on {device}" if device.type == "cuda" else "no GPU"
            logger.warning(f"--max_tokens auto: {tokens:,} padded tokens per batch ({where}).")
        return tokens

    def _get_train_sampler(self, train_dataset=None):
        train_dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length" and {"input_ids", "labels"} <= set(
            train_dataset.column_names
        ):
            # Grouped by source tokens, as transformers' sampler groups the demo's rows (Trainer drops the unused
            # `length` column first): the demo's recorded runs trained on these batches.
            batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
            return SeededLengthGroupedSampler(batch_size, pair_lengths(train_dataset)[0], seed=self.args.seed)
        sampler = super()._get_train_sampler(train_dataset)
        if type(sampler) is LengthGroupedSampler:
            sampler = SeededLengthGroupedSampler(sampler.batch_size, sampler.lengths, seed=self.args.seed)
        return sampler

    def _get_eval_sampler(self, eval_dataset):
        if self.max_tokens and eval_dataset is not None and "input_ids" in eval_dataset.column_names:
            return LengthSortedSampler(pair_lengths(eval_dataset)[0])  # generation batches of similar lengths
        return super()._get_eval_sampler(eval_dataset)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if num_items_in_batch is not None:
            self._update_tokens.append(num_items_in_batch)
        return batch_samples, num_items_in_batch

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._update_tokens:
            logs["target_tokens_per_update"] = round(
                sum(map(float, self._update_tokens)) / len(self._update_tokens), 1
            )
            self._update_tokens = []
        super().log(logs, start_time)

    def evaluation_loop(self, *args, **kwargs):
        self.gather_function = self.accelerator.gather_for_metrics
        return super().evaluation_loop(*args, **kwargs)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        gen_kwargs = gen_kwargs or dict(getattr(self, "_gen_kwargs", {}))
        if gen_kwargs.get("max_length") is None and gen_kwargs.get("max_new_tokens") is None:
            # The paper's source length + 50, as max_length (counting the decoder start token), which replaces the
            # generation config's own.
            positions = target_positions(self.model.config, self.model.generation_config)
            gen_kwargs["max_length"] = 1 + max_new_tokens_for(inputs["input_ids"].shape[1], positions)
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config
