"""Fits memory/memory_model.py's CPU calibration to measured allocator peaks.

Reads the JSON files that bench/memory.py writes (BFC allocator runs), finds
the `state_factor`, `linear_factor` and `quadratic_factor` that minimize the
largest relative error of the planner's estimate against the measured
allocator peak, and prints the factors and a Markdown table of every run.

    python -m bench.fit_memory_calibration bench/out/large.json bench/out/small.json

The estimate is linear in the three factors (each multiplies its own sum of
terms), so each run's estimate is computed once per factor and the grid
search is a matrix product. `workspace_gb` stays that of
`memory_model.CPU_MEASURED`; `--check` only evaluates the current factors.
"""

import dataclasses
import json

from absl import app
from absl import flags
import numpy as np

from memory import memory_model
from userio import units

FLAGS = flags.FLAGS
flags.DEFINE_bool("check", False, "Only report the errors of "
                  "memory_model.CPU_MEASURED, without fitting.")

FACTORS = ("state_factor", "linear_factor", "quadratic_factor")
GRID = {"state_factor": np.arange(0.40, 1.21, 0.01),
        "linear_factor": np.arange(0.05, 1.01, 0.01),
        "quadratic_factor": np.arange(0.0, 1.01, 0.01)}


def load_runs(paths):
  """The successful BFC runs of bench/memory.py's JSON files."""
  runs = []
  for path in paths:
    with open(path) as f:
      for run in json.load(f)["runs"]:
        if "error" not in run and run.get("allocator_peak_bytes"):
          runs.append(run)
  if not runs:
    raise app.UsageError("No run with an allocator peak in %s (measure with "
                         "python -m bench.memory --allocator=bfc)." %
                         ", ".join(paths))
  return runs


def estimate(run, calibration):
  """The planner's total for `run`, as bench/memory.py's "planned" column.

  (Not imported from bench/memory.py: its module-level flags would clash
  with bench/throughput.py's when the tests import both.)
  """
  return memory_model.estimate_bytes(
      run["bert"], run["seq"], run["batch"], run["precision"],
      run["checkpointing"], calibration=calibration)["total"]


def term_matrix(runs, workspace_gb):
  """[runs, 3] bytes per unit of each factor, and [runs] fixed bytes."""
  zero = memory_model.Calibration(state_factor=0.0, linear_factor=0.0,
                                 quadratic_factor=0.0,
                                 workspace_gb=workspace_gb)
  fixed = np.array([estimate(run, zero) for run in runs])
  columns = []
  for name in FACTORS:
    unit = dataclasses.replace(zero, **{name: 1.0})
    columns.append(np.array([estimate(run, unit) for run in runs]) - fixed)
  return np.stack(columns, axis=1), fixed


def fit(terms, fixed, measured):
  """Grid point with the smallest largest |estimate / measured - 1|."""
  s, l, q = np.meshgrid(*(GRID[name] for name in FACTORS), indexing="ij")
  points = np.stack([s.ravel(), l.ravel(), q.ravel()], axis=1)
  best, best_error = None, np.inf
  # Chunks keep the [points, runs] matrix small.
  for start in range(0, len(points), 100000):
    chunk = points[start:start + 100000]
    estimates = chunk @ terms.T + fixed
    errors = np.abs(estimates / measured - 1.0).max(axis=1)
    i = int(np.argmin(errors))
    if errors[i] < best_error:
      best, best_error = chunk[i], errors[i]
  return dict(zip(FACTORS, (round(float(v), 2) for v in best)))


def report(runs, calibration):
  """Markdown table of measured vs planned peaks; returns the largest error."""
  print("| model | seq | batch | precision | checkpointing | allocator peak "
        "GiB | planned GiB | planned vs measured |")
  print("|---|---:|---:|---|---|---:|---:|---:|")
  worst = 0.0
  for run in runs:
    measured = run["allocator_peak_bytes"]
    planned = estimate(run, calibration)
    error = planned / measured - 1.0
    worst = max(worst, abs(error))
    print("| %s | %d | %d | %s | %s | %.2f | %.2f | %+.0f%% |" % (
        run["model"], run["seq"], run["batch"], run["precision"],
        "on" if run["checkpointing"] else "off", measured / units.GIB,
        planned / units.GIB, 100 * error))
  return worst


def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError("Name one or more JSON files of bench/memory.py.")
  runs = load_runs(paths)
  calibration = memory_model.CPU_MEASURED
  if not FLAGS.check:
    measured = np.array([run["allocator_peak_bytes"] for run in runs],
                        dtype=np.float64)
    terms, fixed = term_matrix(runs, calibration.workspace_gb)
    calibration = dataclasses.replace(calibration,
                                      **fit(terms, fixed, measured))
  worst = report(runs, calibration)
  print("\n%s: largest error %.1f%% over %d runs" % (calibration, 100 * worst,
                                                     len(runs)))


if __name__ == "__main__":
  app.run(main)
