"""What the three recipes share: here, how `--torch_compile` compiles their batches of varying shapes."""

import os

import pytest

from hf_vanilla_transformer.recipes.translation import parse_args


@pytest.mark.parametrize(
    "launcher, expected",
    [
        ({}, "true"),  # started without accelerate launch: Trainer leaves the setting unset
        ({"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False"}, "true"),  # launch's defaults
        ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False"}, "False"),  # its choice
        ({"ACCELERATE_DYNAMO_USE_DYNAMIC": "False"}, "False"),  # the user's own
    ],
    ids=["plain", "accelerate-launch", "launch-configured-to-compile", "set-by-the-user"],
)
def test_compiled_recipes_take_dynamic_shapes_unless_the_user_chose_otherwise(monkeypatch, launcher, expected):
    """Compiled with static shapes, every new batch shape would compile anew (the demo through `accelerate launch`
    compiled at every step), up to torch's limit, then run eagerly."""
    for name in ("ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_DYNAMO_USE_DYNAMIC"):
        monkeypatch.setenv(name, "")  # so that the test's end restores it, the recipe's own setting too
        monkeypatch.delenv(name)
    for name, value in launcher.items():
        monkeypatch.setenv(name, value)
    parse_args(["--torch_compile", "True", "--use_cpu", "True"])
    assert os.environ["ACCELERATE_DYNAMO_USE_DYNAMIC"] == expected
