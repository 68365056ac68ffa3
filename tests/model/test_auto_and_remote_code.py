"""Auto classes, save/load round trips, and loading saved folders as remote code where the package is not installed."""

import json
import os
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from hf_vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from tests.helpers import MODEL_CODE_FILES, random_batch, run_without_package, tiny_config


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("saved")
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config()).eval()
    model.save_pretrained(path)
    return model, path


def test_auto_classes_build_our_models():
    config = AutoConfig.for_model(
        "vanilla_transformer",
        **{k: v for k, v in tiny_config().to_dict().items() if k in VanillaTransformerConfig.__annotations__},
    )
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is VanillaTransformerForConditionalGeneration
    assert type(AutoModel.from_config(config)) is VanillaTransformerModel


def test_saved_folder_holds_safetensors_configs_code_auto_map_and_pipeline(saved_model):
    _, path = saved_model
    files = set(os.listdir(path))
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        *MODEL_CODE_FILES,
    } <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    config = json.loads((path / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
        "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
        "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    }
    entry = {"impl": "pipeline_translation.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    assert config["custom_pipelines"] == {"translation": entry}


def test_code_files_import_only_what_transformers_brings_and_each_other(saved_model):
    """Remote code: the folder's users have transformers (with torch, safetensors and huggingface_hub) and the standard
    library."""
    _, path = saved_model
    for name in MODEL_CODE_FILES:
        for line in (path / name).read_text().splitlines():
            if line.strip().startswith(("import ", "from ")):
                module = line.split()[1]
                assert module.split(".")[0] in {
                    "huggingface_hub",
                    "safetensors",
                    "torch",
                    "transformers",
                    *sys.stdlib_module_names,
                } or module in {f".{file.removesuffix('.py')}" for file in MODEL_CODE_FILES}, f"{name}: {line}"


def test_save_load_round_trip_gives_identical_outputs(saved_model):
    model, path = saved_model
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    input_ids, attention_mask, labels = random_batch()
    with torch.no_grad():
        a = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        b = reloaded(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=0, rtol=0)


def test_auto_model_loads_the_base_model_from_a_seq2seq_checkpoint(saved_model):
    model, path = saved_model
    base, info = AutoModel.from_pretrained(path, output_loading_info=True)
    assert type(base) is VanillaTransformerModel and info["missing_keys"] == set()
    torch.testing.assert_close(base.shared.weight, model.model.shared.weight)


REMOTE_SCRIPT = textwrap.dedent(
    """
    import sys
    try:
        import hf_vanilla_transformer
    except ImportError:
        pass
    else:
        raise SystemExit("package still importable")
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
    path = sys.argv[1]
    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True).eval()
    base = AutoModel.from_pretrained(path, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    assert type(config).__name__ == "VanillaTransformerConfig" and type(base).__name__ == "VanillaTransformerModel"
    ids = torch.tensor([[5, 6, 7, 8, 2]])
    print(model.generate(input_ids=ids, max_new_tokens=5, eos_token_id=None).tolist())
    """
)


@pytest.mark.slow
def test_remote_code_loads_in_a_process_without_the_package(saved_model, tmp_path):
    model, path = saved_model
    result = run_without_package(REMOTE_SCRIPT, str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = model.generate(input_ids=torch.tensor([[5, 6, 7, 8, 2]]), max_new_tokens=5, eos_token_id=None).tolist()
    assert result.stdout.strip().splitlines()[-1] == str(expected)


@pytest.mark.slow
def test_remote_code_without_trust_fails_before_running_code(saved_model, tmp_path):
    _, path = saved_model
    script = (
        "from transformers import AutoModelForSeq2SeqLM\n"
        "try:\n"
        "    AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=False)\n"
        "except ValueError as e:\n"
        "    print('refused:', 'trust_remote_code' in str(e))\n"
        "print('loaded modules:', any(m.startswith('transformers_modules') for m in sys.modules))\n"
    )
    result = run_without_package(script, path, cwd=tmp_path)
    assert "refused: True" in result.stdout, result.stderr[-3000:]
    assert "loaded modules: False" in result.stdout
