"""`hf-vanilla-transformer train translation`: from corpus files to a trained, reloadable, shareable translator;
resume, refusal to overwrite, checkpoint averaging, two processes."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
)

from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.training.checkpoints import (
    average_checkpoints,
    checkpoint_folders,
    last_checkpoints,
    verify_checkpoint,
)
from tests.helpers import (
    PAIRS,
    ROOT,
    TINY_MODEL,
    default_sigint,
    interrupted_at,
    logged,
    logged_losses,
    run_distributed,
    run_training,
    tiny_tokenizer,
    write_jsonl,
)


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "pairs.jsonl", PAIRS)


@pytest.mark.slow
def test_training_overfits_a_few_pairs_and_the_folder_is_ready_to_share(pairs_file, tmp_path):
    out = tmp_path / "run"
    run_training(
        "--output_dir",
        out,
        "--train_file",
        pairs_file,
        "--validation_file",
        pairs_file,
        "--test_file",
        pairs_file,
        *TINY_MODEL,
        "--d_model",
        64,
        "--ffn_dim",
        128,
        "--max_steps",
        300,
        "--per_device_train_batch_size",
        8,
        "--dropout",
        0,
        "--warmup_steps",
        20,
        "--learning_rate",
        3e-3,
        "--eval_steps",
        150,
        "--save_steps",
        150,
        "--logging_steps",
        10,
        "--translate",
        "Wo ist Tom?",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["bleu"] == pytest.approx(100.0) and metrics["test"]["num_samples"] == len(PAIRS)
    assert metrics["training"]["steps"] == 300 and metrics["training"]["label_smoothing"] == 0.1
    files = {p.name for p in out.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "training_curves.png",
        "modeling_vanilla_transformer.py",
        "configuration_vanilla_transformer.py",
    } <= files
    generation_config = json.loads((out / "generation_config.json").read_text())
    assert (generation_config["num_beams"], generation_config["length_penalty"]) == (4, 0.6)
    # The model's positions (evaluation must not leave transformers' max_length=20 there); limits follow the source
    # in translate and the pipeline.
    assert generation_config["max_length"] == 256 and "max_new_tokens" not in generation_config
    # safetensors writes its files readable by their owner only; the command gives them the umask's modes.
    umask = os.umask(0o077)
    os.umask(umask)
    for path in [out / "model.safetensors", *out.glob("checkpoint-*/model.safetensors")]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    batch = tokenizer([de for de, _ in PAIRS], return_tensors="pt", padding=True)
    greedy = model.generate(**batch, num_beams=1, max_new_tokens=20)
    assert tokenizer.batch_decode(greedy, skip_special_tokens=True) == [en for _, en in PAIRS]


@pytest.mark.slow
def test_interrupted_and_resumed_training_reproduces_the_uninterrupted_losses(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(6) for de, en in PAIRS])
    common = [
        "--train_file",
        data,
        *TINY_MODEL,
        "--per_device_train_batch_size",
        8,
        "--logging_steps",
        1,
        "--eval_strategy",
        "no",
        "--save_steps",
        4,
        "--learning_rate",
        3e-3,
        "--warmup_steps",
        3,
    ]
    run_training("--output_dir", tmp_path / "full", *common, "--max_steps", 10)
    with interrupted_at(4):
        assert run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 10) == 128 + signal.SIGTERM
    run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 10, "--resume_from_checkpoint", "last")
    full, resumed = logged_losses(tmp_path / "full"), logged_losses(tmp_path / "cut")
    assert sorted(full) == sorted(resumed) == list(range(1, 11))
    for step in range(5, 11):
        assert resumed[step] == pytest.approx(full[step], rel=1e-6), step


def test_training_refuses_to_overwrite_a_previous_run(tmp_path, pairs_file):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.safetensors").write_bytes(b"precious")
    with pytest.raises(InputError, match="not empty.*--overwrite"):
        run_training("--output_dir", tmp_path / "old", "--train_file", pairs_file, *TINY_MODEL)
    with pytest.raises(InputError, match="No complete checkpoint"):
        run_training("--output_dir", tmp_path / "old", "--train_file", pairs_file, "--resume_from_checkpoint", "last")
    assert (tmp_path / "old" / "model.safetensors").read_bytes() == b"precious"


def test_resuming_a_finished_run_changes_nothing_and_says_so(tmp_path, pairs_file, capsys):
    common = ["--output_dir", tmp_path / "run", "--train_file", pairs_file, *TINY_MODEL, "--eval_strategy", "no"]
    run_training(*common, "--max_steps", 2, "--save_steps", 2)
    before = {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir() if path.is_file()}
    capsys.readouterr()
    assert run_training(*common, "--max_steps", 2, "--save_steps", 2, "--resume_from_checkpoint", "last") == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "already trained 2 steps" in said[0] and "--max_steps" in said[0], said
    assert {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir() if path.is_file()} == before
    assert [path.name for path in (tmp_path / "run").glob("checkpoint-*")] == ["checkpoint-2"]


@pytest.mark.slow
def test_checkpoint_averaging_writes_a_loadable_model_with_the_mean_weights(tmp_path, pairs_file):
    run_training(
        "--output_dir",
        tmp_path / "run",
        "--train_file",
        pairs_file,
        *TINY_MODEL,
        "--max_steps",
        6,
        "--save_steps",
        2,
        "--eval_strategy",
        "no",
        "--per_device_train_batch_size",
        4,
        "--average_last",
        3,
    )
    checkpoints = last_checkpoints(tmp_path / "run", 3)
    assert [c.name for c in checkpoints] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    average_checkpoints(checkpoints, tmp_path / "avg")
    averaged = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    models = [AutoModelForSeq2SeqLM.from_pretrained(c) for c in checkpoints]
    for name, param in averaged.named_parameters():
        expected = sum(dict(m.named_parameters())[name] for m in models) / 3
        torch.testing.assert_close(param, expected, atol=1e-6, rtol=1e-6)
    # --average_last 3: the run's own model is that mean, and its report names the checkpoints
    final = dict(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "run").named_parameters())
    for name, param in averaged.named_parameters():
        torch.testing.assert_close(final[name], param, atol=0, rtol=0)
    report = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert report["training"]["averaged_checkpoints"] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert AutoTokenizer.from_pretrained(tmp_path / "avg")("Ja.")["input_ids"]
    with pytest.raises(InputError, match=r"--last 5: .* has 3 checkpoint-<step> folder\(s\), fewer than 5"):
        last_checkpoints(tmp_path / "run", 5)


@pytest.mark.slow
def test_two_processes_train_and_evaluate_like_one_with_the_same_global_batch(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(4) for de, en in PAIRS])
    evaluation = write_jsonl(tmp_path / "eval.jsonl", PAIRS[:7])  # 7 pairs: not divisible by 2 processes x batch 2
    common = [
        "--train_file",
        train,
        "--validation_file",
        evaluation,
        "--test_file",
        evaluation,
        *TINY_MODEL,
        "--dropout",
        0,
        "--max_steps",
        6,
        "--logging_steps",
        1,
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--per_device_eval_batch_size",
        2,
        "--train_sampling_strategy",
        "sequential",
        "--use_cpu",
        "--learning_rate",
        3e-3,
        "--warmup_steps",
        2,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    single = subprocess.run(
        list(
            map(
                str,
                [
                    sys.executable,
                    "-m",
                    "hf_vanilla_transformer",
                    "train",
                    "translation",
                    "--output_dir",
                    tmp_path / "one",
                    *common,
                    "--per_device_train_batch_size",
                    8,
                ],
            )
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    double = subprocess.run(
        list(
            map(
                str,
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node",
                    "2",
                    "--master_port",
                    "29533",
                    "-m",
                    "hf_vanilla_transformer",
                    "train",
                    "translation",
                    "--output_dir",
                    tmp_path / "two",
                    *common,
                    "--per_device_train_batch_size",
                    4,
                ],
            )
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    assert two["training"]["world_size"] == 2
    losses_one, losses_two = logged_losses(tmp_path / "one"), logged_losses(tmp_path / "two")
    assert sorted(losses_one) == sorted(losses_two) == list(range(1, 7))
    for step in losses_one:
        assert losses_two[step] == pytest.approx(losses_one[step], rel=1e-4), step
    assert one["test"]["num_samples"] == two["test"]["num_samples"] == 7  # every pair scored once
    assert two["test"]["bleu"] == pytest.approx(one["test"]["bleu"], abs=1e-6)


TOKEN_RUN = [
    *TINY_MODEL, "--dropout", 0, "--logging_steps", 1, "--eval_strategy", "no", "--learning_rate", 3e-3,
    "--warmup_steps", 2, "--use_cpu", "--max_tokens", 60, "--max_source_length", 30, "--max_target_length", 30,
]  # fmt: skip


@pytest.fixture(scope="module")
def varied_pairs(tmp_path_factory):
    """48 pairs of 3 to 12 words: token batches of 60 tokens hold from 2 to 12 of them."""
    pairs = [(" ".join([de] * (1 + i % 3)), " ".join([en] * (1 + i % 3))) for i in range(6) for de, en in PAIRS]
    folder = tmp_path_factory.mktemp("varied")
    for lang, side in (("de", 0), ("en", 1)):
        (folder / f"train.{lang}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return str(folder / "train")


@pytest.mark.slow
def test_two_processes_with_token_batches_give_the_losses_of_one_accumulating_two_and_resume_exactly(
    tmp_path, varied_pairs
):
    common = ["--train_file", varied_pairs, *TOKEN_RUN, "--max_steps", 10, "--save_steps", 8]  # 6 updates an epoch
    common += ["--ema_decay", 0.8]  # every process keeps the same average of the weights, resumed too
    common += ["--lr_scheduler_type", "inverse_sqrt"]  # "interrupted" by a shorter run: a schedule of any length
    run_training("--output_dir", tmp_path / "one", *common, "--gradient_accumulation_steps", 2)
    for name, steps in (("two", 10), ("cut", 8), ("cut", 10)):
        resume = ["--resume_from_checkpoint", "last"] if (tmp_path / name).exists() else []
        done = run_distributed("--output_dir", tmp_path / name, *common, "--max_steps", steps, *resume)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "find_unused_parameters" not in done.stderr  # DDP does not search the graph for unused parameters
    one, two, cut = (logged(tmp_path / run, "loss") for run in ("one", "two", "cut"))
    assert sorted(one) == sorted(two) == sorted(cut) == list(range(1, 11))
    for step in one:  # the loss of an update: its real target tokens over both processes and accumulation steps
        assert two[step] == pytest.approx(one[step], rel=1e-5, abs=1e-5), step
        assert cut[step] == pytest.approx(two[step], rel=1e-6), step  # resumed after step 8: the same batches
    tokens = logged(tmp_path / "one", "target_tokens_per_update")
    assert tokens == logged(tmp_path / "two", "target_tokens_per_update") and min(tokens.values()) > 0
    epochs = logged(tmp_path / "two", "epoch")
    assert 1 < epochs[8] < 2  # the checkpoint was taken in the middle of the second epoch
    report = json.loads((tmp_path / "two" / "metrics.json").read_text())["training"]
    assert (report["world_size"], report["max_tokens"], report["gradient_accumulation_steps"]) == (2, 60, 1)
    saved = {run: load_file(tmp_path / run / "model.safetensors") for run in ("one", "two", "cut")}
    for name, weight in saved["one"].items():
        assert torch.allclose(saved["two"][name], weight, atol=1e-5), name
        assert torch.allclose(saved["cut"][name], saved["two"][name], atol=1e-6), name


@pytest.mark.slow
@pytest.mark.parametrize("regional", [False, True], ids=["whole-model", "by-layer"])
def test_compiled_training_on_a_cpu_trains_the_eager_batches_to_the_eager_losses(
    tmp_path, varied_pairs, monkeypatch, regional
):
    """`--torch_compile True` on a CPU: dynamic shapes without graph breaks over token batches of varying shapes, also
    as started by `accelerate launch` (whose defaults turn dynamic shapes off), compiled whole or, with accelerate's
    regional compilation, each layer on its own. Lengths are not padded to a multiple there (an accelerator's tensor
    cores want it, a CPU does not), so the batches and, dropout off, the losses are the eager run's."""
    from torch._dynamo.utils import counters

    # What `accelerate launch` exports where its configuration does not compile; restored after the test.
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "NO")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "False")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", str(regional))  # the launcher's flag
    common = ["--train_file", varied_pairs, *TOKEN_RUN, "--max_steps", 8, "--save_strategy", "no"]
    common += ["--ema_decay", 0.8]
    run_training("--output_dir", tmp_path / "eager", *common)
    torch._dynamo.reset()
    counters.clear()
    run_training("--output_dir", tmp_path / "compiled", *common, "--torch_compile", "True")
    if regional:
        # Graphs for the embedding, the output projection and each kind of layer (the layers' by whether the batch
        # has padding: packed rows or not), and for the evaluation's decoding: none for a new batch shape.
        assert 4 <= counters["stats"]["unique_graphs"] <= 9 and not counters["graph_break"]
    else:
        # At most two graphs: the second when a batch's source and target lengths first differ
        # (docs/training-at-scale.md).
        assert counters["stats"]["unique_graphs"] <= 2 and not counters["graph_break"]
    tokens = {run: logged(tmp_path / run, "target_tokens_per_update") for run in ("eager", "compiled")}
    assert tokens["compiled"] == tokens["eager"]
    eager, compiled = logged(tmp_path / "eager", "loss"), logged(tmp_path / "compiled", "loss")
    assert sorted(compiled) == sorted(eager) == list(range(1, 9))
    for step in eager:
        assert compiled[step] == pytest.approx(eager[step], rel=1e-3), step
    # the moving average of the weights is kept outside the compiled graphs, from the same weights
    saved = {run: load_file(tmp_path / run / "model.safetensors") for run in ("eager", "compiled")}
    for name, weight in saved["eager"].items():
        assert torch.allclose(saved["compiled"][name], weight, atol=1e-4), name


@pytest.mark.slow
def test_a_run_with_token_batches_resumed_mid_epoch_sees_the_batches_of_the_uninterrupted_run(tmp_path, varied_pairs):
    common = ["--train_file", varied_pairs, *TOKEN_RUN, "--save_steps", 5]  # 11 batches per epoch
    run_training("--output_dir", tmp_path / "full", *common, "--max_steps", 14)
    with interrupted_at(5):
        run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 14)
    run_training("--output_dir", tmp_path / "cut", *common, "--max_steps", 14, "--resume_from_checkpoint", "last")
    full, resumed = logged(tmp_path / "full", "loss"), logged(tmp_path / "cut", "loss")
    assert sorted(full) == sorted(resumed) == list(range(1, 15))
    assert logged(tmp_path / "full", "epoch")[5] % 1 and logged(tmp_path / "full", "epoch")[14] > 1
    for step in range(6, 15):
        assert resumed[step] == pytest.approx(full[step], rel=1e-6), step


def test_the_demos_settings_switch_off_with_a_users_corpus(tmp_path, capsys):
    from hf_vanilla_transformer.recipes.translation import DEMO_STEPS, EXAMPLES, parse_args

    _, _, recipe, training = parse_args([])
    assert training.max_steps == DEMO_STEPS and recipe.translate == EXAMPLES and recipe.average_last == 0
    assert training.output_dir == "outputs/demo-de-en"
    own = ["--train_file", "data/train.de", "data/train.en", "--num_train_epochs", "1"]
    _, data, recipe, training = parse_args([*own, "--output_dir", str(tmp_path / "mine")])
    assert training.max_steps == -1 and training.num_train_epochs == 1 and recipe.translate is None
    assert recipe.average_last == 0
    assert data.train_file == ["data/train.de", "data/train.en"]
    with pytest.raises(InputError, match=r"--output_dir: name the folder .* \(outputs/demo-de-en is the demo's\)"):
        parse_args(own)
    with pytest.raises(InputError, match="--validation_file and --test_file come with --train_file"):
        parse_args(["--test_file", "data/test", "--output_dir", str(tmp_path / "x")])
    _, _, recipe, _ = parse_args(["--paper_preset", "base"])  # the paper's batches
    assert (recipe.max_tokens, recipe.tokens_per_update) == (4096, 25000)
    _, _, recipe, _ = parse_args(["--paper_preset", "base", "--max_tokens", "0"])
    assert (recipe.max_tokens, recipe.tokens_per_update) == (None, None)
    _, _, recipe, _ = parse_args(["--paper_preset", "base", "--max_tokens", "auto"])
    assert (recipe.max_tokens, recipe.tokens_per_update) == ("auto", 25000)
    with pytest.raises(InputError, match="--max_tokens lots: expected a number of tokens .* or auto"):
        parse_args(["--max_tokens", "lots"])
    with pytest.raises(SystemExit) as exit:
        parse_args(["--max_tokens", "4096", "--tokens_per_updates", "25000"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "hf-vanilla-transformer train translation: error: unrecognized arguments: --tokens_per_updates 25000; "
        "did you mean --tokens_per_update? (see --help)"
    ]


@pytest.mark.slow
def test_a_users_corpus_trains_its_epochs_and_its_long_pairs_are_counted(tmp_path):
    long = [(" ".join([de] * 6), " ".join([en] * 6)) for de, en in PAIRS[:3]]  # 3 pairs over 16 source tokens
    folder = tmp_path / "data"
    folder.mkdir()
    for lang, side in (("de", 0), ("en", 1)):
        (folder / f"train.{lang}").write_text("".join(p[side] + "\n" for p in PAIRS * 2 + long), encoding="utf-8")
    common = ["--train_file", folder / "train", *TINY_MODEL, "--per_device_train_batch_size", 4]
    common += ["--num_train_epochs", 2, "--max_source_length", 16, "--max_target_length", 16]
    run_training("--output_dir", tmp_path / "skip", *common)
    report = json.loads((tmp_path / "skip" / "metrics.json").read_text())["training"]
    assert report["long_pairs"]["train"] == {
        "policy": "skip",
        "source_too_long": 3,
        "target_too_long": report["long_pairs"]["train"]["target_too_long"],
        "skipped": 3,
    }
    assert report["train_samples"] == 16 and report["steps"] == 2 * 4  # 16 pairs in batches of 4, two epochs
    run_training("--output_dir", tmp_path / "cut", *common, "--long_pairs", "truncate")
    report = json.loads((tmp_path / "cut" / "metrics.json").read_text())["training"]
    assert report["long_pairs"]["train"]["truncated"] == 3 and report["train_samples"] == 19
    with pytest.raises(InputError, match=r"train pair 17 \('Guten Morgen! Guten Morgen!.*\) has \d+ source and"):
        run_training("--output_dir", tmp_path / "error", *common, "--long_pairs", "error")


def test_the_closing_note_names_the_reason_for_low_scores():
    from hf_vanilla_transformer.recipes.translation import DEMO_BLEU, DEMO_STEPS, closing_note, repeated_phrase

    good = ["I don't have time today.", "Where is the station?"]
    assert closing_note(DEMO_BLEU - 0.5, DEMO_STEPS, 4.9, good, demo=True) is None
    assert "undertrained model: it trained only 3 steps" in closing_note(0.1, 3, 0.01, ["", "the the the"], demo=True)
    looping = ["I don't have time today.", "Where is the station station station station?"]
    note = closing_note(3.0, DEMO_STEPS, 4.9, looping, demo=True)
    assert note.startswith("The translations look broken") and "'station'" in note and "undertrained" not in note
    note = closing_note(29.4, DEMO_STEPS, 4.9, good, demo=True)
    assert note.startswith(f"Test BLEU 29.40 is far below the {DEMO_BLEU:.2f}") and "undertrained" not in note
    assert closing_note(29.4, DEMO_STEPS, 4.9, good, demo=False) is None  # a user's corpus has no recorded figure
    assert repeated_phrase("go home go home go home now") == "go home"
    assert repeated_phrase("It is very, very cold.") is None


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_run_keeps_a_whole_checkpoint_says_how_to_continue_and_continues(tmp_path, pairs_file, stop):
    """Ctrl-C or SIGTERM once training works: the step ends with its checkpoint, one line says how to resume, the
    exit status is the shell's for that signal; resuming goes on from there."""
    out = tmp_path / "run"
    common = ["--output_dir", out, "--train_file", pairs_file, *TINY_MODEL, "--eval_strategy", "no"]
    command = [sys.executable, "-m", "hf_vanilla_transformer", "train", "translation", *common]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.Popen(
        [*map(str, command), "--max_steps", "1000", "--save_steps", "1000", "--logging_steps", "1"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    said = []
    for line in run.stderr:  # the recipe's log: training began
        said.append(line)
        if "Training 1,000 steps from step 0" in line:
            break
    run.send_signal(stop)
    said += run.communicate(timeout=600)[1].splitlines()
    assert run.returncode == 128 + stop, "".join(said)[-3000:]
    checkpoint = checkpoint_folders(out)[-1]
    step = int(checkpoint.name.split("-")[1])
    assert said[-1] == (
        f"hf-vanilla-transformer train translation: stopped at step {step}, saved as {checkpoint}: run the same "
        "command with --resume_from_checkpoint last to continue."
    )
    assert not any("Traceback" in line for line in said)
    verify_checkpoint(checkpoint)  # whole
    assert not (out / "model.safetensors").exists()  # no finished model
    run_training(*common, "--max_steps", step + 1, "--resume_from_checkpoint", "last")
    assert sorted(logged_losses(out)) == list(range(1, step + 2))


def test_a_size_that_does_not_fit_is_named_as_the_option_typed(tmp_path, pairs_file):
    from hf_vanilla_transformer.recipes.common import SINGLE_STACK_OPTIONS, single_stack_config

    common = ["--output_dir", tmp_path / "run", "--train_file", pairs_file, *TINY_MODEL]
    for architecture in ("vanilla", "marian"):
        with pytest.raises(InputError) as error:
            run_training(*common, "--architecture", architecture, "--attention_heads", 3)
        assert str(error.value) == "--attention_heads must be a divisor of --d_model 32, got 3."
    with pytest.raises(InputError, match=r"^--label_smoothing must be a probability in \[0, 1\), got 1.5.$"):
        run_training(*common, "--label_smoothing", 1.5)
    with pytest.raises(InputError, match=r"^--heads must be a divisor of --d_model 32, got 3.$"):  # the other heads'
        single_stack_config(tiny_tokenizer(), 32, 1, 3, 64, options=SINGLE_STACK_OPTIONS)
    assert not (tmp_path / "run").exists()


def test_the_final_scoring_is_proportionate_to_the_training():
    from hf_vanilla_transformer.recipes.translation import DEMO_STEPS, MIN_SCORED_PAIRS, scored_pairs

    assert scored_pairs(1000, DEMO_STEPS, given=False) == 1000  # the demo scores its whole test split
    assert scored_pairs(1000, 5, given=False) == MIN_SCORED_PAIRS == 32  # a smoke run
    assert scored_pairs(1000, 300, given=False) == 300  # one pair per step
    assert scored_pairs(1000, 5, given=True) == 1000  # --max_test_samples decides
    assert scored_pairs(20, 5, given=False) == 20


@pytest.mark.slow
def test_a_smoke_run_scores_a_stated_subset_and_evaluates_its_last_step_once(tmp_path, capsys):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [(f"{de} {i}", f"{en} {i}") for i in range(10) for de, en in PAIRS])
    out = tmp_path / "run"
    common = ["--output_dir", out, "--train_file", pairs, "--validation_file", pairs, "--test_file", pairs]
    run_training(*common, *TINY_MODEL, "--max_steps", 2, "--eval_steps", 2, "--save_strategy", "no")
    test, validation = (json.loads((out / "metrics.json").read_text())[split] for split in ("test", "validation"))
    assert (test["num_samples"], test["pairs_in_split"], validation["num_samples"]) == (32, 80, 32)
    said = "Test set (the first 32 of 80 pairs: one per training step, at least 32; --max_test_samples 80 scores them"
    assert said in capsys.readouterr().out
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in history if "eval_loss" in entry] == [2]  # not again after training
