"""`hf-vanilla-transformer publish`: a trained folder to the Hugging Face Hub, with its model card."""

from ..errors import CommandParser


def main(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Publish a trained model folder to the Hugging Face Hub: safetensors weights, tokenizer, the code "
        "files and a model card generated from its run report. Log in first (`hf auth login`) or set HF_TOKEN. "
        "Prints the commit to pin as `revision`.",
    )
    parser.add_argument("--model", required=True, help="a trained model folder")
    parser.add_argument("--repo_id", required=True, help="ORG/NAME of the Hub model repository")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument(
        "--dry_run", action="store_true", help="write the folder that would be uploaded to --output_dir and stop"
    )
    parser.add_argument("--output_dir", help="with --dry_run: a new (or empty) folder for what would be published")
    parser.add_argument("--license", default="apache-2.0", help="license of the model weights (a Hub license id)")
    parser.add_argument(
        "--allow_low_bleu", action="store_true", help="publish even if the run report records a test BLEU below 1"
    )
    args = parser.parse_args(argv)
    if args.dry_run != (args.output_dir is not None):
        parser.error("--dry_run and --output_dir go together: --dry_run writes what would be published there.")
    from .publish import publish_to_hub

    result = publish_to_hub(
        args.model,
        args.repo_id,
        private=args.private,
        dry_run=args.output_dir,
        license=args.license,
        allow_low_bleu=args.allow_low_bleu,
    )
    if args.dry_run:
        print(f"Wrote the folder that would be published as {args.repo_id} to {result}")
    else:
        print(f"Published https://huggingface.co/{args.repo_id} at commit {result}: pin it with revision={result!r}")
    return 0
