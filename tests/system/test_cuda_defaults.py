"""What every command's process starts with on a GPU: torch's settings for batches that change shape, unless the user
set them."""

import os

import pytest
import torch

from hf_vanilla_transformer import cli
from hf_vanilla_transformer.cuda import CUDA_DEFAULTS, cuda_defaults


USERS_VARIABLES = [name for names in CUDA_DEFAULTS for name in names]


@pytest.fixture
def clean_environment(monkeypatch):
    for name in USERS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def settings() -> dict:
    return {name: os.environ[name] for name in USERS_VARIABLES if os.environ.get(name)}


def test_on_a_gpu_memory_grows_in_expandable_segments_and_attention_does_not_try_cudnn_first(clean_environment, gpu):
    cuda_defaults()
    assert settings() == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"}


@pytest.mark.parametrize("name", ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"])
def test_a_users_own_allocator_setting_is_kept(monkeypatch, clean_environment, gpu, name):
    monkeypatch.setenv(name, "max_split_size_mb:512")
    cuda_defaults()
    assert settings() == {name: "max_split_size_mb:512", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"}


def test_a_user_who_wants_cudnn_attention_first_keeps_it(monkeypatch, clean_environment, gpu):
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0")
    cuda_defaults()
    assert settings() == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "0"}


def test_without_a_gpu_the_environment_is_left_alone(monkeypatch, clean_environment):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda_defaults()
    assert settings() == {}


@pytest.mark.parametrize("command", ["train", "translate", "translate-corpus", "serve"])
def test_every_command_runs_with_them(monkeypatch, clean_environment, gpu, command):
    module, function, _ = cli.COMMANDS[command]
    seen = {}
    monkeypatch.setattr(f"hf_vanilla_transformer.{module}.{function}", lambda argv, prog: seen.update(settings()))
    assert cli.main([command]) == 0
    assert seen == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"}
