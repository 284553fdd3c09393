"""bench/peak_breakdown.py: the replay of allocation records against
hand-made traces, and a tiny real run against the allocator's own peak."""

import re
import subprocess
import sys

from tensorflow.core.framework import step_stats_pb2

from bench import peak_breakdown
import conftest

# The benchmark as its users run it, from the repository's root.
_COMMAND = [sys.executable, "-m", "bench.peak_breakdown"]


def _step_stats(records):
  """StepStats with one device; records: {node: [(micros, bytes), ...]}."""
  stats = step_stats_pb2.StepStats()
  device = stats.dev_stats.add(device="/cpu:0")
  for name, events in records.items():
    memory = device.node_stats.add(node_name=name).memory.add(
        allocator_name="cpu")
    for micros, size in events:
      memory.allocation_records.add(alloc_micros=micros, alloc_bytes=size)
  return stats


def test_peak_and_what_is_alive_there():
  # a: 100 bytes from t=1 to t=5; b: 50 from t=2 to t=3; c: 80 from t=4 to 6.
  # Live: t1 100, t2 150, t3 100, t4 180 (peak: a and c), t5 80, t6 0.
  stats = _step_stats({"a": [(1, 100), (5, -100)], "b": [(2, 50), (3, -50)],
                       "c": [(4, 80), (6, -80)]})
  peak, at_peak, live = peak_breakdown.live_at_peak(stats)
  assert peak == 180
  assert at_peak == "c"
  assert live == [("a", 100), ("c", 80)]


def test_a_free_at_the_same_time_comes_before_the_allocation():
  # b is freed when c is allocated: the peak holds a and c (180), never
  # a, b and c (230).
  stats = _step_stats({"a": [(1, 100)], "b": [(2, 50), (3, -50)],
                       "c": [(3, 80)]})
  peak, at_peak, live = peak_breakdown.live_at_peak(stats)
  assert peak == 180
  assert at_peak == "c"
  assert live == [("a", 100), ("c", 80)]


def test_empty_trace():
  assert peak_breakdown.live_at_peak(step_stats_pb2.StepStats()) == (
      0, None, [])


def test_tiny_run_replays_no_more_than_the_allocator_counted():
  done = subprocess.run(
      _COMMAND + ["--model=base", "--layers=2", "--seq=64", "--batch=4",
                  "--checkpointing=true", "--top=5"],
      cwd=conftest.REPO_ROOT, capture_output=True, text=True, timeout=600,
      check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  replayed, counted = map(float, re.search(
      r"peak of the step's tensors: ([\d.]+) MiB replayed from the trace, "
      r"([\d.]+) MiB by the allocator", done.stdout).groups())
  # The trace records a subset of the allocator's allocations (the step's
  # ops, not the runtime's own buffers), so its peak cannot be higher.
  assert 0 < replayed <= counted * 1.001 + 0.01
  rows = re.findall(r"^\| ([\d.]+) \| (.+) \|$", done.stdout, re.M)
  assert len(rows) == 6  # five ops and the rest
  listed = sum(float(size) for size, _ in rows)
  # The rows add up to the replayed peak (each printed to 0.1 MiB).
  assert abs(listed - replayed) <= 0.05 * len(rows) + 0.05


def test_a_bad_flag_ends_in_one_line_naming_it():
  done = subprocess.run(_COMMAND + ["--seq=600"], cwd=conftest.REPO_ROOT,
                        capture_output=True, text=True, timeout=120,
                        check=False)
  assert done.returncode == 2
  assert "Traceback" not in done.stderr
  assert done.stderr.strip().splitlines()[-1] == (
      "peak_breakdown.py: error: argument --seq: '600': give a whole number "
      "from 1 to 512")
