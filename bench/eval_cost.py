# coding=utf-8
"""What evaluation during training costs: wall time and peak memory.

A case is a model and a task:

  minilm      MiniLM from its checkpoint (../shared/assets)
  base        BERT-Base's shape with random weights (no checkpoint exists
              here): its bert_config.json is written to the work folder,
              with Google's uncased vocabulary
  classifier  run_classifier.py on MRPC at 128 tokens; --mrpc_dev_examples
              scores the first that many dev pairs (a dev.tsv written to
              the work folder) instead of all 408
  squad       run_squad.py at 384 tokens, trained on the first articles of
              SQuAD v1.1 dev and scored on its last --squad_dev_articles
              (split by tools/split_squad.py into the work folder)

Each case trains twice, the same --steps updates with a checkpoint after
every --eval_every_steps of them and none by the clock, each run a child
process of the real script under `/usr/bin/time -v`, as
bench/process_memory.py measures a child:

  A  --do_train
  B  the same plus --do_eval --eval_every_steps: the dev set is scored
     after those updates (and after the last) in a graph and session of
     its own, while training's session stays open

The scripts have no flag for a number of updates, so --num_train_epochs is
chosen to give exactly --steps (checked against each log's "Num steps").
Per case, the table gives the medians over --rounds (A then B in each
round; a difference is taken within its round):

  evals        "Evaluation at step" lines in B's log
  s/eval       their mean time as the lines give it (whole seconds; each
               line times the dev set's scoring, its graph and session)
  dev/s        dev examples (SQuAD: questions) per second of evaluation
  B-A wall     the extra wall time of the whole run
  A, B peak    each run's "Maximum resident set size", in GiB
  B-A peak     the evaluation graph's and session's memory beside training

    python -m bench.eval_cost --models=minilm --tasks=classifier \\
        --steps=6 --eval_every_steps=3 --mrpc_dev_examples=32

Prints a markdown table and writes <out_dir>/eval_cost-<date>.json (with
the typed command, the CPU's model and flags, each run's measurements and
command line). The runs' logs stay in <out_dir>/eval_cost/logs-<date>;
their output folders are removed after each run (BERT-Base's checkpoints
with Adam's slots take 1.3 GB each).
"""

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

import bench
from bench import process_memory
from bench import throughput
from hardware import cpu

ASSETS_DIR = os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                          "assets")
MINILM_DIR = os.path.join(ASSETS_DIR, "models", "minilm-l6-h384-uncased")
UNCASED_VOCAB = os.path.join(ASSETS_DIR, "bert_vocab", "uncased",
                             "vocab.txt")
MRPC_DIR = os.path.join(ASSETS_DIR, "glue", "MRPC")
SQUAD_FILE = os.path.join(ASSETS_DIR, "squad", "v1.1", "dev-v1.1.json")
# The sizes of those files (../shared/assets/MANIFEST.md), for the flags'
# bounds.
MRPC_DEV_PAIRS = 408
SQUAD_ARTICLES = 48

MODELS = ("minilm", "base")
# Each task's script and max_seq_length.
TASKS = {"classifier": ("run_classifier.py", 128),
         "squad": ("run_squad.py", 384)}
PRECISIONS = ("fp32", "bf16", "auto")
TIMEOUT_SECONDS = 3 * 3600

# An evaluation's line (driver/evaluator.py): its update and, last, its
# time as userio/progress.format_seconds writes it.
EVAL_LINE = re.compile(r"Evaluation at step (\d+)\b.*; "
                       r"(\d+ h \d+ min|\d+ min \d+ s|\d+ s)\.$", re.M)
NUM_STEPS_LINE = re.compile(r"Num steps = (\d+)$", re.M)
_UNIT_SECONDS = {"h": 3600, "min": 60, "s": 1}
# The peak in GiB of a `/usr/bin/time -v` report, read as process_memory
# reads it.
_max_rss_gib = process_memory._max_rss_gib  # pylint: disable=protected-access

Settings = collections.namedtuple("Settings", [
    "steps", "every", "train_batch_size", "eval_batch_size", "precision"])
Settings.__doc__ = """What both runs of every case share (the flags)."""

TaskData = collections.namedtuple("TaskData", [
    "train_flags", "eval_flags", "num_train", "num_dev"])
TaskData.__doc__ = """A task's data as the runs take it.

Fields:
  train_flags: the script's data flags of both runs.
  eval_flags: what B adds for its dev set.
  num_train: the training examples the script counts its epochs in.
  num_dev: the dev examples (SQuAD: questions) an evaluation scores.
"""

Case = collections.namedtuple("Case", ["model", "task", "model_flags",
                                       "data"])


def parse_seconds(text):
  """Seconds of a time as userio/progress.format_seconds writes it ("42 s",
  "3 min 05 s", "2 h 10 min")."""
  parts = text.split()
  return sum(int(value) * _UNIT_SECONDS[unit]
             for value, unit in zip(parts[::2], parts[1::2]))


def parse_log(text):
  """What a training run's log says of its updates and evaluations.

  Returns:
    {"num_steps": the "Num steps" of training (None: no such line),
     "evaluations": [[step, seconds], ...] in the log's order}.
  """
  steps = NUM_STEPS_LINE.findall(text)
  return {"num_steps": int(steps[-1]) if steps else None,
          "evaluations": [[int(step), parse_seconds(seconds)]
                          for step, seconds in EVAL_LINE.findall(text)]}


def _median_of(rounds, value):
  """The median over `rounds` of value(round)."""
  return statistics.median(value(pair) for pair in rounds)


def _mean_eval_seconds(run):
  seconds = [s for _, s in run["evaluations"]]
  return sum(seconds) / len(seconds)


def summarize(rounds, num_dev):
  """A case's figures from its rounds.

  Args:
    rounds: [{"A": run, "B": run}, ...]; a run is a dict with "wall_s",
      "peak_gib" and "evaluations" ([[step, seconds], ...], at least one in
      B).
    num_dev: the dev examples each evaluation scores.

  Returns:
    dict of medians over the rounds: "evaluations" (B's count),
    "eval_seconds_mean" (B's mean per evaluation), "dev_examples_per_s"
    (num_dev over that; None when it is 0), "wall_a_s", "wall_b_s",
    "extra_wall_s" (B - A within a round), "peak_a_gib", "peak_b_gib",
    "extra_peak_gib".
  """
  mean_seconds = _median_of(rounds, lambda r: _mean_eval_seconds(r["B"]))
  return {
      "evaluations": _median_of(rounds, lambda r: len(r["B"]["evaluations"])),
      "eval_seconds_mean": mean_seconds,
      "dev_examples_per_s": num_dev / mean_seconds if mean_seconds else None,
      "wall_a_s": _median_of(rounds, lambda r: r["A"]["wall_s"]),
      "wall_b_s": _median_of(rounds, lambda r: r["B"]["wall_s"]),
      "extra_wall_s": _median_of(
          rounds, lambda r: r["B"]["wall_s"] - r["A"]["wall_s"]),
      "peak_a_gib": _median_of(rounds, lambda r: r["A"]["peak_gib"]),
      "peak_b_gib": _median_of(rounds, lambda r: r["B"]["peak_gib"]),
      "extra_peak_gib": _median_of(
          rounds, lambda r: r["B"]["peak_gib"] - r["A"]["peak_gib"])}


TABLE_HEAD = (
    "| model | task | steps | every | dev | evals | s/eval | dev/s | "
    "A wall s | B-A wall s | A peak GiB | B peak GiB | B-A peak GiB |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def table_row(case, settings, summary):
  """The table's line of a case (TABLE_HEAD's columns)."""
  rate = summary["dev_examples_per_s"]
  return ("| %s | %s | %d | %d | %d | %g | %.1f | %s | %.0f | %+.0f | %.2f "
          "| %.2f | %+.2f |" % (
              case.model, case.task, settings.steps, settings.every,
              case.data.num_dev, summary["evaluations"],
              summary["eval_seconds_mean"],
              "-" if rate is None else "%.1f" % rate, summary["wall_a_s"],
              summary["extra_wall_s"], summary["peak_a_gib"],
              summary["peak_b_gib"], summary["extra_peak_gib"]))


def _link(source, path):
  """Makes `path` a symbolic link to `source` (the real data stays where
  it is)."""
  if os.path.lexists(path):
    os.remove(path)
  os.symlink(os.path.abspath(source), path)


def _lines(path):
  with open(path, encoding="utf-8", newline="") as f:
    return f.readlines()


def mrpc_data(work_dir, dev_examples):
  """TaskData of MRPC: a --data_dir in `work_dir` with links to the real
  train.tsv and dev.tsv, or with a dev.tsv of the first `dev_examples`
  pairs (None: all)."""
  folder = os.path.join(work_dir, "mrpc_dev%s" % (dev_examples or "_all"))
  os.makedirs(folder, exist_ok=True)
  train, dev = (os.path.join(folder, name) for name in ("train.tsv",
                                                        "dev.tsv"))
  _link(os.path.join(MRPC_DIR, "train.tsv"), train)
  # The header line, then the pairs (one a line).
  lines = _lines(os.path.join(MRPC_DIR, "dev.tsv"))
  if dev_examples is None or dev_examples >= len(lines) - 1:
    _link(os.path.join(MRPC_DIR, "dev.tsv"), dev)
  else:
    if os.path.lexists(dev):
      os.remove(dev)
    with open(dev, "w", encoding="utf-8", newline="") as f:
      f.writelines(lines[:1 + dev_examples])
  return TaskData(["--task_name=MRPC", "--data_dir=" + folder], [],
                  len(_lines(train)) - 1, len(_lines(dev)) - 1)


def squad_data(work_dir, dev_articles):
  """TaskData of SQuAD: trained on the first articles of v1.1 dev, scored
  on its last `dev_articles`, the two files written by tools/split_squad.py
  into `work_dir`."""
  folder = os.path.join(work_dir, "squad_dev%d" % dev_articles)
  subprocess.run([sys.executable, "-m", "tools.split_squad",
                  "--input=" + SQUAD_FILE,
                  "--num_train_articles=%d" % (SQUAD_ARTICLES - dev_articles),
                  "--output_dir=" + folder], cwd=bench.REPO_ROOT,
                 capture_output=True, check=True)
  train, dev = (os.path.join(folder, name) for name in ("train.json",
                                                        "eval.json"))
  return TaskData(["--train_file=" + train], ["--dev_file=" + dev],
                  len(bench.squad_questions(train, None)),
                  len(bench.squad_questions(dev, None)))


def model_flags(model, work_dir):
  """The model flags of `model` ("minilm" or "base"); for base, writes its
  bert_config.json into `work_dir`/base first."""
  if model == "minilm":
    return ["--bert_config_file=" + os.path.join(MINILM_DIR,
                                                 "bert_config.json"),
            "--vocab_file=" + os.path.join(MINILM_DIR, "vocab.txt"),
            "--init_checkpoint=" + os.path.join(MINILM_DIR,
                                                "bert_model.ckpt")]
  config = os.path.join(work_dir, "base", "bert_config.json")
  os.makedirs(os.path.dirname(config), exist_ok=True)
  with open(config, "w") as f:
    json.dump(process_memory.model_config("base"), f, indent=2)
  return ["--bert_config_file=" + config, "--vocab_file=" + UNCASED_VOCAB]


def run_args(case, settings, output_dir, evaluate):
  """The script and arguments of one run of `case`; with `evaluate`, B's."""
  script, seq_length = TASKS[case.task]
  # Half an update more than asked: the script rounds the updates down.
  epochs = ((settings.steps + 0.5) * settings.train_batch_size /
            case.data.num_train)
  args = [script] + case.model_flags + case.data.train_flags + [
      "--do_train", "--max_seq_length=%d" % seq_length,
      "--train_batch_size=%d" % settings.train_batch_size,
      "--num_train_epochs=%r" % epochs,
      "--save_checkpoints_steps=%d" % settings.every,
      "--save_checkpoints_secs=0", "--precision=" + settings.precision,
      "--output_dir=" + output_dir]
  if evaluate:
    args += ["--do_eval", "--eval_every_steps=%d" % settings.every,
             "--eval_batch_size=%d" % settings.eval_batch_size]
    args += case.data.eval_flags
  return args


def _last_line(text):
  lines = [line for line in text.splitlines() if line.strip()]
  return lines[-1] if lines else "(no output)"


def _wait(child, name, timeout):
  """Waits for `child`; ends its process group when the wait fails (a
  timeout, Ctrl-C)."""
  try:
    child.wait(timeout)
  except BaseException as e:
    # The script runs under /usr/bin/time, in the group with it.
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    if isinstance(e, subprocess.TimeoutExpired):
      raise SystemExit("bench.eval_cost: %s took over %d s and was ended."
                       % (name, timeout)) from e
    raise


def measure(args, log_path, timeout=TIMEOUT_SECONDS):
  """Runs `python <args>` from the project's root under /usr/bin/time -v,
  its output into `log_path` (the time's report beside it, .time).

  Returns:
    parse_log's dict of its log, plus "wall_s" and "peak_gib" (the
    process's maximum resident set size).

  Raises:
    SystemExit, one line, when the run fails or takes over `timeout` s.
  """
  name = os.path.basename(log_path)
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  began = time.monotonic()
  with open(log_path, "w") as log:
    child = subprocess.Popen(
        ["/usr/bin/time", "-v", "-o", log_path + ".time", sys.executable] +
        args, stdout=log, stderr=subprocess.STDOUT, cwd=bench.REPO_ROOT,
        start_new_session=True)
    _wait(child, name, timeout)
  wall = time.monotonic() - began
  with open(log_path) as f:
    text = f.read()
  if child.returncode:
    raise SystemExit("bench.eval_cost: %s failed (exit status %d): %s" % (
        log_path, child.returncode, _last_line(text)))
  with open(log_path + ".time") as f:
    peak = _max_rss_gib(f.read())
  return dict(parse_log(text), wall_s=wall, peak_gib=peak)


def check_run(run, steps, evaluate, log_path):
  """Ends the benchmark in one line when a run did not make `steps`
  updates, or, as B (`evaluate`), logged no evaluation."""
  if run["num_steps"] != steps:
    raise SystemExit("bench.eval_cost: %s trained %s updates, not %d." % (
        log_path, run["num_steps"], steps))
  if evaluate and not run["evaluations"]:
    raise SystemExit("bench.eval_cost: %s has no \"Evaluation at step\" "
                     "line." % log_path)


def run_pair(case, settings, work_dir, log_dir, round_index):
  """{"A": run, "B": run} of one round, A first, their logs in `log_dir`;
  each run's output folder in `work_dir` is made fresh (a run resumes from
  a checkpoint it finds) and removed after it."""
  pair = {}
  for kind in ("A", "B"):
    name = "%s-%s-r%d-%s" % (case.model, case.task, round_index + 1, kind)
    output_dir = os.path.join(work_dir, "runs", name)
    log_path = os.path.join(log_dir, name + ".log")
    shutil.rmtree(output_dir, ignore_errors=True)
    args = run_args(case, settings, output_dir, kind == "B")
    run = measure(args, log_path)
    shutil.rmtree(output_dir)
    check_run(run, settings.steps, kind == "B", log_path)
    run.update(command=" ".join(["python"] + args), log=log_path)
    print("%s: %.0f s, peak %.2f GiB, evaluations: %d" % (
        name, run["wall_s"], run["peak_gib"], len(run["evaluations"])),
          file=sys.stderr, flush=True)
    pair[kind] = run
  return pair


def make_case(model, task, work_dir, mrpc_dev_examples, squad_dev_articles):
  """The Case of `model` and `task`, its files written into `work_dir`."""
  if task == "classifier":
    data = mrpc_data(work_dir, mrpc_dev_examples)
  else:
    data = squad_data(work_dir, squad_dev_articles)
  return Case(model, task, model_flags(model, work_dir), data)


def machine(precision, environ):
  """The CPU's model and flags, and the kernels the runs choose with
  `precision` in `environ` (hardware/cpu.py's rules)."""
  features = cpu.cpu_features()
  info = throughput.machine_info()
  info.update(cpu_flags=sorted(features),
              cpu_kernels=cpu.kernel_settings(features, precision,
                                              environ).line,
              load_average_at_start=list(os.getloadavg()))
  return info


class _Parser(argparse.ArgumentParser):
  """Ends a bad command line with one line (and status 2), as the other
  benchmarks do."""

  def error(self, message):
    self.exit(2, "%s: %s\n" % (self.prog, message))


def _names(allowed):
  """argparse type: a comma list of names from `allowed`."""
  def parse(text):
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(allowed))
    if unknown or not names:
      raise argparse.ArgumentTypeError("%r: give a comma list of %s" % (
          text, ", ".join(allowed)))
    return list(dict.fromkeys(names))
  return parse


def parse_args(argv):
  """The benchmark's flags of `argv` (without the program's name)."""
  parser = _Parser(prog="bench.eval_cost",
                   description=__doc__.split("\n")[0])
  whole = process_memory.int_in
  parser.add_argument("--models", type=_names(MODELS), default=["minilm"],
                      help="comma list of minilm, base")
  parser.add_argument("--tasks", type=_names(sorted(TASKS)),
                      default=["classifier", "squad"],
                      help="comma list of classifier, squad")
  parser.add_argument("--steps", type=whole(1, 100000), default=60,
                      help="training updates of every run")
  parser.add_argument("--eval_every_steps", type=whole(1, 100000),
                      default=20, help="B's evaluation (and both runs' "
                      "checkpoint) interval in updates")
  parser.add_argument("--train_batch_size", type=whole(1, 4096), default=16)
  parser.add_argument("--eval_batch_size", type=whole(1, 4096), default=32,
                      help="B's examples (SQuAD: windows) per eval batch")
  parser.add_argument("--mrpc_dev_examples", type=whole(1, MRPC_DEV_PAIRS),
                      help="score the first this many MRPC dev pairs "
                      "(default: all %d)" % MRPC_DEV_PAIRS)
  parser.add_argument("--squad_dev_articles",
                      type=whole(1, SQUAD_ARTICLES - 1), default=2,
                      help="score SQuAD's last this many articles; train on "
                      "the others")
  parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                      help="--precision of every run")
  parser.add_argument("--rounds", type=whole(1, 100), default=1,
                      help="A/B pairs per case; the table gives medians")
  parser.add_argument("--out_dir",
                      default=os.path.join(bench.REPO_ROOT, "bench", "out"),
                      help="where the JSON goes; the runs' files go to its "
                      "eval_cost folder")
  args = parser.parse_args(argv)
  if args.eval_every_steps > args.steps:
    parser.error("--eval_every_steps=%d: more than --steps=%d, so B would "
                 "only evaluate after the last update" % (
                     args.eval_every_steps, args.steps))
  return args


def main(argv):
  args = parse_args(argv)
  started = datetime.datetime.now(datetime.timezone.utc)
  settings = Settings(args.steps, args.eval_every_steps,
                      args.train_batch_size, args.eval_batch_size,
                      args.precision)
  work_dir = os.path.join(os.path.abspath(args.out_dir), "eval_cost")
  # Named as the JSON is, which names the logs of its runs.
  log_dir = os.path.join(work_dir, started.strftime("logs-%Y%m%d-%H%M"))
  results = {"date": started.strftime("%Y-%m-%d %H:%M UTC"),
             "command": bench.typed_command("eval_cost", argv),
             "machine": machine(args.precision, os.environ),
             "settings": settings._asdict(), "cases": []}
  print(TABLE_HEAD, flush=True)
  for model in args.models:
    for task in args.tasks:
      case = make_case(model, task, work_dir, args.mrpc_dev_examples,
                       args.squad_dev_articles)
      rounds = [run_pair(case, settings, work_dir, log_dir, index)
                for index in range(args.rounds)]
      summary = summarize(rounds, case.data.num_dev)
      print(table_row(case, settings, summary), flush=True)
      results["cases"].append(dict(
          summary, model=model, task=task, train_examples=case.data.num_train,
          dev_examples=case.data.num_dev, rounds=rounds))
  results["load_average_at_end"] = list(os.getloadavg())
  path = bench.write_results(args.out_dir, "eval_cost", started, results)
  print("\nWritten to %s" % path)


if __name__ == "__main__":
  main(sys.argv[1:])
