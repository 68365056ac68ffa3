"""`hf-vanilla-transformer demo`, `web-page` and `plot {attention,positional-encoding}`."""

from ..errors import CommandParser, check_minimums, import_extra


def demo(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Serve the Gradio translation page for a trained model (text in, translation, n-best list and "
        "attention heatmaps out), or write it as a folder ready to upload as a Hugging Face Space. Needs the `demo` "
        "extra: pip install 'hf-vanilla-transformer[demo]'.",
    )
    parser.add_argument("--model", required=True, help="a trained model folder (or a Hub id) with its tokenizer")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, help="port (default: the first free one from 7860)")
    parser.add_argument("--write_space", action="store_true", help="write a Space folder to --output_dir and exit")
    parser.add_argument("--output_dir", help="with --write_space: a new (or empty) folder for the Space")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    parser.add_argument("--hub_id", help="with --write_space: the Space loads the model from this Hub repository")
    args = parser.parse_args(argv)
    if args.write_space != (args.output_dir is not None):
        parser.error("--write_space and --output_dir go together: the Space is written there.")
    if args.hub_id and not args.write_space:
        parser.error("--hub_id only applies with --write_space.")
    from .gradio_app import launch, write_space

    if args.write_space:
        folder = write_space(args.model, args.output_dir, hub_id=args.hub_id, overwrite=args.overwrite)
        print(f"Wrote a Gradio Space to {folder}: upload it with `hf upload SPACE_ID {folder} --repo-type space`.")
        return 0
    launch(args.model, host=args.host, port=args.port)
    return 0


def web_page(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Build a page that translates in the browser with no server: the model exported to ONNX, run by "
        "transformers.js. Needs the `export` extra and npm (it installs the pinned transformers.js once into "
        "$HF_VANILLA_TRANSFORMER_CACHE, default ~/.cache/hf_vanilla_transformer). Serve the folder with any static "
        "file server, e.g. `python -m http.server -d FOLDER 8000`.",
    )
    parser.add_argument("--model", required=True, help="a trained model folder with its tokenizer")
    parser.add_argument("--output_dir", required=True, help="a new (or empty) folder for the page")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    parser.add_argument(
        "--max_new_tokens",
        type=int,
        help="generation length (default: the model's, else the paper's source length + 50 for each batch)",
    )
    parser.add_argument("--title", default="German to English, in your browser")
    args = parser.parse_args(argv)
    check_minimums({"max_new_tokens": 1}, args)
    from ..interop.command import EXTRA_MODULES

    for module in EXTRA_MODULES["onnx"]:
        import_extra(module, "export", "web-page (the ONNX export)")
    from .web_page import build_web_page

    folder = build_web_page(
        args.model, args.output_dir, title=args.title, max_new_tokens=args.max_new_tokens, overwrite=args.overwrite
    )
    print(f"Wrote the page to {folder}: serve it, e.g. `python -m http.server -d {folder} 8000`.")
    return 0


def plot(argv: list[str], prog: str) -> int:
    parser = CommandParser(prog=prog, description="Draw what the model computes, as PNG files.")
    pictures = parser.add_subparsers(dest="picture", required=True, metavar="PICTURE", parser_class=CommandParser)
    attention = pictures.add_parser(
        "attention",
        help="the attention of every layer and head while the model translates a sentence",
        description="For each of encoder self-attention, decoder self-attention and cross-attention, write "
        "<kind>_attention.png (every layer and head) and <kind>_attention_average.png (averaged), tokens on the axes.",
    )
    attention.add_argument("--model", required=True, help="a trained model folder (or Hub id) with its tokenizer")
    attention.add_argument("--text", required=True, help="the sentence to translate")
    attention.add_argument("--output_dir", required=True, help="a new (or empty) folder for the PNG files")
    attention.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    attention.add_argument("--num_beams", type=int, help="beam size (default: the model's own setting)")
    attention.add_argument("--dpi", type=int, default=90)
    encoding = pictures.add_parser(
        "positional-encoding",
        help="the sinusoidal positional encoding (section 3.5)",
        description="Left: the position x dimension picture; right: a few dimensions as curves over the positions.",
    )
    encoding.add_argument("--output", required=True, help="the PNG file to write")
    encoding.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    encoding.add_argument("--d_model", type=int, default=256, help="model width (the demo model's by default)")
    encoding.add_argument("--positions", type=int, default=100, help="number of positions to draw")
    encoding.add_argument("--dimensions", type=int, nargs="+", help="dimensions to draw as curves")
    encoding.add_argument("--dpi", type=int, default=80)
    args = parser.parse_args(argv)
    check_minimums({"num_beams": 1, "dpi": 1}, args)
    if args.picture == "positional-encoding":
        from ..data.folders import check_output_file
        from .attention import save_figure
        from .positional_encoding import plot_positional_encoding

        output = check_output_file(args.output, args.overwrite)
        figure = plot_positional_encoding(args.d_model, args.positions, args.dimensions)
        output.parent.mkdir(parents=True, exist_ok=True)
        save_figure(figure, output, dpi=args.dpi)
        print(f"Wrote {output}")
        return 0
    from .attention import write_attention_pictures

    translation, paths = write_attention_pictures(
        args.model, args.text, args.output_dir, num_beams=args.num_beams, dpi=args.dpi, overwrite=args.overwrite
    )
    print(f"{args.text}\n  -> {translation}")
    for path in paths:
        print(f"Wrote {path}")
    return 0
