"""Weight averaging while training: an exponential moving average of the weights, kept by a `TrainerCallback` that
any `Trainer` or `Seq2SeqTrainer` user can add (Marian's `--exponential-smoothing`, fairseq's `--store-ema`).

    trainer.add_callback(WeightAveragingCallback(decay=0.998))  # add it last: it reads the step's evaluation plan

- Evaluation during training scores the averaged weights, and training ends with them in the model, so the model
  that `trainer.save_model()` saves and the scores of the last evaluation belong to the same weights.
- Each checkpoint keeps the trained weights (what the optimizer continues from) and, beside them, the average in
  `weight_average.safetensors`; a run resumed from the checkpoint ends with the average of an uninterrupted run.
- Every process of a data-parallel run holds the same weights and so keeps the same average; sharded weights (FSDP,
  DeepSpeed) are refused.
"""

from pathlib import Path

import torch
from accelerate.state import PartialState
from accelerate.utils import DistributedType
from safetensors import safe_open
from safetensors.torch import load_file, save
from transformers import TrainerCallback

from ..data.folders import write_whole
from ..errors import InputError


AVERAGE_FILE = "weight_average.safetensors"


def check_decay(decay: float) -> float:
    if not 0 < decay < 1:
        raise InputError(f"--ema_decay {decay}: expected a decay between 0 and 1 (0.998 averages about 500 steps).")
    return decay


class ExponentialAverage:
    """avg <- d * avg + (1 - d) * w after each update, with d = min(decay, (1 + t) / (10 + t)) at the t-th update:
    the first updates count fully rather than being held near the initial weights (TensorFlow's
    `ExponentialMovingAverage` with `num_updates`)."""

    def __init__(self, named_parameters: dict[str, torch.Tensor], decay: float):
        self.names = list(named_parameters)
        self.weights = [p.detach().clone() for p in named_parameters.values()]
        self.decay, self.updates = check_decay(decay), 0

    def update(self, parameters: list[torch.Tensor]) -> None:
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            torch._foreach_lerp_(self.weights, [p.detach() for p in parameters], 1 - decay)
        self.updates += 1

    def save(self, path: Path) -> None:
        """Write the average whole: a checkpoint has it or not, never half."""
        metadata = {"updates": str(self.updates), "decay": str(self.decay)}
        write_whole(path, save(dict(zip(self.names, self.weights)), metadata=metadata))

    def load(self, path: Path) -> None:
        tensors = load_file(path)
        if sorted(tensors) != sorted(self.names):
            raise InputError(f"{path} does not hold this model's weights: average and model differ.")
        with torch.no_grad():
            for weight, name in zip(self.weights, self.names):
                weight.copy_(tensors[name])
        with safe_open(path, framework="pt") as f:
            self.updates = int(f.metadata()["updates"])


def trained_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's trained parameters by name, each shared (tied) tensor once."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


class WeightAveragingCallback(TrainerCallback):
    """Keeps an [`ExponentialAverage`] of the model's trained weights, updated after every optimizer step; swaps it
    in for each evaluation and at the end of training (see the module's docstring)."""

    def __init__(self, decay: float):
        self.decay = check_decay(decay)
        self.average: ExponentialAverage | None = None
        self._parameters: list[torch.Tensor] = []
        self._trained: list[torch.Tensor] | None = None  # the trained weights while the average is swapped in

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if PartialState().distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            raise InputError(
                "--ema_decay: weight averaging needs every process to hold whole weights (one process or DDP); "
                "under FSDP or DeepSpeed average checkpoints instead (--average_last)."
            )
        named = trained_parameters(model)
        self._parameters = list(named.values())
        self.average = ExponentialAverage(named, self.decay)
        if state.global_step > 0:  # resumed: Trainer names the checkpoint of a step so
            path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / AVERAGE_FILE
            if not path.is_file():
                raise InputError(
                    f"{path} is missing: resuming at step {state.global_step} with weight averaging needs the "
                    "average that this checkpoint was saved with (a run saved without one continues with "
                    "--ema_decay 0)."
                )
            self.average.load(path)

    def on_step_end(self, args, state, control, **kwargs):
        self.average.update(self._parameters)
        if control.should_evaluate:
            self._swap_in()

    def on_epoch_end(self, args, state, control, **kwargs):
        if control.should_evaluate:  # an evaluation at the end of the epoch (--eval_strategy epoch)
            self._swap_in()

    def on_evaluate(self, args, state, control, **kwargs):
        self._swap_out()

    def on_step_begin(self, args, state, control, **kwargs):
        self._swap_out()  # in case a later callback cancelled the evaluation the average was swapped in for

    def on_save(self, args, state, control, **kwargs):
        if args.should_save:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if checkpoint.is_dir():
                self.average.save(checkpoint / AVERAGE_FILE)

    def on_train_end(self, args, state, control, **kwargs):
        self._swap_out()
        with torch.no_grad():
            torch._foreach_copy_(self._parameters, self.average.weights)

    def _swap_in(self):
        if self._trained is None:
            with torch.no_grad():
                self._trained = [p.detach().clone() for p in self._parameters]
                torch._foreach_copy_(self._parameters, self.average.weights)

    def _swap_out(self):
        if self._trained is not None:
            with torch.no_grad():
                torch._foreach_copy_(self._parameters, self._trained)
            self._trained = None
