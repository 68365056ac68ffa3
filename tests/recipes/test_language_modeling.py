"""`hf-vanilla-transformer train language-modeling`: the decoder-only demo trains, saves, reports and samples."""

import json
import math

from transformers import AutoTokenizer, pipeline

from hf_vanilla_transformer.recipes.language_modeling import main


def test_the_demo_trains_saves_reports_and_samples(tmp_path, capsys):  # row 48: end to end, batched generation
    out = tmp_path / "lm"
    argv = ["--output_dir", str(out), "--max_steps", "6", "--vocab_size", "300", "--d_model", "32", "--layers", "1"]
    argv += ["--heads", "2", "--ffn_dim", "64", "--max_train_minutes", "0", "--prompts", "Tom is", "I"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Tom is" in printed and "Perplexity: validation" in printed
    report = json.loads((out / "metrics.json").read_text())
    assert report["task"] == "language-modeling" and report["training"]["steps"] == 6
    assert math.isfinite(report["validation"]["perplexity"]) and report["training"]["adam_epsilon"] == 1e-9
    assert {"model.safetensors", "tokenizer.json", "modeling_vanilla_transformer.py", "training_curves.png"} <= {
        p.name for p in out.iterdir()
    }
    assert AutoTokenizer.from_pretrained(out).padding_side == "left"
    (record,) = pipeline("text-generation", model=str(out))("Tom is", max_new_tokens=4)
    assert record["generated_text"].startswith("Tom is")
