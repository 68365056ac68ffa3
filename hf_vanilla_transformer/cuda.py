"""torch's settings for batches that change shape, which every command's process starts with on a GPU, and which the
Ray workers of `translate-corpus` get on a cluster's GPUs: training batches, and translation batches and decoding
steps, change shape all the time."""

import os


# (variable, value), unless the user has set one of the variables named before it.
CUDA_DEFAULTS = {
    # CUDA's caching allocator keeps segments of every size it met (on an H100 the paper's base model reserved three
    # times the memory its steps allocated); expandable segments grow in place. Read when CUDA starts.
    ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF"): (
        "PYTORCH_CUDA_ALLOC_CONF",
        "expandable_segments:True",
    ),
    # On Hopper and Blackwell GPUs with a cuDNN newer than 9.15.0, torch tries cuDNN's attention first, which builds an
    # execution plan for every new shape (tens to hundreds of milliseconds each); flash and memory-efficient
    # attention plan nothing. Read at the first attention call.
    ("TORCH_CUDNN_SDPA_DEPRIORITIZED",): ("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1"),
}


def cuda_environment() -> dict[str, str]:
    """The variables of `CUDA_DEFAULTS` as this process would run with them on a GPU: the user's, else the defaults."""
    environment = {}
    for users_variables, (variable, value) in CUDA_DEFAULTS.items():
        users = {name: os.environ[name] for name in users_variables if os.environ.get(name)}
        environment.update(users or {variable: value})
    return environment


def cuda_defaults() -> None:
    """Sets `CUDA_DEFAULTS` where CUDA is available, before anything touches the GPU."""
    import torch

    if torch.cuda.is_available():
        os.environ.update(cuda_environment())
