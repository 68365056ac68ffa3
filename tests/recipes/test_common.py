"""What every head's recipe does before training: the CUDA allocator's setting."""

import os

import pytest
import torch

from hf_vanilla_transformer.recipes.common import ALLOCATOR_VARIABLES, expandable_cuda_segments


@pytest.fixture
def no_allocator_settings(monkeypatch):
    for name in ALLOCATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_on_a_gpu_training_grows_cuda_memory_in_expandable_segments(monkeypatch, no_allocator_settings):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    expandable_cuda_segments()
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


@pytest.mark.parametrize("name", ALLOCATOR_VARIABLES)
def test_a_users_own_allocator_setting_is_kept(monkeypatch, no_allocator_settings, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(name, "max_split_size_mb:512")
    expandable_cuda_segments()
    assert {n: os.environ.get(n) for n in ALLOCATOR_VARIABLES if os.environ.get(n)} == {name: "max_split_size_mb:512"}


def test_without_a_gpu_the_environment_is_left_alone(monkeypatch, no_allocator_settings):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    expandable_cuda_segments()
    assert not any(os.environ.get(name) for name in ALLOCATOR_VARIABLES)
