"""`hf-vanilla-transformer train classification`: the encoder-only demo trains, evaluates, reports and classifies."""

import json

from transformers import AutoModelForSequenceClassification

from hf_vanilla_transformer.recipes.classification import main


def test_the_demo_trains_evaluates_reports_and_classifies(tmp_path, capsys):
    out = tmp_path / "classifier"
    argv = ["--output_dir", str(out), "--max_steps", "6", "--vocab_size", "300", "--d_model", "32", "--layers", "1"]
    argv += ["--heads", "2", "--ffn_dim", "64", "--max_train_minutes", "0"]
    argv += ["--pooling", "first", "--examples", "Wo ist Tom", "Tom is here"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "always answering 'statement'" in printed and "'Wo ist Tom'" in printed
    report = json.loads((out / "metrics.json").read_text())
    assert report["task"] == "text-classification" and report["training"]["steps"] == 6
    assert report["test"]["sentences"] == 2000 and set(report["test"]["accuracy_by_language"]) == {"de", "en"}
    assert 0.8 < report["test"]["majority_class_accuracy"] < 0.9
    reloaded = AutoModelForSequenceClassification.from_pretrained(out)
    assert reloaded.config.classifier_pooling == "first" and reloaded.config.id2label == {
        0: "statement",
        1: "question",
    }
    assert {"model.safetensors", "tokenizer.json", "modeling_vanilla_transformer.py"} <= {
        p.name for p in out.iterdir()
    }
