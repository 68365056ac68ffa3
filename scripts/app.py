#!/usr/bin/env python
"""The Gradio translation demo (needs the `demo` extra: pip install -e '.[demo]'):

python scripts/app.py --model_dir outputs/demo-de-en [--host 127.0.0.1 --port 7860]   # serve the page
python scripts/app.py --model_dir outputs/demo-de-en --write_space space/             # a folder for a Space
python scripts/app.py --model_dir outputs/demo-de-en --write_space space/ --hub_id ORG/NAME  # model from the Hub
"""

import argparse

from hf_vanilla_transformer.gradio_app import launch, write_space


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="A trained model folder (or a Hub id) with its tokenizer.")
    parser.add_argument("--host", default="127.0.0.1", help="Address to serve on (0.0.0.0: every interface).")
    parser.add_argument("--port", type=int, default=None, help="Port (default: the first free one from 7860).")
    parser.add_argument("--write_space", metavar="OUT", help="Write a Hugging Face Space folder to OUT and exit.")
    parser.add_argument("--hub_id", help="With --write_space: the Space loads the model from this Hub repository.")
    args = parser.parse_args(argv)
    if args.hub_id and not args.write_space:
        parser.error("--hub_id only applies with --write_space.")
    if args.write_space:
        try:
            folder = write_space(args.model_dir, args.write_space, hub_id=args.hub_id)
        except (FileExistsError, FileNotFoundError) as error:
            parser.error(str(error))
        print(f"Wrote a Gradio Space to {folder}: upload it with `hf upload SPACE_ID {folder} --repo-type space`.")
        return
    launch(args.model_dir, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
