"""The recipes' learning-rate schedule: a warm-up, a stable phase and a cool-down over the last fraction of the steps
(transformers' `warmup_stable_decay`; Hägele et al. 2024), planned for the run's own number of steps."""

from transformers import Trainer


# The cool-down where `--lr_scheduler_kwargs` does not say otherwise: its share of the steps and its shape, chosen on
# the translation demo's validation split (docs/results/2026-12-02-xeon-recipe.md).
COOLDOWN_FRACTION = 0.2
COOLDOWN_SHAPE = "1-sqrt"


class CooldownSchedule:
    """A `Trainer` mixin: `warmup_stable_decay` cools down over the last `COOLDOWN_FRACTION` of the steps, which are
    known only when training starts (`--max_steps`, or the epochs' steps), in the `COOLDOWN_SHAPE`, unless
    `lr_scheduler_kwargs` gives `num_decay_steps` or `decay_type`."""

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = getattr(self.args.lr_scheduler_type, "value", self.args.lr_scheduler_type)
        if scheduler == "warmup_stable_decay":
            cooldown = dict(
                num_decay_steps=max(1, round(COOLDOWN_FRACTION * num_training_steps)), decay_type=COOLDOWN_SHAPE
            )
            self.args.lr_scheduler_kwargs = {**cooldown, **(self.args.lr_scheduler_kwargs or {})}
        return super().create_scheduler(num_training_steps, optimizer)


class RecipeTrainer(CooldownSchedule, Trainer):
    """`Trainer` with the recipes' schedule: the decoder-only and encoder-only heads' recipes."""
