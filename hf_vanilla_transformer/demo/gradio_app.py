"""A Gradio page for a trained translator: text in, translation out, the n-best list and the attention heatmaps.

Text is translated as the translate command translates it: each line split into sentences (a checkbox turns that
off), sentences longer than the model was trained on into pieces, in token-budget batches, joined back line by line.
The heatmap shows one piece at a time, chosen from a list of them.

    demo = build_demo("outputs/demo-de-en"); demo.launch()     # or: hf-vanilla-transformer demo --model ...
    write_space("outputs/demo-de-en", "space/")                 # a folder ready to upload as a Hugging Face Space

The source box, the button and the translation have the element ids `source`, `translate` and `target`, like the
no-server page, so that browser tests drive both the same way. Requests are queued and run one at a time: the model is
shared, and `attention_maps` switches its attention implementation while it runs.
"""

import io
import re
import shutil
import unicodedata
from importlib import metadata
from pathlib import Path

from ..data.folders import (
    check_translation_folder,
    load_tokenizer,
    load_translation_model,
    model_files,
    resolve_model,
    writes_folder,
)
from ..data.glossary import Glossary
from ..errors import InputError, import_extra
from ..translate.options import DecodeOptions
from ..translate.translator import load_translator
from .attention import AttentionMaps, attention_maps, plot_attention, save_figure


EXAMPLES = [
    "Wo ist der Bahnhof?",
    "Ich habe heute keine Zeit.",
    "Tom hat gestern ein neues Fahrrad gekauft.",
    "Kannst du mir bitte helfen?",
    "Das Wetter ist heute sehr schön.",
]
MAX_CHARACTERS = 2000  # a few paragraphs; longer texts belong to the translate command
MAX_BEAMS = 8
AVERAGE = "average"
KIND_LABELS = {"cross-attention": "cross", "encoder self-attention": "encoder", "decoder self-attention": "decoder"}


def check_text(text) -> str | None:
    """Why `text` cannot be translated, as a message for the page, or None when it can."""
    if not isinstance(text, str):
        return f"Please send text: got {type(text).__name__}."
    if not text.strip():
        return "Please type a German sentence to translate."
    if any(unicodedata.category(c) in ("Cc", "Cs") and not c.isspace() for c in text):
        return "The text contains control characters (binary data?): please send plain text."
    if not any(c.isalnum() for c in text):
        return "The text has no letters or digits: please type a German sentence."
    if len(text) > MAX_CHARACTERS:
        return f"The text is too long ({len(text)} characters; at most {MAX_CHARACTERS}): please shorten it."
    return None


def glossary_of(text: str | None) -> Glossary | None:
    """The glossary box's terms, `source = target` (or a tab between) a line; None where it is empty."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    rows = []
    for number, line in enumerate(lines, 1):
        pair = line.split("\t", 1) if "\t" in line else line.split("=", 1)
        if len(pair) != 2:
            raise InputError(f"Glossary, line {number}: write a German term, '=' and its English term.")
        rows.append((f"Glossary, line {number}", pair))
    return Glossary.checked(rows, ignore_case=False, name="Glossary")


def heatmap_image(maps: AttentionMaps | None, kind_label: str, layer: str, head: str):
    """The selected map as a PIL image (None without a translation); `layer`/`head` are "average" or 1-based."""
    if maps is None:
        return None
    from PIL import Image

    def index(choice):
        return None if choice in (None, AVERAGE) else int(choice) - 1

    buffer = io.BytesIO()
    save_figure(plot_attention(maps, KIND_LABELS[kind_label], index(layer), index(head)), buffer)
    buffer.seek(0)
    return Image.open(buffer)


def build_demo(model_dir: str, examples: list[str] | None = None, title: str | None = None):
    """The page (a `gr.Blocks`, queued) for the model and tokenizer in `model_dir` (a folder or a Hub id)."""
    gr = import_extra("gradio", "demo", "The demo page")

    model = load_translation_model(model_dir).eval()
    tokenizer = load_tokenizer(model_dir)
    translator = load_translator(model, tokenizer=tokenizer, device=str(model.device))  # once, for every click
    default_beams = min(model.generation_config.num_beams or 1, MAX_BEAMS)
    config = model.config
    sizes = {
        "encoder": (config.encoder_layers, config.encoder_attention_heads),
        "decoder": (config.decoder_layers, config.decoder_attention_heads),
        "cross": (config.decoder_layers, config.decoder_attention_heads),
    }

    def choices(kind: str) -> tuple[list[str], list[str]]:
        return tuple([AVERAGE] + [str(i + 1) for i in range(size)] for size in sizes[kind])

    def select_kind(kind_label):
        layers, heads = choices(KIND_LABELS[kind_label])
        return gr.Dropdown(choices=layers, value=AVERAGE), gr.Dropdown(choices=heads, value=AVERAGE)

    title = title or f"Translate with {Path(str(model_dir)).name}"

    def maps_of(piece, num_beams, kind_label, layer, head):
        maps = attention_maps(model, tokenizer, piece, num_beams=int(num_beams), do_sample=False)
        return heatmap_image(maps, kind_label, layer, head), maps

    def translate(text, num_beams, n_best, split_sentences, glossary, kind_label, layer, head):
        problem = check_text(text)
        try:
            glossary = glossary_of(glossary)
        except InputError as error:
            problem = problem or str(error)
        if problem is not None:
            return "", "", None, None, gr.Dropdown(choices=[], value=None), problem
        num_beams, n_best = int(num_beams), int(n_best)
        notes = []
        if n_best > num_beams:
            notes.append(f"Showing {num_beams} alternatives: the n-best list cannot be longer than the beam.")
            n_best = num_beams
        options = DecodeOptions(
            num_beams=num_beams, do_sample=False, nbest=n_best, split_sentences=split_sentences, glossary=glossary
        )
        lines = text.split("\n")
        try:
            translations = translator.translate(lines, options, scores=False)
        except InputError as error:  # a glossary's term that the model cannot write
            return "", "", None, None, gr.Dropdown(choices=[], value=None), str(error)
        missing = sorted({term for t in translations for h in t.hypotheses[:1] for term in h.missing_terms})
        if missing:
            notes.append(f"Not in the translation, for want of room: {', '.join(missing)}.")
        encoded = translator.encode(lines, options)  # the pieces the model saw, to choose one for the heatmap
        pieces, split = (
            [piece for line in encoded for piece in line.texts],
            sum(line.split_sentences for line in encoded),
        )
        if split:
            notes.append(
                f"{split} sentence(s) longer than the {translator.max_source_tokens} tokens the model takes were "
                "split at clause punctuation (or between words)."
            )
        target = "\n".join(t.hypotheses[0].text if t.hypotheses else "" for t in translations)
        ranked = [" ".join(t.hypotheses[k].text for t in translations if t.hypotheses) for k in range(n_best)]
        alternatives = "\n".join(f"{rank}. {candidate}" for rank, candidate in enumerate(ranked, 1))
        choices = [(f"{i}. {piece}", piece) for i, piece in enumerate(pieces, 1)]
        heatmap, maps = maps_of(pieces[0], num_beams, kind_label, layer, head)
        sentence = gr.Dropdown(choices=choices, value=pieces[0], interactive=len(pieces) > 1)
        return target, alternatives, heatmap, maps, sentence, " ".join(notes)

    with gr.Blocks(title=title) as demo:
        gr.Markdown(f"# {title}\nGerman in, English out, with the attention behind each translation.")
        maps_state = gr.State(None)
        with gr.Row():
            with gr.Column():
                source = gr.Textbox(label="German", lines=3, elem_id="source", placeholder=EXAMPLES[0])
                with gr.Row():
                    num_beams = gr.Slider(
                        1, MAX_BEAMS, value=default_beams, step=1, label="beam size", elem_id="num_beams"
                    )
                    n_best = gr.Slider(1, MAX_BEAMS, value=1, step=1, label="n-best", elem_id="num_return_sequences")
                split_sentences = gr.Checkbox(
                    value=True,
                    label="translate sentence by sentence (uncheck for one sentence, translated as a whole)",
                    elem_id="split_sentences",
                )
                glossary = gr.Textbox(
                    label="glossary: one term a line, German = English (the translation uses these words)",
                    lines=2,
                    elem_id="glossary",
                    placeholder="Bahnhof = railway station",
                )
                button = gr.Button("Translate", variant="primary", elem_id="translate")
                message = gr.Markdown(elem_id="message")
                target = gr.Textbox(label="English", lines=2, elem_id="target", interactive=False)
                alternatives = gr.Textbox(label="n-best", lines=2, elem_id="n_best", interactive=False)
                gr.Examples(examples=[[e] for e in examples or EXAMPLES], inputs=[source], label="Examples")
            with gr.Column():
                sentence = gr.Dropdown(choices=[], label="sentence", elem_id="sentence", interactive=False)
                kind = gr.Radio(list(KIND_LABELS), value="cross-attention", label="attention")
                with gr.Row():
                    layer = gr.Dropdown(choices("cross")[0], value=AVERAGE, label="layer")
                    head = gr.Dropdown(choices("cross")[1], value=AVERAGE, label="head")
                heatmap = gr.Image(label="attention", type="pil", elem_id="heatmap", interactive=False, format="png")

        inputs = [source, num_beams, n_best, split_sentences, glossary, kind, layer, head]
        outputs = [target, alternatives, heatmap, maps_state, sentence, message]
        gr.on([button.click, source.submit], translate, inputs, outputs, api_name="translate", concurrency_id="model")
        # Switching what to show redraws the stored maps; the model does not run again.
        redraw = dict(
            fn=heatmap_image, inputs=[maps_state, kind, layer, head], outputs=heatmap, api_visibility="private"
        )
        # Another piece: the model runs again, for its attention.
        sentence.input(
            maps_of,
            [sentence, num_beams, kind, layer, head],
            [heatmap, maps_state],
            api_visibility="private",
            concurrency_id="model",
        )
        kind.change(select_kind, kind, [layer, head], api_visibility="private").then(**redraw)
        layer.change(**redraw)
        head.change(**redraw)
    demo.queue(default_concurrency_limit=1)
    return demo


def launch(model_dir: str, host: str = "127.0.0.1", port: int | None = None, **launch_kwargs):
    """Serve the page on http://host:port (Gradio picks a free port from 7860 when `port` is None) and return the
    `gr.Blocks`; this blocks until the server stops unless `prevent_thread_lock=True` is passed."""
    demo = build_demo(model_dir)
    demo.launch(server_name=host, server_port=port, **launch_kwargs)
    return demo


SPACE_APP = """\
# A Hugging Face Space serving {model} with the hf_vanilla_transformer Gradio demo (generated by write_space).
from hf_vanilla_transformer.demo.gradio_app import build_demo


demo = build_demo({model!r})

if __name__ == "__main__":
    demo.launch()
"""

SPACE_README = """\
---
title: {title}
emoji: 🌐
colorFrom: blue
colorTo: indigo
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
license: apache-2.0
---

# {title}

German to English translation with the encoder-decoder Transformer of *Attention Is All You Need*
(hf_vanilla_transformer), with the beam's n-best list and the attention heatmaps of each translation.
The model is {where}.
"""


def write_space(
    model_dir: str, output_dir: str, hub_id: str | None = None, title: str | None = None, overwrite: bool = False
) -> Path:
    """Write a folder that runs as a Gradio Space: `app.py`, `requirements.txt`, `README.md` (Space metadata), the
    `hf_vanilla_transformer` package, and the model files in `model/` (or, with `hub_id`, the model's Hub id)."""
    from ..data.corpus import BUNDLED_CORPUS

    import_extra("gradio", "demo", "--write_space (the Space records the Gradio version)")
    gradio_version = metadata.version("gradio")
    if hub_id is None:
        source = Path(resolve_model(model_dir))
        if not source.is_dir():
            raise InputError(f"--model {model_dir} is a Hub id: pass it as --hub_id, or give a local folder.")
        check_translation_folder(str(source))
        model, where = "model", "in the `model/` folder of this Space"
    else:
        model, where = hub_id, f"[{hub_id}](https://huggingface.co/{hub_id}), downloaded when the Space starts"
    title = title or "Vanilla Transformer translator"
    package = Path(__file__).parents[1]  # the Space runs this package's app: all of it but the bundled corpus
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", BUNDLED_CORPUS.name)
    with writes_folder(output_dir, overwrite) as folder:
        if hub_id is None:
            (folder / "model").mkdir()
            for path in model_files(source):  # the model, tokenizer and card, not the trainer's state
                shutil.copy2(path, folder / "model" / path.name)
        shutil.copytree(package, folder / package.name, ignore=ignored)
        (folder / "app.py").write_text(SPACE_APP.format(model=model), encoding="utf-8")
        (folder / "requirements.txt").write_text("\n".join(space_requirements()) + "\n", encoding="utf-8")
        readme = SPACE_README.format(title=title, gradio_version=gradio_version, where=where)
        (folder / "README.md").write_text(readme, encoding="utf-8")
    return Path(output_dir)


# What the Space installs besides Gradio (which comes from the README's sdk_version): what the package needs to run
# the model, in the versions this package declares (and is tested with), not whatever this machine has installed.
SPACE_REQUIREMENTS = ("torch", "transformers", "tokenizers", "safetensors", "matplotlib")


def space_requirements() -> list[str]:
    """`SPACE_REQUIREMENTS` with the version ranges of this package's own requirements."""
    try:
        requires = metadata.requires("hf-vanilla-transformer") or []
    except metadata.PackageNotFoundError:  # run from a source checkout that is not installed: its pyproject.toml
        pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
        requires = re.findall(r'"([^"]+)"', pyproject.split("dependencies = [", 1)[1].split("]", 1)[0])
    declared = {}
    for requirement in requires:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)[0]
        if ";" not in requirement:  # not an extra's
            declared[name.lower()] = requirement.replace(" ", "")
    return [declared.get(name, name) for name in SPACE_REQUIREMENTS]


__all__ = ["EXAMPLES", "build_demo", "check_text", "heatmap_image", "launch", "write_space"]
