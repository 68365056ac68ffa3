"""What the three recipes share: here, how `--torch_compile` compiles their batches of varying shapes."""

import os

import pytest

from hf_vanilla_transformer.recipes.common import COMPILATION
from hf_vanilla_transformer.recipes.translation import parse_args


LAUNCH_DEFAULTS = {name: "False" for name in COMPILATION}  # what `accelerate launch` exports where it does not compile


@pytest.mark.parametrize(
    "launcher, expected",
    [
        ({}, "true"),  # started without accelerate launch: Trainer leaves the settings unset
        ({"ACCELERATE_DYNAMO_BACKEND": "NO", **LAUNCH_DEFAULTS}, "true"),  # launch's defaults
        ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", **LAUNCH_DEFAULTS}, "False"),  # its configuration's choice
        (LAUNCH_DEFAULTS, "False"),  # the user's own
    ],
    ids=["plain", "accelerate-launch", "launch-configured-to-compile", "set-by-the-user"],
)
def test_compiled_recipes_take_dynamic_shapes_and_compile_by_layer_unless_the_user_chose_otherwise(
    monkeypatch, launcher, expected
):
    """Compiled with static shapes, every new batch shape would compile anew (the demo through `accelerate launch`
    compiled at every step), up to torch's limit, then run eagerly; compiled whole, the model would compute every
    padded position."""
    for name in ("ACCELERATE_DYNAMO_BACKEND", *COMPILATION):
        monkeypatch.setenv(name, "")  # so that the test's end restores it, the recipe's own setting too
        monkeypatch.delenv(name)
    for name, value in launcher.items():
        monkeypatch.setenv(name, value)
    parse_args(["--torch_compile", "True", "--use_cpu", "True"])
    assert {name: os.environ[name] for name in COMPILATION} == dict.fromkeys(COMPILATION, expected)
