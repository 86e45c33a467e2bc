"""Re-score the shipped DPO and GRPO runs problem by problem, so that each run's end can be paired with its start.

    python tools/rescore_runs.py                            # the five runs chapter 17 reads, on 2 threads
    python tools/rescore_runs.py --dry-run                  # what it would score; loads no model
    python tools/rescore_runs.py --runs grpo/letter_count   # one run (a name under tinylm/data, or a folder)

A run's summary.json (`python -m tinylm.finetune --method dpo|grpo`, before `_accuracy` recorded "right")
says how many test problems its start and its end got right, not which ones; both were scored on the same
problems, so the test that fits is McNemar's on the pairs (`tinylm.stats.mcnemar`), and it needs the lists.
This rebuilds what the run evaluated from the run's own command, read back with finetune's parser: the base
(`tinylm.chat.load_chat_model`, --model-dir if the run had one) and --format; the start, summary.json's
start_adapter merged into the base (`remove_lora(load_adapter(...), merge=True)`, as finetune does) or the base
itself; the test split (`tinylm.tasks.make_splits` with the run's --task, --n-train, --n-val, --n-test and
--task-seed); the end, the start with the run's adapter.safetensors loaded on top as LoRA, not merged, as the
run measured it. Both are scored by `tinylm.evaluate.evaluate_task` (greedy) with the run's --max-new-tokens
and --eval-batch-size, and rescored.json goes into the run's folder: the per-problem results (1 right, 0
wrong, in the test split's order), the recorded and the re-scored counts, McNemar's exact test of the end
against the start, how many of the summary's example replies came out the same, this command and the machine.

Greedy decoding is the same on the same machine, but another CPU (other kernels, another thread count) can
break a near-tie between two tokens the other way, so a re-scored count can differ from the recorded one by a
problem or two: rescored.json keeps both, and the paired test uses the re-scored results, the only ones that
pair. Every run is checked before anything is scored (its summary, adapter and start are there; the rebuilt
test split has the recorded size and begins with the summary's examples); a run that fails is refused with
what to change. Runs that share their start and their problems score the start once (the two DPO runs share
200 problems, the two GRPO addition runs 500): `reply_ids` sorts each list's prompts by length before
batching, so 200 problems are not batched as the first 200 of the 500 are, and each distinct list is scored
on its own. Run it alone on the machine: it takes the CPU for a while.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import tinylm  # noqa: E402
from tinylm._checks import check_threads  # noqa: E402
from tinylm.chat import load_chat_model  # noqa: E402
from tinylm.evaluate import TaskResult, evaluate_task  # noqa: E402
from tinylm.finetune import ADAPTER, COMMAND as FINETUNE, SUMMARY, build_parser  # noqa: E402
from tinylm.lora import adapter_chain, load_adapter, remove_lora  # noqa: E402
from tinylm.quantize import quantize  # noqa: E402
from tinylm.speed import cpu_flags  # noqa: E402
from tinylm.stats import mcnemar  # noqa: E402
from tinylm.tasks import Problem, make_splits  # noqa: E402
from tinylm.train.measure import cpu_class  # noqa: E402

DATA = Path(tinylm.__file__).resolve().parent / "data"
HOME = DATA.parent.parent        # the folder that holds the package: the shipped runs name their start from it
RUNS = ("dpo/addition", "dpo/addition_nll", "grpo/addition", "grpo/addition_lr5e-4", "grpo/letter_count")
RESCORED = "rescored.json"
COMMAND = ["python", "tools/rescore_runs.py"]


@dataclass
class Run:
    """One run folder, checked, and what it evaluated rebuilt (no model loaded)."""

    name: str                  # as given to --runs
    folder: Path
    summary: dict
    args: argparse.Namespace   # the run's own flags, read back with tinylm.finetune's parser
    problems: list[Problem]    # its test split
    adapter: Path              # the end: the start + this adapter
    start: Path | None         # the start adapter merged into the base, or None (the base)
    model_dir: Path | None     # --model-dir of the run, or None (SmolLM2)

    @property
    def start_name(self) -> str:
        return self.summary.get("start_adapter") or "the base model"

    def start_key(self) -> tuple:
        """What decides the start's results: the same key, the same scoring (scored once per process)."""
        digest = hashlib.sha256(self.start.read_bytes()).hexdigest() if self.start else None
        return (str(self.model_dir) if self.model_dir else self.summary.get("base"), self.args.format, digest,
                self.args.max_new_tokens, self.args.eval_batch_size,
                tuple((p.question, p.target) for p in self.problems))


def refuse(message: str) -> SystemExit:
    return SystemExit(f"rescore_runs: {message}")


def _found(named: str | Path) -> Path | None:
    """A path as a run names it: as given (from the working folder), else from the folder holding tinylm."""
    path = Path(named)
    return next((p for p in (path, HOME / path) if p.exists()), None)


def _folder(name: str) -> Path:
    path = Path(name)
    if path.is_dir():
        return path
    if (DATA / name).is_dir():
        return DATA / name
    raise refuse(f"--runs {name}: no such run folder (neither {path} nor {DATA / name}); pass a folder that "
                 f"holds a DPO or GRPO run's {SUMMARY}, or one of {', '.join(RUNS)}")


def plan(name: str) -> Run:
    """The run in folder `name`, checked: SystemExit says what is missing or does not fit, and what to do."""
    folder = _folder(name)
    path = folder / SUMMARY
    if not path.is_file():
        raise refuse(f"{folder} has no {SUMMARY}: re-scoring reads the run's command and its recorded counts "
                     f"there; pass the folder of a run made by {' '.join(FINETUNE)} --method dpo|grpo")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise refuse(f"{path} is not readable JSON ({e}); restore the run's {SUMMARY}") from None
    if not isinstance(summary, dict) or not all(k in summary for k in ("command", "test", "test_start")):
        raise refuse(f"{path} has no test_start, test and command: it is not a DPO or GRPO run's summary (an SFT "
                     "run has no start model to pair its end with); pass a --method dpo|grpo run's folder")
    command = summary["command"]
    if not isinstance(command, list) or command[: len(FINETUNE)] != FINETUNE:
        raise refuse(f"{path}: its command {command!r} is not {' '.join(FINETUNE)} ...; pass a run of that command")
    try:
        args = build_parser().parse_args([str(c) for c in command[len(FINETUNE):]])
    except SystemExit:
        raise refuse(f"{path}: its command does not parse with this tinylm.finetune (see above); re-score with "
                     "the tinylm that made the run") from None
    named = str(args.adapter or "")
    for what, given, recorded in (("--task", args.task, summary.get("task")),
                                  ("--format", args.format, summary.get("format")),
                                  ("--max-new-tokens", args.max_new_tokens, summary.get("max_new_tokens")),
                                  ("--adapter", named, summary.get("start_adapter", ""))):
        if given != recorded:
            raise refuse(f"{path}: the command's {what} is {given!r} but the summary records {recorded!r}; "
                         f"the {SUMMARY} was edited or belongs to another run: restore it")
    adapter = folder / ADAPTER
    if not adapter.is_file():
        raise refuse(f"{folder} has no {ADAPTER} (the run's end: the start with this adapter on top); put the "
                     "run's adapter back, or leave this run out of --runs")
    start = None
    if named:
        start = _found(named)
        if start is None or not start.is_file():
            raise refuse(f"{folder}: its start {named} (summary.json's start_adapter, merged into the base "
                         f"before the run) is not here, neither from {Path.cwd()} nor from {HOME}; put that file "
                         "there (for the shipped runs: chapter 16's tinylm/data/lora/addition/adapter.safetensors)")
    try:
        chain = adapter_chain(adapter)        # the adapter's own record of its start (and the start's bytes)
    except ValueError as e:
        raise refuse(f"{adapter}: {e}") from None
    if [p.resolve() for p in chain[:-1]] != ([start.resolve()] if start else []):
        raise refuse(f"{adapter} was trained on top of {chain[:-1] or 'the base'}, but {path} names "
                     f"{named or 'no start'}; restore the run's {SUMMARY} or its {ADAPTER}")
    model_dir = None
    if args.model_dir is not None:
        model_dir = _found(args.model_dir)
        if model_dir is None:
            raise refuse(f"{folder}: the run's --model-dir {args.model_dir} is not here; put it there")
    try:
        problems = make_splits(args.task, args.n_train, args.n_val, args.n_test, seed=args.task_seed)["test"]
    except ValueError as e:
        raise refuse(f"{path}: the run's problems cannot be made again ({e})") from None
    sizes = {len(problems), summary["test"].get("n"), summary["test_start"].get("n")}
    if len(sizes) != 1:
        raise refuse(f"{path}: the rebuilt test split has {len(problems)} problems, the summary records "
                     f"{summary['test_start'].get('n')} (start) and {summary['test'].get('n')} (end); re-score "
                     "with the tinylm (tinylm.tasks) that made the run")
    shown = [e.get("question") for e in summary.get("examples", [])]
    if shown != [p.question for p in problems[: len(shown)]]:
        raise refuse(f"{path}: the summary's examples are not the first problems of the rebuilt test split; "
                     "re-score with the tinylm (tinylm.tasks) that made the run")
    return Run(name, folder, summary, args, problems, adapter, start, model_dir)


# ---------------------------------------------------------------------------------------------
# The models, as tinylm.finetune built them (the tests replace the loading and the scoring)
# ---------------------------------------------------------------------------------------------
def load_start(run: Run):
    """(model, tokenizer): the run's start, as finetune's main built it: the base, the start adapter merged
    into it, then --format int8 (the dequantize path a trained run used: kernel=False)."""
    model, tok, _ = load_chat_model(run.model_dir)
    if run.start is not None:
        remove_lora(load_adapter(model, run.start), merge=True)
    if run.args.format == "int8":
        quantize(model, "int8", kernel=False)
    return model.eval(), tok


def add_end(model, run: Run):
    """The run's end: its adapter loaded onto the start as LoRA layers, unmerged, as the run measured it."""
    return load_adapter(model, run.adapter).eval()


def score(model, tok, run: Run) -> TaskResult:
    """finetune's test accuracy: `evaluate_task` (greedy) with the run's reply limit and batch size."""
    return evaluate_task(model, tok, run.problems, run.args.max_new_tokens, run.args.eval_batch_size)


def machine() -> dict:
    """The machine the re-scoring ran on: what decides how a near-tie in greedy decoding breaks."""
    return {"cpu": cpu_flags()["name"], "cpu_class": cpu_class(),
            "torch_capability": torch.backends.cpu.get_cpu_capability(), "cores": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform()}


# ---------------------------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------------------------
def _same(recorded, mine: list[int]) -> int | None:
    return sum(int(a) == b for a, b in zip(recorded, mine)) if isinstance(recorded, list) else None


def record(run: Run, start: TaskResult, end: TaskResult, command: list[str], seconds: dict) -> dict:
    """rescored.json's content for a run scored at `start` and `end`."""
    start_right, end_right = [int(r) for r in start.right], [int(r) for r in end.right]
    test = mcnemar([bool(r) for r in start_right], [bool(r) for r in end_right])
    examples = run.summary.get("examples", [])
    where = run.folder.resolve()
    s, e = run.summary["test_start"], run.summary["test"]
    return {
        "command": command, "run": str(where.relative_to(HOME)) if where.is_relative_to(HOME) else str(where),
        "machine": machine(), "run_machine": {k: run.summary.get(k) for k in ("threads", "cpu_count")},
        "task": run.args.task, "n": len(run.problems), "base": run.summary.get("base"), "format": run.args.format,
        "start_adapter": run.summary.get("start_adapter", ""), "max_new_tokens": run.args.max_new_tokens,
        "eval_batch_size": run.args.eval_batch_size,
        "recorded": {"start_correct": s["correct"], "end_correct": e["correct"]},
        "rescored": {"start_correct": sum(start_right), "end_correct": sum(end_right)},
        # the summary's example replies (its first problems) that the re-scoring gave again, character for character
        "examples_same": {"of": len(examples),
                          "start": sum(x.get("base_reply") == r for x, r in zip(examples, start.replies)),
                          "end": sum(x.get("reply") == r for x, r in zip(examples, end.replies))},
        # a run that recorded its lists ("right"): on how many problems the re-scoring agrees (else null)
        "recorded_right_same": {"start": _same(s.get("right"), start_right), "end": _same(e.get("right"), end_right)},
        "mcnemar": {"only_start": test.only_a, "only_end": test.only_b, "p": test.p},
        "seconds": seconds, "start_right": start_right, "end_right": end_right,
        # each reply's length in characters, in the problems' order (a style such as --prefer shorter)
        "start_reply_chars": [len(r) for r in start.replies], "end_reply_chars": [len(r) for r in end.replies],
    }


def dumps(record: dict) -> str:
    """JSON, indented, with each list of 0s and 1s on one line."""
    text = json.dumps(record, indent=2)
    return re.sub(r"\[\s+([01](?:,\s+[01])*)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)


def write(folder: Path, record: dict) -> Path:
    path = folder / RESCORED
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(record) + "\n", encoding="utf-8")
    tmp.replace(path)                       # never a half-written file under the real name
    return path


def build_tool_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python tools/rescore_runs.py", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[2:5]))
    p.add_argument("--runs", nargs="+", default=list(RUNS), metavar="RUN",
                   help=f"run folders, or names under {DATA} (default: {' '.join(RUNS)})")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for PyTorch (default 2, the shipped "
                   "runs' own)")
    p.add_argument("--dry-run", action="store_true", help="print the runs, their problems and starts, and "
                   "what would be scored; load no model")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_tool_parser().parse_args(argv)
    try:
        check_threads("--threads", args.threads)
    except ValueError as e:
        raise refuse(str(e)) from None
    runs = [plan(name) for name in dict.fromkeys(args.runs)]     # every run checked before any scoring
    keys = [run.start_key() for run in runs]
    starts = list(dict.fromkeys(keys))
    for run, key in zip(runs, keys):
        a = run.args
        print(f"{run.name}: {a.method} on {a.task}, {len(run.problems)} test problems (--task-seed {a.task_seed}), "
              f"start {run.start_name} [start {starts.index(key) + 1}], {a.format}, --max-new-tokens "
              f"{a.max_new_tokens}, --eval-batch-size {a.eval_batch_size}; recorded "
              f"{run.summary['test_start']['correct']} -> {run.summary['test']['correct']} right")
    n_start = sum(len(key[-1]) for key in starts)
    n_end = sum(len(run.problems) for run in runs)
    print(f"to score: {len(starts)} start(s) on {n_start} problems and {len(runs)} end(s) on {n_end}, "
          f"{n_start + n_end} problems in all, on {args.threads} threads", flush=True)
    if args.dry_run:
        return 0

    torch.set_num_threads(args.threads)
    scored: dict[tuple, tuple[TaskResult, float]] = {}
    for i, (run, key) in enumerate(zip(runs, keys), start=1):
        t0 = time.perf_counter()
        model, tok = load_start(run)
        print(f"[{i}/{len(runs)}] {run.name}: start ({run.start_name}) loaded in {time.perf_counter() - t0:.1f} s",
              flush=True)
        if key not in scored:
            t0 = time.perf_counter()
            result = score(model, tok, run)
            scored[key] = (result, time.perf_counter() - t0)
            print(f"  start: {result.correct}/{result.n} right (recorded {run.summary['test_start']['correct']}) "
                  f"in {scored[key][1]:.1f} s", flush=True)
        else:
            print(f"  start: scored already, {scored[key][0].correct}/{scored[key][0].n} right", flush=True)
        start, start_s = scored[key]
        t0 = time.perf_counter()
        end = score(add_end(model, run), tok, run)
        end_s = time.perf_counter() - t0
        done = record(run, start, end, COMMAND + argv, {"start": start_s, "end": end_s})
        path = write(run.folder, done)
        m = done["mcnemar"]
        print(f"  end: {end.correct}/{end.n} right (recorded {run.summary['test']['correct']}) in {end_s:.1f} s; "
              f"McNemar: {m['only_start']} right only at the start, {m['only_end']} only at the end, "
              f"p = {m['p']:.3g}; {path}", flush=True)
        del model
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
