#!/usr/bin/env python
"""Average the weights of the last N checkpoints of a training run into a normal model folder (paper, section 6.1).

python scripts/average_checkpoints.py --run_dir outputs/demo-de-en --last 5 --output_dir outputs/demo-de-en-avg5
python scripts/average_checkpoints.py --checkpoints run/checkpoint-800 run/checkpoint-1000 --output_dir avg
"""

import argparse

from hf_vanilla_transformer.averaging import average_checkpoints, last_checkpoints
from hf_vanilla_transformer.errors import exit_on_input_error


@exit_on_input_error
def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="Trainer output folder holding checkpoint-<step> folders.")
    source.add_argument("--checkpoints", nargs="+", help="Explicit checkpoint folders to average.")
    parser.add_argument("--last", type=int, default=5, help="With --run_dir: how many of the latest checkpoints.")
    parser.add_argument("--output_dir", required=True, help="Where to write the averaged model.")
    args = parser.parse_args()
    checkpoints = args.checkpoints or last_checkpoints(args.run_dir, args.last)
    output = average_checkpoints(checkpoints, args.output_dir)
    print(f"Averaged {len(checkpoints)} checkpoints ({', '.join(str(c) for c in checkpoints)}) into {output}")


if __name__ == "__main__":
    main()
