"""The recipes' learning-rate schedule: a warm-up, a stable phase and a cool-down over the last fraction of the steps
(transformers' `warmup_stable_decay`; Hägele et al. 2024), planned for the run's own number of steps."""

from transformers import Trainer


# The share of the steps the cool-down takes where `--lr_scheduler_kwargs` does not give `num_decay_steps`: chosen on
# the translation demo's validation split (docs/results/2026-12-02-recipe.md).
COOLDOWN_FRACTION = 0.2


class CooldownSchedule:
    """A `Trainer` mixin: `warmup_stable_decay` without `num_decay_steps` cools down over the last `COOLDOWN_FRACTION`
    of the steps, known only when training starts (`--max_steps`, or the epochs' steps)."""

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        kwargs = self.args.lr_scheduler_kwargs or {}
        scheduler = getattr(self.args.lr_scheduler_type, "value", self.args.lr_scheduler_type)
        if scheduler == "warmup_stable_decay" and "num_decay_steps" not in kwargs:
            cooldown = max(1, round(COOLDOWN_FRACTION * num_training_steps))
            self.args.lr_scheduler_kwargs = {**kwargs, "num_decay_steps": cooldown}
        return super().create_scheduler(num_training_steps, optimizer)


class RecipeTrainer(CooldownSchedule, Trainer):
    """`Trainer` with the recipes' schedule: the decoder-only and encoder-only heads' recipes."""
