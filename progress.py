# coding=utf-8
"""Progress lines for long loops: done / total, rate and time left.

    progress = Progress("Writing features to train.tf_record", len(examples))
    for example in examples:
      ...
      progress.advance()
    progress.finish()

logs at most one line every `interval` seconds, e.g.
"Writing features to train.tf_record: 1200/3668 (32.7%), 850.2 examples/s,
3 s left", and one line at the end with the total time. The feature writers
of run_classifier.py, run_squad.py and extract_features.py use it.
"""

import time

from absl import logging


def format_seconds(seconds):
  """E.g. "42 s", "3 min 05 s", "2 h 10 min"."""
  seconds = int(round(seconds))
  if seconds < 60:
    return "%d s" % seconds
  if seconds < 3600:
    return "%d min %02d s" % divmod(seconds, 60)
  return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


class Progress(object):
  """Counts work done and logs how far along it is."""

  def __init__(self, what, total, unit="examples", interval=10.0,
               clock=time.monotonic, log=logging.info):
    """Starts counting.

    Args:
      what: what is being done, the start of every line.
      total: how much there is to do (None when unknown).
      unit: the plural noun of the rate ("examples" -> "examples/s").
      interval: seconds between two lines.
      clock: callable() -> seconds (monotonic).
      log: callable(format, *args) that writes a line.
    """
    self.what = what
    self.total = total
    self.unit = unit
    self.done = 0
    self._interval = interval
    self._clock = clock
    self._log = log
    self._start = clock()
    self._last = self._start

  def line(self):
    """The progress line for the work done so far."""
    elapsed = max(self._clock() - self._start, 1e-9)
    rate = self.done / elapsed
    if not self.total:
      return "%s: %d, %.1f %s/s" % (self.what, self.done, rate, self.unit)
    left = (self.total - self.done) / rate if rate > 0 else float("inf")
    return "%s: %d/%d (%.1f%%), %.1f %s/s, %s left" % (
        self.what, self.done, self.total, 100.0 * self.done / self.total,
        rate, self.unit, format_seconds(left) if left != float("inf")
        else "unknown time")

  def advance(self, count=1):
    """Adds `count` done; logs a line when `interval` seconds have passed."""
    self.done += count
    now = self._clock()
    if now - self._last >= self._interval:
      self._last = now
      self._log("%s", self.line())

  def finish(self):
    """Logs the total count and time."""
    elapsed = self._clock() - self._start
    self._log("%s: %d %s in %s.", self.what, self.done, self.unit,
              format_seconds(elapsed))
