"""What a GPU machine has for the GPU acceptance run, and the wheels of what it lacks.

    python -m scripts.gpu_environment                        # this machine, as JSON: GPU, CUDA, torch, the packages
    python -m scripts.gpu_environment --download_wheels .whl [--python_version 3.12]  # wheels of PACKAGES

A GPU machine without network access (docs/gpu.md) runs its own Python with its own packages and cannot download: the
packages it lacks, or has too old, travel as wheels at the versions installed here, so that it runs what the test
suite runs. `--download_wheels` also writes the commit of this checkout to FOLDER/COMMIT, since the copy of the
repository sent to such a machine has no git history.
"""

import argparse
import ctypes
import importlib
import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path


# The modules the run imports (distribution name -> module name), and those a GPU machine's Python commonly lacks
# (CUDA images with PyTorch preinstalled: datasets, evaluate, dill, multiprocess, ctranslate2) or has in an older
# release than the test suite runs (transformers).
MODULES = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "huggingface_hub": "huggingface_hub",
    "accelerate": "accelerate",
    "datasets": "datasets",
    "evaluate": "evaluate",
    "sacrebleu": "sacrebleu",
    "pyarrow": "pyarrow",
    "numpy": "numpy",
    "matplotlib": "matplotlib",
    "pytest": "pytest",
    "ctranslate2": "ctranslate2",
    "liger-kernel": "liger_kernel",
}
# Not huggingface_hub, tokenizers, safetensors: a machine with transformers 5.x has releases that the newest
# transformers imports with, and huggingface_hub 2 would bring dependencies of its own (httpx2) that it lacks.
# liger-kernel (for the benchmark's `loss` measurement): a pure-Python wheel of Triton kernels, which imports with the
# torch and Triton of a CUDA build of PyTorch.
PACKAGES = ["transformers", "datasets", "evaluate", "dill", "multiprocess", "liger-kernel"]
OPTIONAL_PACKAGES = ["ctranslate2"]  # 43 MB, and its CUDA build needs CUDA 12's cuBLAS (libcublas.so.12)
# pip's platform tags for wheels that install on any x86-64 Linux with glibc 2.17 or newer.
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64"]


def describe() -> dict:
    """The machine: Python, GPUs, CUDA, the versions of MODULES (or why one does not import), CUDA 12's cuBLAS."""
    info = {"python": platform.python_version(), "executable": sys.executable, "packages": {}, "import_errors": {}}
    for distribution, module in MODULES.items():
        try:
            importlib.import_module(module)
            info["packages"][distribution] = importlib.metadata.version(distribution)
        except Exception as error:  # a missing or broken package is a finding, not a failure of this probe
            info["import_errors"][distribution] = f"{type(error).__name__}: {error}"[:500]
    try:
        from hf_vanilla_transformer.training.report import cpu_model

        info["cpu"] = cpu_model()
    except Exception as error:
        info["import_errors"]["hf_vanilla_transformer"] = f"{type(error).__name__}: {error}"[:500]
    try:
        import torch

        info["cuda_available"] = torch.cuda.is_available()
        info["torch_cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        info["gpus"] = [
            {
                "name": torch.cuda.get_device_name(i),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
                "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
                "multiprocessors": torch.cuda.get_device_properties(i).multi_processor_count,
            }
            for i in range(torch.cuda.device_count())
        ]
        info["bf16"] = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception as error:
        info["import_errors"].setdefault("torch", f"{type(error).__name__}: {error}"[:500])
    try:
        ctypes.CDLL("libcublas.so.12")
        info["libcublas_12"] = True
    except OSError:
        info["libcublas_12"] = False
    info["nvidia_smi"] = nvidia_smi()
    return info


def nvidia_smi() -> dict | str:
    """Name, driver, memory and clocks of each GPU as nvidia-smi reports them, or why it could not."""
    fields = ["name", "driver_version", "memory.total", "clocks.max.sm", "power.limit", "pstate", "temperature.gpu"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi: {error}"
    if out.returncode:
        return f"nvidia-smi: {out.stderr.strip() or out.stdout.strip()}"[:500]
    return {"gpus": [dict(zip(fields, map(str.strip, line.split(",")))) for line in out.stdout.strip().splitlines()]}


def commit(root: Path, wheels: Path | None = None) -> str:
    """This checkout's commit (with the number of changed files), or the one `--download_wheels` wrote beside the
    wheels when there is no git history (the copy a GPU machine gets), or "unknown"."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        if head.returncode == 0:
            status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
            changed = len(status.stdout.splitlines())
            return head.stdout.strip() + (f" + {changed} changed files" if changed else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    if wheels is not None and (wheels / "COMMIT").is_file():
        return (wheels / "COMMIT").read_text().strip() + " (written beside the wheels)"
    return "unknown"


def download_wheels(folder: Path, optional: bool, python_version: str = "3.12") -> list[Path]:
    """Wheels of PACKAGES (and OPTIONAL_PACKAGES) at this environment's versions, for CPython `python_version` on
    x86-64 Linux."""
    folder.mkdir(parents=True, exist_ok=True)
    names = PACKAGES + (OPTIONAL_PACKAGES if optional else [])
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in names]
    platforms = [option for name in PLATFORMS for option in ("--platform", name)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
        ]
        + ["--implementation", "cp", *platforms, "-d", str(folder), *pins],
        check=True,
    )
    (folder / "COMMIT").write_text(commit(Path(__file__).resolve().parents[1]) + "\n")
    return sorted(folder.glob("*.whl"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--download_wheels", type=Path, metavar="FOLDER", help="download the wheels into FOLDER")
    parser.add_argument(
        "--ctranslate2", action="store_true", help="with --download_wheels: also CTranslate2 (43 MB; CUDA 12 only)"
    )
    parser.add_argument("--python_version", default="3.12", help="with --download_wheels: the GPU machine's Python")
    args = parser.parse_args(argv)
    if args.download_wheels is None:
        print(json.dumps(describe(), indent=2))
        return
    wheels = download_wheels(args.download_wheels, args.ctranslate2, args.python_version)
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.0f} MiB, in {args.download_wheels}:")
    for wheel in wheels:
        print(f"  {wheel.name}")


if __name__ == "__main__":
    main()
