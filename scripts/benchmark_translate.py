#!/usr/bin/env python
"""Speed of `hf-vanilla-transformer translate` against plain loops over pipeline("translation"), and the BLEU that
its int8 and CTranslate2 engines give up.

    python -m scripts.benchmark_translate --model outputs/demo-de-en            # 5,000 lines, every system
    python -m scripts.benchmark_translate --model DIR --lines 1000 --systems pipeline translate
    python -m scripts.benchmark_translate --model DIR --device cuda --systems translate translate-static  # a GPU

The German side of the bundled test split, repeated to --lines lines, is translated by each system in a fresh process
(after an untimed warm-up on its first 64 lines; with --repeats, in rotating order, the median reported) with the
model's own decoding settings (beam 4, length penalty 0.6 for this package's trained models). Systems:
- pipeline: a plain loop over `pipeline("translation")`, 32 lines per call in file order, `batch_size=32`;
- pipeline-marian: the same loop with the same model as a MarianMTModel (`interop.marian.to_marian`, same function);
- translate: `translate_file` (what the command runs), PyTorch float32 (--dtype), default batching, lines split into
  sentences, the dynamic cache (`--compile never`);
- translate-static: the same through the static cache (`--compile always`), its decoding step compiled on a GPU (not
  on a CPU). Its warm-up is a whole pass over the input, timed (first_pass_*: compiling every batch shape it meets), so
  that the timed pass runs compiled throughout; compile_seconds is the first pass less the timed one;
- translate-whole-lines: the same with `--no-split_sentences` (each line one sentence, as the pipeline takes it);
- translate-2proc: the same in two processes of one thread each (`accelerate launch`, gloo);
- translate-int8: `--int8`; translate-ct2 / translate-ct2-int8: `--backend ctranslate2`, float32 / int8.
--device cuda runs the translate systems on a GPU (int8 excepted) and the pipeline loops there too.
Reported: sentences per second of the timed translation (model loading excluded), by the wall clock and by the
processes' CPU time (on a shared machine, other users stretch the first but hardly the second; with one thread per
process the two agree on an idle machine), the speed-up over the pipeline loop, the lines identical to its output,
the lines identical to translate's, and BLEU on the test split (the first 1,000 lines) with its change against
translate (float32 PyTorch). The table is followed by the results as one line of JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hf_vanilla_transformer.data.corpus import BUNDLED_CORPUS
from hf_vanilla_transformer.training.report import cpu_model


SYSTEMS = {
    "pipeline": "pipeline loop (32 lines per call, file order)",
    "pipeline-marian": "pipeline loop, MarianMTModel",
    "translate": "translate, PyTorch float32",
    "translate-static": "translate --compile always",
    "translate-whole-lines": "translate --no-split_sentences",
    "translate-2proc": "translate, 2 processes x 1 thread",
    "translate-int8": "translate --int8",
    "translate-ct2": "translate --backend ctranslate2",
    "translate-ct2-int8": "translate --backend ctranslate2 --compute_type int8",
}
REFERENCE, BASELINE = "translate", "pipeline"  # BLEU changes are against the first, speed-ups against the second
WARM_UP = 64


def run_system(system: str, model: str, source: Path, output: Path, device: str = "cpu", dtype="float32") -> dict:
    """Translate `source` into `output` with `system` (in this process); returns the wall-clock and CPU seconds of
    the timed run (CPU: this process's, all its threads; under several processes, the slowest one's), and for
    translate-static those of its first pass."""

    lines = source.read_text(encoding="utf-8").splitlines()
    if system.startswith("pipeline"):
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        import hf_vanilla_transformer  # noqa: F401  (registers the model and the translation pipeline)
        from hf_vanilla_transformer.interop.marian import to_marian

        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForSeq2SeqLM.from_pretrained(model).eval()
        if system == "pipeline-marian":
            loaded = to_marian(loaded)
        translate = pipeline("translation", model=loaded, tokenizer=tokenizer, device=device)

        def loop(batch_lines):
            texts = []
            for i in range(0, len(batch_lines), 32):
                texts += [r["translation_text"] for r in translate(batch_lines[i : i + 32], batch_size=32)]
            return texts

        loop(lines[:WARM_UP])
        start = time.perf_counter(), time.process_time()
        texts = loop(lines)
        seconds = _elapsed(start)
        output.write_text("".join(text.replace("\n", " ") + "\n" for text in texts), encoding="utf-8")
        return seconds
    from hf_vanilla_transformer.translate.options import DecodeOptions
    from hf_vanilla_transformer.translate.translator import load_translator, translate_file, translate_lines

    backend = "ctranslate2" if "ct2" in system else "torch"
    options = DecodeOptions(split_sentences=system != "translate-whole-lines")
    translator = load_translator(
        model,
        backend=backend,
        int8=system.endswith("int8") and backend == "torch",
        compute_type="int8" if system.endswith("int8") and backend == "ctranslate2" else "default",
        device=device,
        dtype=dtype if backend == "torch" and not system.endswith("int8") else "float32",
        compile="always" if system == "translate-static" else "never",
    )
    first_pass = {}
    start = time.perf_counter(), time.process_time()
    list(translate_lines(lines if system == "translate-static" else lines[:WARM_UP], translator, options))
    if system == "translate-static":
        first_pass = {f"first_pass_{clock}": seconds for clock, seconds in _elapsed(start).items()}
    start = time.perf_counter(), time.process_time()
    translate_file([str(source)], str(output), translator, options, quiet=True)
    return {**_elapsed(start), **first_pass}


def _elapsed(start: tuple[float, float]) -> dict:
    import torch

    seconds = torch.tensor([time.perf_counter() - start[0], time.process_time() - start[1]], dtype=torch.float64)
    if torch.distributed.is_initialized():  # several processes: until the last one is done
        torch.distributed.all_reduce(seconds, op=torch.distributed.ReduceOp.MAX)
    return {"wall": seconds[0].item(), "cpu": seconds[1].item()}


def measure(system: str, model: str, source: Path, output: Path, threads: int | None, device: str, dtype: str) -> dict:
    """Run `system` in a fresh process (with `threads` threads); returns its timed seconds (wall, cpu)."""
    command = [sys.executable, __file__, "--model", model, "--run", system, "--source", str(source)]
    command += ["--output", str(output), "--device", device, "--dtype", dtype]
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    if system == "translate-2proc":
        from scripts.ports import free_port  # only here: the child processes run this file as a plain script

        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        launch += ["--main_process_port", str(free_port()), __file__]
        command = launch + command[2:]
        env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def bleu(hypotheses: list[str], references: list[str]) -> float:
    from hf_vanilla_transformer.training.metrics import corpus_scores

    return corpus_scores(hypotheses, references)["bleu"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--repeats", type=int, default=1, help="measurements per system (median reported)")
    parser.add_argument("--threads", type=int, help="threads per process (default: PyTorch's; 2proc: 1 each)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for the PyTorch systems on a GPU")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="PyTorch's")
    parser.add_argument("--output_json", help="also write the results here")
    parser.add_argument("--run", choices=list(SYSTEMS), help=argparse.SUPPRESS)  # one system, in this process
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.run and args.device != "cpu" and {"translate-2proc", "translate-int8"} & set(args.systems):
        parser.error("--device cuda: translate-2proc and translate-int8 are CPU systems; leave them out (--systems)")
    if args.run:
        seconds = run_system(args.run, args.model, args.source, args.output, args.device, args.dtype)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps(seconds))
        return None

    pairs = [json.loads(line)["translation"] for line in (BUNDLED_CORPUS / "test.jsonl").open(encoding="utf-8")]
    sources = [pair["de"] for pair in pairs]
    references = [pair["en"] for pair in pairs]
    lines = [sources[i % len(sources)] for i in range(args.lines)]
    results = dict(cpu=cpu_model(), cpu_count=os.cpu_count(), threads=args.threads, lines=args.lines, model=args.model)
    results.update(device=_device_name(args.device), dtype=args.dtype)
    results["load_average_before"] = os.getloadavg()[0]
    results["rows"] = {}
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "source.de"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        outputs, seconds = {}, {system: [] for system in args.systems}
        for repeat in range(args.repeats):  # the order rotates, so that a change in the machine's load spreads out
            for system in args.systems[repeat:] + args.systems[:repeat]:
                output = Path(work) / f"{system}.en"
                seconds[system].append(
                    measure(system, args.model, source, output, args.threads, args.device, args.dtype)
                )
                outputs.setdefault(system, output.read_text(encoding="utf-8").splitlines())
                print(f"{system}: {seconds[system][-1]}", file=sys.stderr)
        for system, runs in seconds.items():
            row = results["rows"][system] = {"runs": runs}
            for clock in ("wall", "cpu"):
                row[f"{clock}_seconds"] = statistics.median(run[clock] for run in runs)
                row[f"sentences_per_{clock}_s"] = round(args.lines / row[f"{clock}_seconds"], 1)
            if "first_pass_wall" in runs[0]:
                row["first_pass_wall_seconds"] = statistics.median(run["first_pass_wall"] for run in runs)
                row["compile_seconds"] = round(row["first_pass_wall_seconds"] - row["wall_seconds"], 1)
                row["sentences_per_first_pass_wall_s"] = round(args.lines / row["first_pass_wall_seconds"], 1)
    for system, row in results["rows"].items():
        texts = outputs[system]
        row["bleu"] = round(bleu(texts[: len(references)], references[: len(texts)]), 2)
        if BASELINE in results["rows"]:
            for clock in ("wall", "cpu"):
                row[f"{clock}_speedup"] = round(
                    results["rows"][BASELINE][f"{clock}_seconds"] / row[f"{clock}_seconds"], 2
                )
            row["identical_to_pipeline"] = sum(a == b for a, b in zip(texts, outputs[BASELINE]))
    if REFERENCE in results["rows"]:
        reference = results["rows"][REFERENCE]
        for system, row in results["rows"].items():
            row["bleu_change"] = round(row["bleu"] - reference["bleu"], 2)
            row["identical_to_translate"] = sum(a == b for a, b in zip(outputs[system], outputs[REFERENCE]))
            row["wall_speedup_over_translate"] = round(reference["wall_seconds"] / row["wall_seconds"], 2)
            if "first_pass_wall_seconds" in row:  # compilation included
                row["first_pass_speedup_over_translate"] = round(
                    reference["wall_seconds"] / row["first_pass_wall_seconds"], 2
                )
    print(format_table(results))
    print(json.dumps(results))
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2) + "\n")
    return results


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else "cpu"


def _repeats(results: dict) -> int:
    return len(next(iter(results["rows"].values()))["runs"])


def format_table(results: dict) -> str:
    """Markdown: sentences/s by wall clock and by the processes' CPU time (which another user of a shared machine
    cannot stretch), speed-ups over the pipeline loop, identical lines and BLEU."""
    out = [
        f"{results['lines']} lines; {results['device']}, {results['dtype']}; "
        f"{results['cpu']}, {results['cpu_count']} CPUs, {results['threads'] or 'default'} "
        f"thread(s) per process; median of {_repeats(results)} run(s) each; load average "
        f"{results['load_average_before']:.1f} before the run",
        "",
        "| system | sentences/s (wall) | speed-up (wall) | sentences/s (CPU time) | speed-up (CPU time) "
        "| lines identical to the pipeline loop | BLEU | BLEU change |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for system, row in results["rows"].items():
        cells = [SYSTEMS[system], row["sentences_per_wall_s"], row.get("wall_speedup", ""), row["sentences_per_cpu_s"]]
        cells += [row.get("cpu_speedup", ""), row.get("identical_to_pipeline", ""), row["bleu"]]
        cells.append(f"{row['bleu_change']:+.2f}" if "bleu_change" in row else "")
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    for system, row in results["rows"].items():
        if "compile_seconds" in row:
            out.append(
                f"\n{SYSTEMS[system]}: {row['sentences_per_first_pass_wall_s']} sentences/s over its first pass "
                f"({row['first_pass_wall_seconds']:.1f} s, {row['compile_seconds']:.1f} s more than the timed pass: "
                f"compilation), {row['wall_speedup_over_translate']}x translate's speed in the timed pass, "
                f"{row['first_pass_speedup_over_translate']}x over the first pass; "
                f"{row['identical_to_translate']} of {results['lines']} lines identical to translate's"
            )
    return "\n".join(out)


if __name__ == "__main__":
    main()
