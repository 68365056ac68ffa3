"""The package's layout is its architecture: rooms by role, lower rooms never import higher ones, no modules import
each other in a circle (inside a room either, by imports at the top or inside functions), the model's files
import only the standard library, torch, transformers (with huggingface_hub and safetensors, which it requires) and
each other (they ship as remote code), and no module reaches into another module's private names."""

import ast
import graphlib
from pathlib import Path

import pytest

from tests.helpers import MODEL_CODE_FILES


PACKAGE = Path(__file__).resolve().parents[2] / "hf_vanilla_transformer"
# Rooms from the bottom up: a module may import its own room and the rooms below it. `errors` (the one error type) and
# `cuda` (torch's settings for a process on a GPU, which commands and Ray workers start with) are at the bottom; the
# command-line entry point at the top.
LAYERS = [
    "errors", "cuda", "model", "data", "training", "interop", "translate", "hub", "recipes", "distill", "demo",
    "serve", "cli",
]  # fmt: skip
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py", "errors.py", "cuda.py"}


def room_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    if len(relative.parts) > 1:
        return relative.parts[0]
    return {"__init__.py": "model", "__main__.py": "cli"}.get(relative.name, relative.stem)


def imported_modules(path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module name inside the package or outside it, imported names) of every import in `path`."""
    package = ["hf_vanilla_transformer", *path.relative_to(PACKAGE).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.append((module, [alias.name for alias in node.names]))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_top_holds_only_the_public_api_the_entry_point_the_error_type_and_the_gpu_settings():
    assert {path.name for path in PACKAGE.glob("*.py")} == TOP_LEVEL
    rooms = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert rooms == {"model", "data", "training", "recipes", "distill", "translate", "interop", "hub", "demo", "serve"}


def test_the_model_room_is_the_remote_code_files():
    assert {path.name for path in (PACKAGE / "model").glob("*.py")} - {"__init__.py"} == set(MODEL_CODE_FILES)


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_room_or_a_private_name(path):
    own = LAYERS.index(room_of(path))
    for module, names in imported_modules(path):
        parts = module.split(".")
        if parts[0] != "hf_vanilla_transformer" or len(parts) == 1:
            continue
        target = parts[1] if parts[1] not in ("__init__", "__main__") else "model"
        assert LAYERS.index(target) <= own, f"{path.name} ({room_of(path)}) imports {module} ({target}), a higher room"
        private = [name for name in names if name.startswith("_") and not name.startswith("__")]
        if target != room_of(path) or parts[-1] != path.stem:
            assert not private, f"{path.name} imports the private {private} of {module}"


def module_name(path: Path) -> str:
    parts = ["hf_vanilla_transformer", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_modules_import_each_other_in_a_circle():
    names = {module_name(path): path for path in MODULES}
    graph = {}
    for name, path in names.items():
        graph[name] = set()
        for module, imported in imported_modules(path):
            # `from package import module` imports the module; `from module import name`, the module itself
            found = [target for target in (*(f"{module}.{each}" for each in imported), module) if target in names]
            graph[name].update(found[:1])
        graph[name].discard(name)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"modules importing each other in a circle: {' -> '.join(error.args[1])}")


@pytest.mark.parametrize("name", sorted(MODEL_CODE_FILES))
def test_model_files_import_only_the_standard_library_torch_transformers_and_each_other(name):
    # They are copied into every saved folder and run as remote code where this package is not installed.
    import sys

    path = PACKAGE / "model" / name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and f"{node.module}.py" in MODEL_CODE_FILES, (
                f"{name}: from {'.' * node.level}{node.module}"
            )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
            for module in modules:
                top = module.split(".")[0]
                assert (
                    top in {"torch", "transformers", "safetensors", "huggingface_hub"}
                    or top in sys.stdlib_module_names
                ), (
                    name,
                    module,
                )
