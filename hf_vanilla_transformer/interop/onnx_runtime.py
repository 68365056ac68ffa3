"""Greedy translation with the graphs of an exported ONNX folder (`export_onnx`) on ONNX Runtime, and the same folder
under Node with transformers.js.

The decoding loop feeds the merged decoder the way transformers.js does: the first step with `use_cache_branch`
false and empty caches, then one token at a time from the cache, keeping the cross-attention keys and values of the
first step. Its output is `generate(num_beams=1, do_sample=False)`'s: the decoder start token, then one greedy token
per step, finished rows padded with the pad token.
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime
from transformers import AutoTokenizer

from ..data.folders import cache_root
from ..data.trained_on import token_ids
from .onnx import DECODER_FILE, ENCODER_FILE, QUANTIZED_SUFFIX


TRANSFORMERS_JS_VERSION = "4.3.1"
TRANSLATE_SCRIPT = Path(__file__).with_name("translate.mjs")


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


class OnnxSeq2SeqLM:
    """The encoder and merged decoder of an ONNX folder as one translator.

    Args:
        folder: the output of `export_onnx`.
        quantized: run the int8 graphs `onnx/*_quantized.onnx` instead of the float32 ones.
        num_threads: ONNX Runtime's intra-op threads (its default: one per physical core).
    """

    def __init__(self, folder: str | Path, quantized: bool = False, num_threads: int | None = None):
        self.folder = Path(folder)
        suffix = QUANTIZED_SUFFIX if quantized else ""
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
        sessions = []
        for name in (ENCODER_FILE, DECODER_FILE):
            path = self.folder / "onnx" / name.replace(".onnx", f"{suffix}.onnx")
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} does not exist: export the folder with export_onnx(..."
                    + (", quantize=True)" if quantized else ")")
                    + "."
                )
            sessions.append(onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"]))
        self.encoder, self.decoder = sessions
        # generate() reads the token ids from the generation config first.
        config = {**_read_json(self.folder / "config.json"), **_read_json(self.folder / "generation_config.json")}
        self.decoder_start_token_id = config["decoder_start_token_id"]
        self.pad_token_id = config["pad_token_id"]
        eos = config["eos_token_id"]
        self.eos_token_ids = np.array(token_ids(eos))
        self._tokenizer = None

    def _empty_cache(self, batch_size: int) -> dict[str, np.ndarray]:
        """Zero-length caches for the first step, shaped from the graph (as transformers.js does)."""
        return {
            i.name: np.zeros(
                [batch_size if d == "batch_size" else d if isinstance(d, int) else 0 for d in i.shape], np.float32
            )
            for i in self.decoder.get_inputs()
            if i.name.startswith("past_key_values.")
        }

    def generate(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray | None = None,
        max_new_tokens: int = 256,
        min_new_tokens: int = 0,
    ) -> np.ndarray:
        """(b, 1 + n) greedy ids for (b, s) source ids: decoder start, up to `max_new_tokens` tokens, stopping when
        every row has produced EOS; EOS is not chosen before `min_new_tokens` tokens (as in transformers)."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        if input_ids.ndim != 2:
            raise ValueError(f"`input_ids` must have shape (batch_size, sequence_length), got {input_ids.shape}.")
        attention_mask = np.ones_like(input_ids) if attention_mask is None else np.asarray(attention_mask, np.int64)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"`attention_mask` must have the shape of `input_ids` {input_ids.shape}, got {attention_mask.shape}."
            )
        batch_size = input_ids.shape[0]
        (encoder_hidden_states,) = self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        feeds = {
            "encoder_attention_mask": attention_mask,
            "encoder_hidden_states": encoder_hidden_states,
            "use_cache_branch": np.array([False]),
            **self._empty_cache(batch_size),
        }
        tokens = np.full((batch_size, 1), self.decoder_start_token_id, dtype=np.int64)
        finished = np.zeros(batch_size, dtype=bool)
        output_names = [o.name for o in self.decoder.get_outputs()]
        for step in range(max_new_tokens):
            outputs = dict(zip(output_names, self.decoder.run(None, {**feeds, "input_ids": tokens[:, -1:]})))
            logits = outputs["logits"][:, -1]  # (b, v)
            if step < min_new_tokens:
                logits[:, self.eos_token_ids] = -np.inf
            next_tokens = np.where(finished, self.pad_token_id, logits.argmax(-1))
            tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
            finished |= np.isin(next_tokens, self.eos_token_ids)
            if finished.all():
                break
            for name, value in outputs.items():
                # On cached steps the cross-attention entries are empty placeholders: the first step's stay.
                if name.startswith("present.") and (step == 0 or ".decoder." in name):
                    feeds[name.replace("present.", "past_key_values.", 1)] = value
            feeds["use_cache_branch"] = np.array([True])
        return tokens

    @property
    def tokenizer(self):
        """The folder's tokenizer, loaded on first use (a folder exported without one still decodes token ids)."""
        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        return self._tokenizer

    def translate(self, texts: list[str], batch_size: int = 32, max_new_tokens: int = 256) -> list[str]:
        """Greedy translations of `texts` with the folder's tokenizer, in batches (right padding)."""
        translations = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                texts[start : start + batch_size], padding=True, truncation=True, return_tensors="np"
            )
            ids = self.generate(batch["input_ids"], batch["attention_mask"], max_new_tokens)
            translations += self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        return translations


def _transformers_js_home() -> Path:
    return cache_root() / f"transformers-js-{TRANSFORMERS_JS_VERSION}"


def transformers_js_folder() -> Path | None:
    """The folder of the pinned transformers.js if `install_transformers_js` has installed it, else None."""
    folder = _transformers_js_home()
    installed = (folder / "node_modules" / "@huggingface" / "transformers" / "package.json").is_file()
    return folder if installed else None


def install_transformers_js(timeout: float = 900) -> Path:
    """Install the pinned `@huggingface/transformers` with npm into the package's cache folder ([`cache_root`]; once,
    later calls reuse it) and return that folder.

    `--ignore-scripts`: the install script of `onnxruntime-node` downloads optional GPU binaries from outside the npm
    registry; the CPU runtime is inside the npm package and needs no script.
    """
    folder = _transformers_js_home()
    if transformers_js_folder() is None:
        if shutil.which("npm") is None:
            raise RuntimeError("npm is not installed: transformers.js needs Node.js and npm.")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text(json.dumps({"private": True, "type": "module"}) + "\n")
        command = [
            "npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--save-exact",
            f"@huggingface/transformers@{TRANSFORMERS_JS_VERSION}",
        ]  # fmt: skip
        result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout)
        if result.returncode:
            raise RuntimeError(f"`{' '.join(command)}` failed in {folder}:\n{result.stderr[-3000:]}")
    return folder


def transformers_js_generate(
    folder: str | Path, texts: list[str], max_new_tokens: int = 256, dtype: str = "fp32"
) -> list[list[int]]:
    """Greedy ids (decoder start first) for each of `texts` from transformers.js under Node, reading only the files of
    `folder` (an `export_onnx` folder of model_type "marian"); `dtype="q8"` runs the quantized graphs."""
    modules = install_transformers_js()
    # ES modules resolve packages from the script's own folder, so the script runs from beside node_modules.
    script = modules / TRANSLATE_SCRIPT.name
    shutil.copyfile(TRANSLATE_SCRIPT, script)
    request = {"model": str(Path(folder).resolve()), "texts": texts, "max_new_tokens": max_new_tokens, "dtype": dtype}
    result = subprocess.run(["node", str(script)], input=json.dumps(request), capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"transformers.js failed on {folder}:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)["ids"]
