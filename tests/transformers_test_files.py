"""transformers' own model tests (`ModelTesterMixin`, `ConfigTester`), taken from the installed release's source
distribution on PyPI.

transformers ships its tests in the sdist, not in the wheel. `fetch()` downloads `transformers-<version>.tar.gz` once,
checks it against the sha256 PyPI publishes, and extracts the two test files into
`$HF_VANILLA_TRANSFORMER_CACHE/transformers-tests/<version>/` (default `~/.cache/hf_vanilla_transformer/`), with a
`SHA256SUMS` record that `load()` verifies. Nothing of it enters the repository. Fetch ahead of an offline run with

    python -m tests.transformers_test_files

The two files import three modules that the sdist does not ship; `load()` provides them from this file (see
`GenerationTesterMixin`, `ExportTesterMixin`, `CONFIG_COMMON_KWARGS`).
"""

import hashlib
import importlib
import io
import json
import os
import sys
import tarfile
import types
import urllib.request
from pathlib import Path

import transformers


VERSION = transformers.__version__
FILES = ("tests/test_modeling_common.py", "tests/test_configuration_common.py")
FETCH_COMMAND = "python -m tests.transformers_test_files"
PACKAGE = "transformers_common_tests"  # the name the extracted files are imported under


def folder(version: str = VERSION) -> Path:
    cache = os.environ.get("HF_VANILLA_TRANSFORMER_CACHE", Path.home() / ".cache" / "hf_vanilla_transformer")
    return Path(cache) / "transformers-tests" / version


def sdist_url_and_sha256(version: str) -> tuple[str, str]:
    """The sdist's address and sha256, from PyPI's simple index (JSON form, PEP 691)."""
    filename = f"transformers-{version}.tar.gz"
    request = urllib.request.Request(
        "https://pypi.org/simple/transformers/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        files = json.load(response)["files"]
    for entry in files:
        if entry["filename"] == filename:
            return entry["url"], entry["hashes"]["sha256"]
    raise FileNotFoundError(f"PyPI lists no {filename}")


def fetch(version: str = VERSION) -> Path:
    """Download and check the sdist of `version`, extract `FILES` (once); the folder holding them."""
    target = folder(version)
    if (target / "SHA256SUMS").exists():
        return target
    url, sha256 = sdist_url_and_sha256(version)
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{url}: sha256 {hashlib.sha256(data).hexdigest()} differs from PyPI's {sha256}")
    sums = [f"{sha256}  transformers-{version}.tar.gz"]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for name in FILES:
            content = archive.extractfile(f"transformers-{version}/{name}").read()
            path = target / Path(name).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            sums.append(f"{hashlib.sha256(content).hexdigest()}  {path.name}")
    # `test_configuration_common` imports the folder as a package (`direct_transformers_import`); the sdist has no
    # tests/__init__.py.
    (target / "__init__.py").write_text("")
    (target / "SHA256SUMS").write_text("\n".join(sums) + "\n")  # written last: its presence means complete
    return target


def verified_folder(version: str = VERSION) -> Path:
    """The extracted files, fetched if needed, each checked against the recorded sha256."""
    target = fetch(version)
    for line in (target / "SHA256SUMS").read_text().splitlines()[1:]:
        sha256, name = line.split("  ")
        if hashlib.sha256((target / name).read_bytes()).hexdigest() != sha256:
            raise ValueError(f"{target / name} differs from the extracted file; delete {target} and fetch again")
    return target


# ------------------------------------------------------- the three modules the test files import but the sdist lacks


class GenerationTesterMixin:
    """Stands in for `tests/generation/test_utils.py`'s mixin: no test of its own. What transformers' generation
    tests check for each model (greedy, beam and sampling decoding, cached = uncached decoding, left padding, static
    caches, assisted decoding) is checked for this project's models by tests/model/test_generation.py and
    tests/model/test_causal_lm.py. Inheriting it tells `ModelTesterMixin` that the generating heads are covered."""


class ExportTesterMixin:
    """Stands in for `tests/exporters/test_export.py`'s mixin: no test of its own. The `torch.export` checks are not
    run here; the project's exports (ONNX, CTranslate2, `torch.compile` generation) have their own tests in
    tests/interop and tests/model."""


# `tests/utils/test_configuration_utils.py`'s `config_common_kwargs`: arguments every `PreTrainedConfig` takes, each
# with a value other than its default, which `ConfigTester.check_config_arguments_init` expects a config to keep.
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}


def load(version: str = VERSION) -> tuple[types.ModuleType, types.ModuleType]:
    """transformers' `test_modeling_common` and `test_configuration_common` modules of `version`."""
    target = verified_folder(version)
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(target)]
        stand_ins = {
            "generation.test_utils": {"GenerationTesterMixin": GenerationTesterMixin},
            "exporters.test_export": {"ExportTesterMixin": ExportTesterMixin},
            "utils.test_configuration_utils": {"config_common_kwargs": CONFIG_COMMON_KWARGS},
        }
        modules = {PACKAGE: package}
        for name, attributes in stand_ins.items():
            parent, _ = name.split(".")
            modules.setdefault(f"{PACKAGE}.{parent}", types.ModuleType(f"{PACKAGE}.{parent}")).__path__ = []
            modules[f"{PACKAGE}.{name}"] = types.ModuleType(f"{PACKAGE}.{name}")
            vars(modules[f"{PACKAGE}.{name}"]).update(attributes)
        sys.modules.update(modules)
    return (
        importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        importlib.import_module(f"{PACKAGE}.test_configuration_common"),
    )


if __name__ == "__main__":
    print(fetch())
