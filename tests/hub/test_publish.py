"""Publishing: the staged (--dry_run) folder, model cards, and loading a published folder by repo id from the cache."""

import filecmp
import json
import re
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file
from transformers import pipeline

import hf_vanilla_transformer
from hf_vanilla_transformer import TranslationPipeline, VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.hub.model_card import check_model_card, make_model_card
from hf_vanilla_transformer.hub.publish import publish_to_hub, stage_for_hub
from tests.helpers import MODEL_CODE_FILES, ROOT, run_without_package, tiny_config, tiny_tokenizer


COMMIT = "0123456789abcdef0123456789abcdef01234567"
METRICS = {
    "source_lang": "de",
    "target_lang": "en",
    "dataset": {
        "name": "Tatoeba German-English (bundled with hf_vanilla_transformer)",
        "license": "cc-by-2.0-fr",
        "attribution": "Sentence pairs from the Tatoeba Project (https://tatoeba.org), CC BY 2.0 FR.",
    },
    "test": {"bleu": 30.1, "chrf": 45.2, "num_samples": 1000, "num_beams": 4, "length_penalty": 0.6},
    "training": {
        "averaged_checkpoints": ["checkpoint-2000", "checkpoint-3000"],
        "steps": 3000,
        "epochs": 3.1,
        "runtime_seconds": 600,
        "train_samples": 30000,
        "hardware": "2 CPU cores",
        "learning_rate": 0.001,
        "warmup_steps": 300,
        "label_smoothing": 0.1,
        "per_device_train_batch_size": 64,
    },
    "command": "hf-vanilla-transformer train translation --output_dir runs/demo",
}
PUBLISHED = {
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    *MODEL_CODE_FILES,
}
SOURCES = ["Ich habe Hunger.", "Wo ist der Bahnhof?", "", "Tom ist nicht hier."]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    """A folder as a training run leaves it: weights, tokenizer, metrics, and training state not to publish."""
    path = tmp_path_factory.mktemp("trained")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(1)
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), max_position_embeddings=128, init_std=1.0)
    )
    model.generation_config.suppress_tokens = [tokenizer.bos_token_id]  # untrained models mostly predict <s>
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "metrics.json").write_text(json.dumps(METRICS))
    for junk in ("training_args.bin", "optimizer.pt", "trainer_state.json"):
        (path / junk).write_bytes(b"not published")
    (path / "checkpoint-10").mkdir()
    return path


def test_dry_run_writes_exactly_the_files_to_publish(trained_dir, tmp_path):
    out = tmp_path / "staged"
    assert (
        cli.main(
            ["publish", "--model", str(trained_dir), "--repo_id", "org/name", "--dry_run", "--output_dir", str(out)]
        )
        == 0
    )
    assert {path.name for path in out.iterdir()} == PUBLISHED
    package = Path(hf_vanilla_transformer.__file__).parent / "model"
    for name in MODEL_CODE_FILES:
        assert filecmp.cmp(out / name, package / name, shallow=False), name
    config = json.loads((out / "config.json").read_text())
    seq2seq = config["auto_map"]["AutoModelForSeq2SeqLM"]
    assert seq2seq == "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration"
    entry = {"impl": "pipeline_translation.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    assert config["custom_pipelines"] == {"translation": entry}


def test_dry_run_refuses_a_folder_that_is_not_empty(trained_dir, tmp_path):
    (tmp_path / "leftover.bin").write_bytes(b"")
    with pytest.raises(InputError, match="not empty"):
        stage_for_hub(trained_dir, tmp_path, "org/name")


def test_a_model_whose_card_would_say_bleu_0_is_refused_unless_allowed(trained_dir, tmp_path, capsys):
    untrained = tmp_path / "untrained"
    shutil.copytree(trained_dir, untrained)
    (untrained / "metrics.json").write_text(json.dumps({**METRICS, "test": {**METRICS["test"], "bleu": 0.0}}))
    argv = ["publish", "--model", str(untrained), "--repo_id", "org/name", "--dry_run", "--output_dir", tmp_path / "a"]
    assert cli.main(list(map(str, argv))) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # one line, no traceback
    assert "test BLEU of 0.00" in line and "--allow_low_bleu" in line
    staged = stage_for_hub(untrained, tmp_path / "b", "org/name", allow_low_bleu=True)
    assert "| BLEU | 0.0 |" in (staged / "README.md").read_text()


def test_folders_with_only_pickled_weights_are_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(InputError, match=r"no safetensors weights \(only the pickles \['pytorch_model.bin'\]\)"):
        stage_for_hub(tmp_path, tmp_path / "out", "org/name")


def test_weights_that_do_not_fit_the_code_are_refused_before_upload(trained_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(trained_dir, broken)
    weights = load_file(broken / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "layers.1." not in k}, broken / "model.safetensors")
    with pytest.raises(InputError, match="do not match the model code"):
        stage_for_hub(broken, tmp_path / "staged", "org/name")


def test_the_card_is_a_valid_hub_card_carrying_the_measured_metrics(trained_dir, tmp_path):
    card = ModelCard.load(stage_for_hub(trained_dir, tmp_path / "staged", "org/name") / "README.md")
    data = card.data
    assert data.language == ["de", "en"] and data.license == "apache-2.0" and data.library_name == "transformers"
    # The bundled corpus is manythings.org's selection of Tatoeba, not a Hub dataset: no dataset repository is linked.
    assert data.pipeline_tag == "translation" and data.datasets is None
    assert {r.dataset_type for r in data.eval_results} == {"custom"}
    assert {"translation", "vanilla_transformer", "custom_code"} <= set(data.tags)
    assert {(r.metric_type, r.metric_value, r.dataset_split) for r in data.eval_results} == {
        ("bleu", 30.1, "test"),
        ("chrf", 45.2, "test"),
    }
    for text in (
        "| BLEU | 30.1 |",
        "beam size 4 and length penalty 0.6",
        "| Label smoothing | 0.1 |",
        "| Final weights | the mean of checkpoint-2000, checkpoint-3000 (section 6.1) |",
        "hf-vanilla-transformer train translation\n",  # without the training machine's --output_dir
        METRICS["dataset"]["attribution"],
        "trust_remote_code=True",
        'revision = "main"',
        "code_revision=revision",
        "use_safetensors=True",
    ):
        assert text in card.text, text
    assert "runs/demo" not in card.text


def test_cards_from_partial_or_missing_metrics_still_validate(trained_dir):
    metrics = {"source_lang": "de", "test": {"bleu": 12.0}, "dataset": None}
    partial = make_model_card(trained_dir, "org/name", metrics=metrics)
    assert partial.data.language == ["de"] and [r.metric_type for r in partial.data.eval_results] == ["bleu"]
    assert "chrF" not in partial.text and "The training command was not recorded." in partial.text
    empty = check_model_card(str(make_model_card(trained_dir, "org/name", metrics={})))
    assert empty.data.eval_results is None and "No test results were recorded" in empty.text
    with pytest.raises(ValueError, match="pipeline_tag"):
        check_model_card("---\nlicense: mit\nlibrary_name: transformers\ntags: [x]\n---\n# Card\n")


def test_publishing_uploads_the_staged_folder_then_pins_the_card_to_that_commit(trained_dir):
    calls = []

    class FakeApi:
        def whoami(self):
            return {"name": "someone"}

        def create_repo(self, repo_id, private, exist_ok):
            calls.append(("create_repo", repo_id, private))

        def upload_folder(self, repo_id, folder_path, delete_patterns, commit_message):
            calls.append(("upload_folder", {p.name for p in Path(folder_path).iterdir()}, delete_patterns))
            return SimpleNamespace(oid=COMMIT)

        def upload_file(self, path_or_fileobj, path_in_repo, repo_id, commit_message):
            calls.append(("upload_file", path_in_repo, path_or_fileobj.decode()))

    assert publish_to_hub(trained_dir, "org/name", private=True, api=FakeApi()) == COMMIT
    assert calls[0] == ("create_repo", "org/name", True)
    assert calls[1] == ("upload_folder", PUBLISHED, "*")  # "*": files of an earlier upload that are not re-sent go
    assert calls[2][:2] == ("upload_file", "README.md") and f'revision = "{COMMIT}"' in calls[2][2]


HUB_USER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerFast, pipeline
    sources, usage = json.loads(sys.argv[1]), sys.argv[2]
    results = []
    for pin in ({}, {"revision": sys.argv[3]}):
        config = AutoConfig.from_pretrained("org/name", trust_remote_code=True, **pin)
        tokenizer = AutoTokenizer.from_pretrained("org/name", trust_remote_code=True, **pin)
        assert PreTrainedTokenizerFast.from_pretrained("org/name", **pin).get_vocab() == tokenizer.get_vocab()
        model = AutoModelForSeq2SeqLM.from_pretrained("org/name", trust_remote_code=True, **pin)
        translate = pipeline("translation", model="org/name", trust_remote_code=True, **pin)
        for obj in (config, model, translate):
            assert type(obj).__module__.startswith("transformers_modules.org.name."), type(obj).__module__
        ids = model.generate(**tokenizer(sources[:1], return_tensors="pt"), max_new_tokens=5)
        results.append([tokenizer.decode(ids[0], skip_special_tokens=True), translate(sources, max_new_tokens=5)])
    exec(usage)  # the model card's usage code, as written
    print(json.dumps(results))
    """
)


@pytest.mark.slow
def test_a_published_folder_loads_by_repo_id_from_the_hub_cache_without_the_package(trained_dir, tmp_path):
    staged = stage_for_hub(trained_dir, tmp_path / "staged", "org/name", revision=COMMIT)
    repo = tmp_path / "hf_home" / "hub" / "models--org--name"
    shutil.copytree(staged, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    usage = re.search(r"```python\n(.*?)```", (staged / "README.md").read_text(), re.DOTALL).group(1)
    assert f'revision = "{COMMIT}"' in usage

    result = run_without_package(HUB_USER_SCRIPT, json.dumps(SOURCES), usage, COMMIT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    local = pipeline("translation", model=str(staged), pipeline_class=TranslationPipeline)
    expected = local(SOURCES, max_new_tokens=5)
    assert expected[0]["translation_text"] and expected[2] == {"translation_text": ""}
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[expected[0]["translation_text"], expected]] * 2


def test_every_card_in_model_cards_is_a_valid_hub_card():
    cards = [path for path in sorted((ROOT / "model_cards").glob("*.md")) if path.name != "README.md"]
    assert cards, f"no model card in {ROOT / 'model_cards'}"
    for path in cards:
        check_model_card(path)
