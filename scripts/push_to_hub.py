"""Publish a trained model folder to the Hugging Face Hub, or write the folder that would be published (--dry_run).

    python scripts/push_to_hub.py --model_dir runs/demo --repo_id ORG/NAME [--private] [--dry_run OUT_DIR]

Log in first (`hf auth login`) or set HF_TOKEN. The weights must be safetensors; the model card is generated from the
folder's metrics.json, and a model whose recorded test BLEU is below 1 is refused unless --allow_low_bleu. Prints the
commit to pin as `revision`, or the staged folder with --dry_run.
"""

import argparse

from hf_vanilla_transformer.errors import exit_on_input_error
from hf_vanilla_transformer.hub import publish_to_hub


@exit_on_input_error
def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", required=True, help="folder written by save_pretrained and the training script")
    parser.add_argument("--repo_id", required=True, help="ORG/NAME of the Hub model repository")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--dry_run", metavar="OUT_DIR", help="write the folder that would be uploaded and stop")
    parser.add_argument("--license", default="apache-2.0", help="license of the model weights (Hub license id)")
    parser.add_argument(
        "--allow_low_bleu", action="store_true", help="publish even if metrics.json records a test BLEU below 1"
    )
    args = parser.parse_args(argv)
    result = publish_to_hub(
        args.model_dir,
        args.repo_id,
        private=args.private,
        dry_run=args.dry_run,
        license=args.license,
        allow_low_bleu=args.allow_low_bleu,
    )
    if args.dry_run:
        print(f"Wrote the folder that would be published as {args.repo_id} to {result}")
    else:
        print(f"Published https://huggingface.co/{args.repo_id} at commit {result}: pin it with revision={result!r}")
    return result


if __name__ == "__main__":
    main()
