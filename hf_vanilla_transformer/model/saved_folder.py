# Copyright 2026 The hf_vanilla_transformer authors.
# SPDX-License-Identifier: Apache-2.0
"""What a saved model folder needs beyond the model: its `config.json` names every Auto class and the translation
pipeline, tied copies of a weight are saved once, the weights get the file mode of the process umask, and damaged
weights give an error naming the cure.

The configuration and the models inherit this plumbing; it imports only the standard library, safetensors and
transformers, and ships with the model files as remote code.
"""

import os
from typing import ClassVar

from safetensors import SafetensorError


# AutoModel and AutoModelForSeq2SeqLM both load a folder saved by either of them (transformers maps only the saved one).
ENCODER_DECODER_CLASSES = {
    "AutoModel": "VanillaTransformerModel",
    "AutoModelForSeq2SeqLM": "VanillaTransformerForConditionalGeneration",
}


class SavedFolderConfigMixin:
    """A saved folder's pipeline runs as local code in a process that serves it itself."""

    # {task: pipeline class name} of the pipelines this process serves; the package's registration fills it.
    local_pipelines: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        # Folders name their pipeline in `custom_pipelines`, which processes without this package load as remote code
        # (trust_remote_code=True). transformers reads `custom_pipelines` before its registry, so the entries served
        # here are dropped: local code wins, as for the model classes, and pipeline(task, model=folder) needs no trust.
        custom = config_dict.get("custom_pipelines") or {}
        remote = {
            task: entry
            for task, entry in custom.items()
            if cls.local_pipelines.get(task) != entry.get("impl", "").rsplit(".", 1)[-1]
        }
        if remote != custom:
            config_dict = {key: value for key, value in config_dict.items() if key != "custom_pipelines"}
            config_dict.update({"custom_pipelines": remote} if remote else {})
        return super().from_dict(config_dict, **kwargs)


class SavedFolderModelMixin:
    """`save_pretrained` and `from_pretrained` of the models."""

    def post_init(self):
        super().post_init()
        # Tied copies are not saved (only their source). Listed here, `Trainer` re-ties them on resume instead of
        # warning about missing keys.
        self._keys_to_ignore_on_save |= set(self.all_tied_weights_keys)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except SafetensorError as error:  # transformers passes it on without naming the folder
            raise OSError(
                f"The safetensors weights of {pretrained_model_name_or_path} cannot be read ({error}): the file is "
                "corrupt or only partially downloaded (a git-lfs pointer, an interrupted copy). Download it again."
            ) from error

    def save_pretrained(self, save_directory, *args, **kwargs):
        if self._auto_class in ENCODER_DECODER_CLASSES:
            # Imported here: the pipeline file imports the configuration, which imports this file.
            from .pipeline_translation import CUSTOM_PIPELINES

            module = type(self).__module__.rsplit(".", 1)[-1]
            auto_map = {auto: f"{module}.{name}" for auto, name in ENCODER_DECODER_CLASSES.items()}
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **auto_map}
            self.config.custom_pipelines = CUSTOM_PIPELINES
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            # safetensors writes the weights through a temporary file of mode 0600 renamed into place; give them the
            # mode the umask gives every other file saved here. Reading the umask means setting it.
            umask = os.umask(0o077)
            os.umask(umask)
            for name in os.listdir(save_directory):
                if name.endswith(".safetensors"):
                    os.chmod(os.path.join(save_directory, name), 0o666 & ~umask)


__all__ = ["ENCODER_DECODER_CLASSES", "SavedFolderConfigMixin", "SavedFolderModelMixin"]
