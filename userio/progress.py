# coding=utf-8
"""Progress lines for long loops: done / total, rate and time left.

    progress = Progress("Writing features to train.tf_record", len(examples))
    for example in examples:
      ...
      progress.advance()
    progress.finish()

logs at most one line every `interval` seconds, e.g.
"Writing features to train.tf_record: 1200/3668 (32.7%), 850.2 examples/s,
3 s left", and one line at the end with the total time. Work counted in
another measure than its unit, such as bytes shown as MB, gives a `scale`;
other things made on the way are shown as rates too
(`advance(..., documents=n)`), and amounts that are no rate, such as the
distinct words found so far, as they are
(`advance(..., sizes={"distinct words": n})`).
"""

import time

from absl import logging

from userio import verbosity


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
               clock=time.monotonic, log=None, scale=1):
    """Starts counting.

    Args:
      what: what is being done, the start of every line.
      total: how much there is to do (None when unknown).
      unit: the plural noun of the rate ("examples" -> "examples/s").
      interval: seconds between two lines.
      clock: callable() -> seconds (monotonic).
      log: callable(format, *args) that writes a line (None: absl's INFO
        log, where the lines before the end are marked as progress lines,
        verbosity.PROGRESS_LINE).
      scale: counted amounts per `unit`: the line shows done, total and
        rate divided by it (e.g. bytes counted, unit "MB", scale 1e6).
    """
    self.what = what
    self.total = total
    self.unit = unit
    self.scale = scale
    self.done = 0
    self.counts = {}
    self.sizes = {}
    self._interval = interval
    self._clock = clock
    self._log = log or logging.info
    self._log_progress = log or _log_progress_line
    self._start = clock()
    self._last = self._start

  def line(self):
    """The progress line for the work done so far."""
    elapsed = max(self._clock() - self._start, 1e-9)
    rate = self.done / elapsed
    amount = "%d" if self.scale == 1 else "%.1f"
    rates = "%.1f %s/s" % (rate / self.scale, self.unit) + "".join(
        ", %.1f %s/s" % (value / elapsed, name)
        for name, value in sorted(self.counts.items())) + "".join(
            ", {:,} {}".format(value, name)
            for name, value in sorted(self.sizes.items()))
    if not self.total:
      return ("%s: " + amount + ", %s") % (self.what, self.done / self.scale,
                                           rates)
    left = (self.total - self.done) / rate if rate > 0 else float("inf")
    return ("%s: " + amount + "/" + amount + " (%.1f%%), %s, %s left") % (
        self.what, self.done / self.scale, self.total / self.scale,
        100.0 * self.done / self.total, rates,
        format_seconds(left) if left != float("inf") else "unknown time")

  def advance(self, count=1, sizes=None, **counts):
    """Adds `count` done; logs a line when `interval` seconds have passed.

    Keyword arguments are running totals of other things made so far (e.g.
    documents=1200); the line shows them as rates. `sizes` maps names to
    integers shown as they are (e.g. {"distinct words": 5000}).
    """
    self.done += count
    self.counts.update(counts)
    self.sizes.update(sizes or {})
    now = self._clock()
    if now - self._last >= self._interval:
      self._last = now
      self._log_progress("%s", self.line())

  def finish(self):
    """Logs the total count and time."""
    elapsed = self._clock() - self._start
    amount = "%d" if self.scale == 1 else "%.1f"
    unit = (_singular(self.unit) if self.scale == 1 and self.done == 1
            else self.unit)
    self._log("%s: " + amount + " %s in %s.", self.what,
              self.done / self.scale, unit, format_seconds(elapsed))


def _singular(unit):
  """One of `unit`, a plural noun: "batches" -> "batch", "examples" ->
  "example"."""
  if unit.endswith(("ches", "shes", "sses")):
    return unit[:-2]
  return unit[:-1] if unit.endswith("s") else unit


def _log_progress_line(fmt, *args):
  """Logs a line that says how far a loop is, marked as such."""
  logging.info(fmt, *args, extra={verbosity.PROGRESS_LINE: True})
