"""The model code a saved folder carries: whether it is this package's, and `upgrade-folder`, which replaces it.

A folder saved by `save_pretrained` holds a copy of the model room's files, which processes without this package run
(trust_remote_code=True). A folder saved by an earlier version keeps that version's copy, with that version's bugs
(code saved before 0.2 takes the cache as `past_key_values` and decodes in a loop on transformers 5.24). Where the
package is imported its own code runs instead, so such a folder only misbehaves elsewhere: the package warns when it
loads one, and `hf-vanilla-transformer upgrade-folder DIR` gives it the current files (weights untouched).
"""

import importlib
import json
import shutil
from pathlib import Path

from transformers.utils import logging

from .. import model as model_room
from ..errors import CommandParser, InputError
from .model_json import check_json_files


logger = logging.get_logger(__name__)
MODEL_ROOM = Path(model_room.__file__).parent
CODE_FILES = sorted(path.name for path in MODEL_ROOM.glob("*.py") if path.name != "__init__.py")
# The JSON files that name classes of the code files (`auto_map`), and the translation pipeline (`custom_pipelines`).
CLASS_NAMING_FILES = ("config.json", "tokenizer_config.json")


def outdated_code_files(folder: str | Path) -> list[str]:
    """The model code files of `folder` that differ from this package's (none if it holds no code)."""
    folder = Path(folder)
    held = [name for name in CODE_FILES if (folder / name).is_file()]
    return [name for name in held if (folder / name).read_bytes() != (MODEL_ROOM / name).read_bytes()]


def warn_if_outdated(folder: str | Path) -> None:
    """One line, once, when a folder's model code is not this package's: processes without the package would run
    it. A command that loads the folder several times (each export) says it once."""
    if Path(folder).is_dir() and (outdated := outdated_code_files(folder)):
        logger.warning_once(
            f"{folder}: its model code ({', '.join(outdated)}) is not this version's; processes without "
            f"hf_vanilla_transformer run it. `hf-vanilla-transformer upgrade-folder {folder}` replaces it."
        )


def class_modules() -> dict[str, str]:
    """{class name: module} of every class the model code files define, as `auto_map` names them."""
    modules = {}
    for name in CODE_FILES:
        module = importlib.import_module(f"{model_room.__name__}.{Path(name).stem}")
        for attribute in vars(module).values():
            if isinstance(attribute, type) and attribute.__module__ == module.__name__:
                modules[attribute.__name__] = Path(name).stem
    return modules


def renamed(reference: str, modules: dict[str, str]) -> str:
    """An `auto_map` or pipeline reference `module.Class` (maybe `repo--module.Class`) with this version's module."""
    prefix, _, dotted = reference.rpartition("--")
    class_name = dotted.rsplit(".", 1)[-1]
    if class_name not in modules:
        return reference
    return f"{prefix}--" * bool(prefix) + f"{modules[class_name]}.{class_name}"


def upgrade_folder(folder: str | Path) -> list[str]:
    """Give a saved folder this package's model code files and the class references (`auto_map`,
    `custom_pipelines`) that match them; the weights and every other file stay as they are. The files written."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InputError(f"{folder}: not a saved model folder (no config.json).")
    check_json_files(folder, option=None)
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("model_type") != model_room.VanillaTransformerConfig.model_type:
        raise InputError(
            f"{folder}: config.json's model_type is {config.get('model_type')!r}, not "
            f"{model_room.VanillaTransformerConfig.model_type!r}: not a folder of this package's model."
        )
    modules = class_modules()
    written = []
    for name in CODE_FILES:
        shutil.copyfile(MODEL_ROOM / name, folder / name)
        written.append(name)
    for name in CLASS_NAMING_FILES:
        path = folder / name
        if not path.is_file():
            continue
        settings = json.loads(path.read_text(encoding="utf-8"))
        before = json.dumps(settings, sort_keys=True)
        if isinstance(settings.get("auto_map"), dict):
            settings["auto_map"] = {
                auto: [renamed(ref, modules) if ref else ref for ref in refs]
                if isinstance(refs, list)
                else renamed(refs, modules)
                for auto, refs in settings["auto_map"].items()
            }
        for entry in (settings.get("custom_pipelines") or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("impl"), str):
                entry["impl"] = renamed(entry["impl"], modules)
        if json.dumps(settings, sort_keys=True) != before:
            path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            written.append(name)
    return written


def main(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Replace the model code files of folders saved by an earlier version with this version's (and "
        "the class references in config.json and tokenizer_config.json); the weights stay as they are.",
    )
    parser.add_argument("folders", nargs="+", metavar="DIR", help="a folder saved by save_pretrained or training")
    args = parser.parse_args(argv)
    for folder in args.folders:
        print(f"{folder}: wrote {', '.join(upgrade_folder(folder))}")
    return 0


__all__ = ["CODE_FILES", "main", "outdated_code_files", "upgrade_folder", "warn_if_outdated"]
