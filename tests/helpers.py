"""What the tests share: tiny models, configs, batches and tokenizers, a tiny trained translator, the training
command run in-process, a process without the package, and headless Chromium for the browser tests.

Tests import from here (`from tests.helpers import ...`), never from `conftest.py` or from another test file.
"""

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.data.tokenizer import train_shared_bpe_tokenizer
from hf_vanilla_transformer.model.padding import Padding


ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------------- tiny models and data

# The code files of the model room, which `save_pretrained` copies into every folder it saves.
MODEL_CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
    "pipeline_translation.py",
    "input_checks.py",
    "padding.py",
)
# A translator that learns a few hundred short pairs in seconds (no dropout: the tests want them learnt by heart).
SMALL_TRANSLATOR = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    max_position_embeddings=128,
    dropout=0.0,
)
TINY = dict(
    vocab_size=99,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
)


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A model small enough for exhaustive checks; dropout on, as in training, unless a test turns it off."""
    return VanillaTransformerConfig(**{**TINY, **overrides})


def random_batch(batch_size=3, source_length=7, target_length=5, vocab_size=99, seed=0):
    """Source ids ending in EOS with ragged right padding, and target labels padded with -100."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab_size, (batch_size, source_length), generator=g)
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(4, vocab_size, (batch_size, target_length), generator=g)
    for row in range(1, batch_size):
        src_len = max(1, source_length - 2 * row)
        tgt_len = max(1, target_length - row)
        input_ids[row, src_len - 1] = 2
        input_ids[row, src_len:] = 0
        attention_mask[row, src_len:] = 0
        labels[row, tgt_len - 1] = 2
        labels[row, tgt_len:] = -100
    input_ids[0, -1] = 2
    labels[0, -1] = 2
    return input_ids, attention_mask, labels


def record_packed_rows(monkeypatch) -> list[int]:
    """The number of rows each stack packs from now on (`Padding.of_stack`), in the order the stacks run."""
    rows, of_stack = [], Padding.of_stack

    def recording_of_stack(*args, **kwargs):
        padding = of_stack(*args, **kwargs)
        rows.append(len(padding.index))
        return padding

    monkeypatch.setattr(Padding, "of_stack", recording_of_stack)
    return rows


SENTENCES = [  # German, English, German, English, ...
    "Wer hat dir das gegeben?",
    "Who gave this to you?",
    "Ich habe Hunger.",
    "I am hungry.",
    "Tom ist nicht hier.",
    "Tom is not here.",
    "Das Wetter ist heute schön.",
    "The weather is nice today.",
    "Wo ist der Bahnhof?",
    "Where is the train station?",
    "Kannst du mir helfen?",
    "Can you help me?",
]


def tiny_tokenizer(vocab_size: int = 120, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Special tokens <pad>=0, <s>=1, </s>=2, <unk>=3 (the model's defaults); every encoding ends with </s>."""
    return train_shared_bpe_tokenizer(SENTENCES, vocab_size, model_max_length, min_frequency=1)


DEMO_SENTENCES = ["Wo ist der Bahnhof?", "Ich habe heute keine Zeit.", "Das Wetter ist schön.", "Tom ist müde."]
_FOLDER = tempfile.TemporaryDirectory(prefix="tiny-translator-")  # removed when the test process exits


def short_pairs(limit: int = 2000, max_words: int = 6) -> list[tuple[str, str]]:
    pairs = []
    with open(BUNDLED_CORPUS / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            pair = json.loads(line)["translation"]
            if len(pair["de"].split()) <= max_words:
                pairs.append((pair["de"], pair["en"]))
            if len(pairs) == limit:
                break
    return pairs


@functools.cache
def tiny_translator_dir(steps: int = 60) -> Path:
    """A saved model folder (weights, config, tokenizer) trained with Adam for `steps` batches of 32 short pairs."""
    return _train(steps)


def _train(steps: int) -> Path:
    torch.manual_seed(0)
    pairs = short_pairs()
    tokenizer = train_shared_bpe_tokenizer((text for pair in pairs for text in pair), vocab_size=400)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **SMALL_TRANSLATOR)
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    model.train()
    for step in range(steps):
        batch = [pairs[(step * 32 + i) % len(pairs)] for i in range(32)]
        inputs = tokenizer([de for de, _ in batch], padding=True, return_tensors="pt", return_token_type_ids=False)
        labels = tokenizer(text_target=[en for _, en in batch], padding=True, return_tensors="pt")["input_ids"]
        labels[labels == tokenizer.pad_token_id] = -100
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    model.generation_config.max_new_tokens = 24  # keeps an undertrained model from rambling for 127 tokens
    folder = Path(_FOLDER.name) / f"steps-{steps}"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def copy_attention(ours, mha: torch.nn.MultiheadAttention):
    """Copy an `nn.MultiheadAttention`'s weights into one of our attention modules."""
    q, k, v = mha.in_proj_weight.chunk(3)
    qb, kb, vb = mha.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, q, qb), (ours.k_proj, k, kb), (ours.v_proj, v, vb), (ours.out_proj, None, None)):
        proj.weight.data.copy_(w if w is not None else mha.out_proj.weight)
        proj.bias.data.copy_(b if b is not None else mha.out_proj.bias)


def copy_feed_forward(ours, ref):
    """Copy an `nn.TransformerEncoderLayer`'s / `DecoderLayer`'s feed-forward weights into one of our layers."""
    ours.fc1.load_state_dict(ref.linear1.state_dict())
    ours.fc2.load_state_dict(ref.linear2.state_dict())


# ------------------------------------------------------------------------------------------- the training command

PAIRS = [
    ("Guten Morgen!", "Good morning!"),
    ("Ich bin müde.", "I am tired."),
    ("Wo ist Tom?", "Where is Tom?"),
    ("Das ist gut.", "That is good."),
    ("Ich liebe dich.", "I love you."),
    ("Es regnet.", "It is raining."),
    ("Danke schön.", "Thank you."),
    ("Komm her!", "Come here!"),
]
# A tiny translator for `train translation` runs that take seconds.
TINY_MODEL = [
    "--d_model", "32", "--ffn_dim", "64", "--attention_heads", "2", "--encoder_layers", "1", "--decoder_layers", "1",
    "--vocab_size", "120", "--max_train_minutes", "0", "--bf16", "False",
]  # fmt: skip


def write_jsonl(path, pairs) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for de, en in pairs:
            f.write(json.dumps({"translation": {"de": de, "en": en}}, ensure_ascii=False) + "\n")
    return str(path)


def run_training(*args) -> int:
    """`hf-vanilla-transformer train translation ARGS` in this process; a user's mistake raises its `InputError`."""
    from hf_vanilla_transformer.recipes.translation import main

    return main([str(arg) for arg in args])


@contextlib.contextmanager
def interrupted_at(step: int):
    """`run_training` within receives SIGTERM after training step `step`, as from a scheduler: the run stops there
    with its checkpoint, planned for all its steps (a schedule that anneals by the last step depends on them)."""
    from transformers import TrainerCallback

    from hf_vanilla_transformer.recipes import translation

    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                os.kill(os.getpid(), signal.SIGTERM)

    original = translation.TranslationTrainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(Interrupt())  # before the recipe's stop, which reads the signal after the step

    with mock.patch.object(translation.TranslationTrainer, "__init__", init):
        yield


def logged_losses(run_dir) -> dict[int, float]:
    """Step -> training loss, from a run's `trainer_state.json`."""
    history = json.loads((Path(run_dir) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def run_command(*argv, cwd=None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`hf-vanilla-transformer ARGV` in a new process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "hf_vanilla_transformer", *map(str, argv)],
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ------------------------------------------------------------------------------------ a process without the package

WITHOUT_PACKAGE = textwrap.dedent(
    """
    import sys
    sys.modules["hf_vanilla_transformer"] = None  # the package is not installed here
    """
)


def run_without_package(script: str, *args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `script` with `args` in a Python process where `hf_vanilla_transformer` cannot be imported (as on a
    machine without it), offline, with a Hub cache of its own under `cwd`."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(Path(cwd) / "hf_home"), "PYTHONPATH": ""}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE + textwrap.dedent(script), *map(str, args)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------------------------- headless Chromium

# These flags work on a machine without a GPU or network: without the networking ones, Chromium's own background
# connections are refused by a closed network and it stalls.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
]
BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
SETUP = "bash scripts/setup.sh --dev"


def require_chromium() -> tuple[str, str]:
    """(browser, chromedriver), or skip the test saying how to install them."""
    pytest.importorskip("selenium", reason=f"selenium is in the `dev` extra: {SETUP}")
    browser, driver = next(filter(None, map(shutil.which, BROWSERS)), None), shutil.which("chromedriver")
    if not (browser and driver):
        pytest.skip(
            f"Chromium and chromedriver are not installed: `{SETUP}` installs them (Debian's chromium and "
            "chromium-driver); or `sudo apt-get install chromium chromium-driver`, or put Chromium or Chrome and the "
            "matching chromedriver on the PATH."
        )
    return browser, driver


def require_transformers_js() -> Path:
    """The folder of the pinned transformers.js npm install, or skip the test saying how to install it."""
    from hf_vanilla_transformer.interop.onnx_runtime import transformers_js_folder

    folder = transformers_js_folder()
    if folder is None:
        pytest.skip(f"transformers.js is not installed: `{SETUP}` installs it with npm (Node.js and npm needed).")
    return folder


@contextlib.contextmanager
def chrome():
    """A headless Chromium session with a fresh profile; it records the network requests of the pages it opens."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        session = webdriver.Chrome(service=Service(driver), options=options)
        try:
            yield session
        finally:
            session.quit()


def requested_urls(session) -> list[str]:
    """The URLs the browser has requested since the last call (from Chromium's performance log)."""
    urls = []
    for entry in session.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def static_server(directory):
    """Serve `directory` on a free port of 127.0.0.1; yields the base URL."""

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_translate_mjs(request: dict) -> dict:
    """`interop/translate.mjs` under Node with the JSON `request` (see its header), beside the pinned transformers.js
    (skips the test without it); returns its JSON answer."""
    from hf_vanilla_transformer.interop.onnx_runtime import TRANSLATE_SCRIPT

    folder = require_transformers_js()
    script = folder / TRANSLATE_SCRIPT.name  # ES modules resolve packages from the script's own folder
    shutil.copyfile(TRANSLATE_SCRIPT, script)
    result = subprocess.run(["node", str(script)], input=json.dumps(request), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def run_distributed(*args, processes: int = 2, timeout: float = 600) -> subprocess.CompletedProcess:
    """`hf-vanilla-transformer train translation ARGS` in `processes` CPU processes over gloo (torch.distributed.run),
    one thread each."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "hf_vanilla_transformer", "train", "translation"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [*command, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def logged(run_dir, key: str) -> dict[int, float]:
    """Step -> the logged value of `key` (e.g. "loss", "target_tokens_per_update"), from `trainer_state.json`."""
    history = json.loads((Path(run_dir) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry}


# --------------------------------------------------------------------------------------------------------- GPUs

# The host synchronisations of one training step (forward and backward of a padded batch), each finding the real tokens
# of a padded mask: the encoder's (source) and the decoder's (target). tests/model pins it on the CPU; tests/gpu counts
# it on CUDA.
HOST_READS_PER_TRAINING_STEP = 2
NO_CUDA = (
    "CUDA is not available (no NVIDIA GPU, or a CPU-only torch build): the GPU tests run on a GPU machine, "
    "with `python -m scripts.gpu_acceptance` (docs/gpu.md)"
)
# The marks of every test in tests/gpu: selected by `-m cuda`, skipped without CUDA.
CUDA_TESTS = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]


def require_bf16() -> None:
    """Skip, saying why, on a GPU without bf16 (compute capability below 8.0)."""
    if not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip(f"{torch.cuda.get_device_name()} has no bf16 (compute capability below 8.0)")


# ----------------------------------------------------------------------------------------------- the HTTP server


@functools.cache
def serving_model_dir() -> Path:
    """A tiny model trained to translate the six German sentences of `SENTENCES` (80 Adam steps, about a second),
    decoding with beam 4 and length penalty 0.6, its folder recording German -> English as training does."""
    from types import SimpleNamespace

    from hf_vanilla_transformer.data.trained_on import record_trained_on

    german, english = SENTENCES[0::2], SENTENCES[1::2]
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **{**SMALL_TRANSLATOR, "d_model": 32})
    model = VanillaTransformerForConditionalGeneration(config)
    batch = tokenizer(german, text_target=english, padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(80):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.generation_config = config.paper_generation_config(max_length=24)
    languages = dict(source_lang="de", target_lang="en", max_source_length=None, max_target_length=None)
    record_trained_on(model.generation_config, SimpleNamespace(**languages))
    folder = Path(_FOLDER.name) / "serving"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class ServerProcess:
    """`hf-vanilla-transformer serve ARGS` (or `python -m MODULE ARGS`) on a free loopback port, output in `log`."""

    def __init__(self, *args, log: Path, module: str = "hf_vanilla_transformer", env: dict | None = None):
        self.port, self.log = free_port(), Path(log)
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", module, *(["serve"] if module == "hf_vanilla_transformer" else [])]
        command += [*map(str, args), "--port", str(self.port)]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        with open(self.log, "wb") as output:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
            )

    def wait_ready(self, limit: float = 300) -> "ServerProcess":
        """Until `GET /health` answers 200 (a bound against a hung start, not a timing the test depends on)."""
        import time

        import httpx

        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.output()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not start:\n{self.output()[-3000:]}")

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=120)


@contextlib.contextmanager
def running_server(*args, **kwargs):
    """A `ServerProcess`, ready, stopped at the end."""
    server = ServerProcess(*args, **kwargs)
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def default_sigint() -> None:
    """`subprocess.Popen(preexec_fn=default_sigint)`: the child takes Ctrl-C as from a terminal, whatever this process
    inherited (a shell starts a background job with SIGINT ignored, and Python then keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
