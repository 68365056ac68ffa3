"""Every way users save a model gives a folder that translates through pipeline("translation"): with this package
imported (no trust_remote_code needed) and in a process without it (trust_remote_code=True).

The routes: `save_pretrained`, `Trainer.save_model`, `push_to_hub` (what it uploads), publishing (`stage_for_hub`), and
a fine-tuning run as transformers' examples/pytorch/translation/run_translation.py does it, in a process without the
package, on remote code. That script is not part of the transformers distribution; `RUN_TRANSLATION_SCRIPT=path` runs
the real one as well.
"""

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
import transformers.utils.hub
from huggingface_hub import ModelCard
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)
from transformers.utils import PushToHubMixin

from hf_vanilla_transformer import TranslationPipeline, VanillaTransformerForConditionalGeneration, cli
from hf_vanilla_transformer.data.folders import load_translation_model
from hf_vanilla_transformer.data.saved_code import CODE_FILES, upgrade_folder
from hf_vanilla_transformer.hub.publish import stage_for_hub
from hf_vanilla_transformer.model.modeling_vanilla_transformer import CACHE_NAME
from tests.helpers import ROOT, SENTENCES, run_without_package, tiny_config, tiny_tokenizer


SOURCES = ["Ich habe Hunger.", "Wo ist der Bahnhof?", ""]
PAIRS = [{"translation": {"de": de, "en": en}} for de, en in zip(SENTENCES[::2], SENTENCES[1::2])]
# The model and data calls of run_translation.py (transformers' translation example), in its order, with its defaults.
RUN_TRANSLATION = textwrap.dedent(
    """
    from datasets import load_dataset
    from transformers import (
        AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )
    model_dir, train_file, output_dir = sys.argv[1:4]
    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, config=config, trust_remote_code=True)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    raw_datasets = load_dataset("json", data_files={"train": train_file})

    def preprocess_function(examples):
        inputs = [ex["de"] for ex in examples["translation"]]
        targets = [ex["en"] for ex in examples["translation"]]
        model_inputs = tokenizer(inputs, max_length=1024, truncation=True)
        model_inputs["labels"] = tokenizer(text_target=targets, max_length=128, truncation=True)["input_ids"]
        return model_inputs

    train_dataset = raw_datasets["train"].map(preprocess_function, batched=True, remove_columns=["translation"])
    args = Seq2SeqTrainingArguments(
        output_dir=output_dir, max_steps=2, per_device_train_batch_size=4, save_strategy="no", report_to="none",
        use_cpu=True, predict_with_generate=True,
    )
    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=train_dataset, processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
    )
    trainer.train()
    trainer.save_model()
    trainer.save_state()
    trainer.create_model_card(finetuned_from=model_dir, tasks="translation", language=["de", "en"])
    """
)
TRANSLATE = textwrap.dedent(
    """
    import json
    from transformers import pipeline
    results = {}
    for folder in sys.argv[2:]:
        translate = pipeline("translation", model=folder, trust_remote_code=True)
        assert type(translate).__module__.startswith("transformers_modules."), type(translate).__module__
        results[folder] = translate(json.loads(sys.argv[1]), max_new_tokens=5)
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def folders(tokenizer, tmp_path_factory, request):
    """One folder per way of saving, all holding the same tiny model (fine-tuning changes its weights)."""
    root = tmp_path_factory.mktemp("folders")
    torch.manual_seed(1)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), init_std=1.0)).eval()
    model.generation_config.suppress_tokens = [tokenizer.bos_token_id]  # untrained models mostly predict <s>
    folders = {}

    folders["save_pretrained"] = root / "save_pretrained"
    model.save_pretrained(folders["save_pretrained"])
    tokenizer.save_pretrained(folders["save_pretrained"])

    folders["Trainer.save_model"] = root / "trainer"
    args = Seq2SeqTrainingArguments(output_dir=str(folders["Trainer.save_model"]), report_to="none", use_cpu=True)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    Seq2SeqTrainer(model=model, args=args, processing_class=tokenizer, data_collator=collator).save_model()

    folders["push_to_hub"] = root / "pushed"
    with pytest.MonkeyPatch.context() as patch:  # what push_to_hub uploads, without the network
        patch.setattr(transformers.utils.hub, "hf_api", lambda: FakeApi())
        patch.setattr(transformers.utils.hub, "create_and_tag_model_card", lambda *a, **k: ModelCard("# Card"))
        patch.setattr(
            PushToHubMixin,
            "_upload_modified_files",
            lambda self, folder, *a, **k: shutil.copytree(folder, folders["push_to_hub"]),
        )
        model.push_to_hub("org/name")
        tokenizer.save_pretrained(folders["push_to_hub"])

    folders["stage_for_hub"] = stage_for_hub(folders["save_pretrained"], root / "staged", "org/name")

    folders["run_translation"] = root / "fine-tuned"
    train_file = root / "train.json"
    train_file.write_text("".join(json.dumps(pair) + "\n" for pair in PAIRS), encoding="utf-8")
    script = os.environ.get("RUN_TRANSLATION_SCRIPT")
    if script:  # transformers' own script, where a copy is at hand
        runner = f"import runpy; sys.argv = [{script!r}, *sys.argv[1:]]\n"
        runner += f"runpy.run_path({script!r}, run_name='__main__')\n"
        result = run_without_package(
            runner,
            *("--model_name_or_path", folders["save_pretrained"], "--trust_remote_code", "--do_train"),
            *("--train_file", train_file, "--source_lang", "de", "--target_lang", "en", "--max_steps", 2),
            *("--output_dir", folders["run_translation"], "--report_to", "none", "--use_cpu"),
            cwd=root,
        )
    else:
        result = run_without_package(
            RUN_TRANSLATION, folders["save_pretrained"], train_file, folders["run_translation"], cwd=root
        )
    assert result.returncode == 0, result.stderr[-3000:]
    return folders


class FakeApi:
    def create_repo(self, repo_id, **kwargs):
        return type("RepoUrl", (), {"repo_id": repo_id})()


ROUTES = ["save_pretrained", "Trainer.save_model", "push_to_hub", "stage_for_hub", "run_translation"]


@pytest.mark.slow
def test_every_saved_folder_translates_without_the_package_with_trust_remote_code(folders, tmp_path):
    result = run_without_package(TRANSLATE, json.dumps(SOURCES), *(folders[r] for r in ROUTES), cwd=tmp_path)
    translations = json.loads(result.stdout.strip().splitlines()[-1])
    for route in ROUTES:
        local = pipeline("translation", model=str(folders[route]))(SOURCES, max_new_tokens=5)
        assert translations[str(folders[route])] == local, route
        assert local[0]["translation_text"] and local[2] == {"translation_text": ""}, route


@pytest.mark.parametrize("route", ROUTES)
def test_every_saved_folder_translates_with_the_package_imported_without_trust_remote_code(folders, route):
    folder = folders[route]
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline", route
    assert (folder / "pipeline_translation.py").is_file() and (folder / "modeling_vanilla_transformer.py").is_file()
    translate = pipeline("translation", model=str(folder))
    assert type(translate) is TranslationPipeline, route
    assert translate(SOURCES, max_new_tokens=5)[0]["translation_text"], route


TOKENIZERS = """
import json
from transformers import AutoTokenizer, PreTrainedTokenizerFast
folder, text = sys.argv[1:3]
if sys.argv[3] == "ask":
    AutoTokenizer.from_pretrained(folder)
plain = PreTrainedTokenizerFast.from_pretrained(folder)
trusted = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
print(json.dumps([type(plain).__name__, plain(text).input_ids, trusted(text).input_ids]))
"""


@pytest.mark.slow
def test_the_tokenizer_loads_without_the_package_and_without_a_question(folders, tokenizer, tmp_path):
    """What the docs promise where the package is not installed: `PreTrainedTokenizerFast` reads tokenizer.json and
    runs nothing of the folder; `AutoTokenizer` loads it with trust_remote_code=True. Without the flag, transformers 5
    resolves the folder's configuration first, which is remote code (`auto_map`), and asks (stdin is closed here): the
    day that changes, the docs can say that AutoTokenizer loads it anywhere."""
    folder, text = folders["save_pretrained"], "Wo ist der Bahnhof?"
    result = run_without_package(TOKENIZERS, folder, text, "silent", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    ids = tokenizer(text).input_ids
    assert json.loads(result.stdout) == ["TokenizersBackend", ids, ids]
    asked = run_without_package(TOKENIZERS, folder, text, "ask", cwd=tmp_path)
    question, _, printed = asked.stdout.rpartition("Do you wish to run the custom code? [y/N] ")
    assert question and json.loads(printed) == ["TokenizersBackend", ids, ids], (asked.stdout, asked.stderr[-3000:])


# --- folders saved before the package was re-housed (tests/fixtures/saved-0.1.0, written by commit bc0ac66) ----------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "saved-0.1.0"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
FIXTURE_OUTPUTS = """
import json
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

folder = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
assert type(AutoModel.from_pretrained(folder, trust_remote_code=True)).__name__ == "VanillaTransformerModel"
batch = tokenizer(["Wo ist der Bahnhof?", "Ich habe Hunger."], return_tensors="pt", padding=True)
with torch.no_grad():
    beam = model.generate(**batch).tolist()
    greedy = model.generate(**batch, num_beams=1).tolist()
translate = pipeline("translation", model=folder, trust_remote_code=True)
print(json.dumps({"module": type(model).__module__, "beam": beam, "greedy": greedy,
                  "pipeline": translate(["Wo ist der Bahnhof?"])[0]["translation_text"]}))
"""


def fixture_outputs_here() -> dict:
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE)
    model = AutoModelForSeq2SeqLM.from_pretrained(FIXTURE).eval()
    batch = tokenizer(EXPECTED["sources"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=torch.tensor(EXPECTED["decoder_input_ids"])).logits
        return dict(
            model=model,
            beam=model.generate(**batch).tolist(),
            greedy=model.generate(**batch, num_beams=1).tolist(),
            logits=logits,
        )


def test_a_folder_saved_before_the_rehousing_loads_with_the_package_and_computes_the_same():
    outputs = fixture_outputs_here()
    assert type(outputs["model"]) is VanillaTransformerForConditionalGeneration  # the package's own classes
    assert outputs["beam"] == EXPECTED["beam_ids"] and outputs["greedy"] == EXPECTED["greedy_ids"]
    assert outputs["logits"].sum().item() == pytest.approx(EXPECTED["logits_sum"], rel=1e-5)
    torch.testing.assert_close(outputs["logits"][0, 0, :8], torch.tensor(EXPECTED["logits_first"]))
    translate = pipeline("translation", model=str(FIXTURE))
    assert type(translate) is TranslationPipeline and translate("Wo ist der Bahnhof?")[0]["translation_text"]


@pytest.mark.slow
def test_a_folder_saved_before_the_rehousing_loads_without_the_package_with_its_own_code(tmp_path):
    """Its own code takes the cache as `past_key_values`: it decodes on transformers before 5.24. From 5.24 on,
    `upgrade-folder` gives it this version's code, which decodes on both."""
    folder = shutil.copytree(FIXTURE, tmp_path / "saved")  # remote code writes a cache beside nothing of ours
    if CACHE_NAME == "cache":
        upgrade_folder(folder)
    result = run_without_package(FIXTURE_OUTPUTS, folder, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    assert outputs["module"].startswith("transformers_modules.")
    assert outputs["beam"] == EXPECTED["beam_ids"] and outputs["greedy"] == EXPECTED["greedy_ids"]
    assert outputs["pipeline"]


# The command runs in this process (cli.main, as the console script calls it): a process of its own would only add
# its start-up; tests/system/test_first_run.py checks how the console script ends a run.
def test_upgrade_folder_gives_an_old_folder_this_versions_code_and_keeps_its_weights(tmp_path, caplog, capsys):
    folder = shutil.copytree(FIXTURE, tmp_path / "saved")
    weights = (folder / "model.safetensors").read_bytes()
    with caplog.at_level("WARNING"):
        load_translation_model(str(folder))
        load_translation_model(str(folder))  # as an export loads it again: said once
    assert caplog.text.count(f"hf-vanilla-transformer upgrade-folder {folder}") == 1  # the old code, with the cure
    assert cli.main(["upgrade-folder", str(folder)]) == 0, capsys.readouterr().err
    for name in CODE_FILES:
        assert (folder / name).read_bytes() == (ROOT / "hf_vanilla_transformer" / "model" / name).read_bytes(), name
    assert (folder / "model.safetensors").read_bytes() == weights
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == (
        "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration"
    )
    caplog.clear()
    with caplog.at_level("WARNING"):
        load_translation_model(str(folder))
    assert "upgrade-folder" not in caplog.text
    assert fixture_outputs_here()["greedy"] == EXPECTED["greedy_ids"]


def test_upgrade_folder_refuses_a_folder_of_another_model(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "marian"}))
    assert cli.main(["upgrade-folder", str(tmp_path)]) == 2
    assert "not a folder of this package's model" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_upgrade_folder_names_a_json_file_cut_short_in_one_line_and_writes_nothing(tmp_path, capsys, name):
    folder = shutil.copytree(FIXTURE, tmp_path / "saved")
    (folder / name).write_bytes((FIXTURE / name).read_bytes()[:100])
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert cli.main(["upgrade-folder", str(folder)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"hf-vanilla-transformer upgrade-folder: error: {folder}: {name} is not valid JSON (")
    assert line.endswith("the file is cut short or damaged; copy or save the model again.")
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    (folder / name).write_text("[1, 2]")
    assert cli.main(["upgrade-folder", str(folder)]) == 2
    assert f"{folder}: {name} holds a JSON list, not an object of settings" in capsys.readouterr().err
