"""bench/process_memory.py: the phase records against memory the test
itself touches."""

import numpy as np

from bench import process_memory


def test_phases_see_memory_that_is_touched_and_freed():
  """256 MiB written between two marks raise the resident set by about
  that much and the high-water mark to at least the new resident set (not
  by as much: an earlier test in this process may have set it higher);
  freed, the high-water mark stays (the kernel's per-thread counters lag
  by up to a few hundred KiB)."""
  phases = process_memory.Phases()
  phases.mark("before")
  block = np.ones(2**25, np.float64)  # 256 MiB, every page written.
  phases.mark("touched")
  del block
  phases.mark("freed")
  (_, rss0, hwm0, t0), (_, rss1, hwm1, t1), (name, _, hwm2, t2) = phases.rows
  assert name == "freed"
  assert 0.2 < rss1 - rss0 < 0.35, (rss0, rss1)
  assert hwm1 > max(rss1, hwm0) - 0.01
  assert hwm2 > hwm1 - 0.01
  assert 0 <= t0 <= t1 <= t2
