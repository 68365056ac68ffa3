"""`hf-vanilla-transformer average`: the mean of the last checkpoints of a training run (paper, section 6.1)."""

from ..errors import CommandParser


def main(argv: list[str], prog: str) -> int:
    parser = CommandParser(
        prog=prog,
        description="Average the weights of the last N checkpoints of a training run into a model folder (the paper "
        "averages the last 5 base-model checkpoints, section 6.1).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="a training run's output folder, holding checkpoint-<step> folders")
    source.add_argument("--checkpoints", nargs="+", help="checkpoint folders to average, given one by one")
    parser.add_argument("--last", type=int, default=5, help="with --run_dir: how many of the latest checkpoints")
    parser.add_argument("--output_dir", required=True, help="a new (or empty) folder for the averaged model")
    parser.add_argument("--overwrite", action="store_true", help="replace what --output_dir holds")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}.")
    from .checkpoints import average_checkpoints, last_checkpoints

    checkpoints = args.checkpoints or last_checkpoints(args.run_dir, args.last)
    output = average_checkpoints(checkpoints, args.output_dir, args.overwrite)
    print(f"Averaged {len(checkpoints)} checkpoints ({', '.join(str(c) for c in checkpoints)}) into {output}")
    return 0
