"""Benchmarks; run each from the project's root as `python -m bench.<name>`.

Started that way, Python puts the working folder (the root) first on its
module search path, so a benchmark imports the project's packages and
Google's modules as the project's commands do, in the project's
environment or in bench/.venv (bench/setup_bench_env.sh); neither has the
project installed. A benchmark that runs parts of itself in new
processes starts them the same way (`child_command`).
"""

import json
import os
import sys

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_command(name, args, python=None):
  """The argv that runs bench.<name> with `args` in this interpreter.

  Start it with cwd=REPO_ROOT: `-m` puts that folder first on the child's
  module search path, which is how the child finds the project.

  Args:
    name: the benchmark's module name within bench (e.g. "memory").
    args: list of str, its command-line arguments.
    python: (optional) the interpreter of another environment (a peer's
      own venv); this one's when None.

  Returns:
    list of str: [python, "-m", "bench.<name>", *args].
  """
  return [python or sys.executable, "-m", "bench." + name] + list(args)


def typed_command(name, args):
  """The command a user types to run bench.<name> with `args`, one line
  (what a benchmark records of how it was run)."""
  return " ".join(["python", "-m", "bench." + name] + list(args))


def write_results(out_dir, name, started, results):
  """Writes `results` as JSON to <out_dir>/<name>-<started, UTC minute>.json
  and returns the path."""
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, "%s-%s.json" % (
      name, started.strftime("%Y%m%d-%H%M")))
  with open(path, "w") as f:
    json.dump(results, f, indent=2)
  return path


def squad_questions(path, count):
  """The first `count` (question, context) pairs of a SQuAD file."""
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  questions = [(qa["question"], paragraph["context"])
               for article in data for paragraph in article["paragraphs"]
               for qa in paragraph["qas"]]
  return questions[:count]


def batches(items, size):
  """`items` in consecutive groups of `size`; a shorter last group is
  left out."""
  return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]


def in_turn(items, round_index):
  """`items` rotated by `round_index`: over rounds each one goes first
  equally often, so none always runs right after the same other one."""
  shift = round_index % len(items)
  return list(items[shift:]) + list(items[:shift])


def percentiles(seconds):
  """{"p50_ms", "p99_ms", "mean_ms"} of call times given in seconds."""
  values = np.array(seconds) * 1000.0
  return {"p50_ms": float(np.percentile(values, 50)),
          "p99_ms": float(np.percentile(values, 99)),
          "mean_ms": float(values.mean())}
