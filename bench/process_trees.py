"""The memory of a command and every process it started, read from /proc.

A corpus job's memory is that of its launching process plus its workers
(forked, or started by Beam), so the benchmarks of those jobs sum over the
whole tree: the resident set (VmRSS, shared pages counted in each process)
and the proportional set (Pss, shared pages split among their users).
"""

import os
import re
import threading


def process_tree(pid):
  """`pid` and all its descendants."""
  children = {}
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open("/proc/%s/stat" % name) as f:
        # The command's name may hold spaces; the fields after it do not.
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
      continue
    children.setdefault(ppid, []).append(int(name))
  tree, stack = [], [pid]
  while stack:
    tree.append(stack.pop())
    stack.extend(children.get(tree[-1], []))
  return tree


def _kib(path, field):
  """A "field: N kB" value of a /proc file in bytes; 0 when gone."""
  try:
    with open(path) as f:
      match = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
  except OSError:
    return 0
  return int(match.group(1)) * 1024 if match else 0


def tree_memory(pid):
  """(summed VmRSS, summed Pss) in bytes over `pid`'s process tree."""
  pids = process_tree(pid)
  return (sum(_kib("/proc/%d/status" % p, "VmRSS") for p in pids),
          sum(_kib("/proc/%d/smaps_rollup" % p, "Pss") for p in pids))


class TreePeak(object):
  """The peaks of tree_memory(pid) (`rss`, `pss`), sampled every
  `interval` seconds in a thread until `stop`. With `max_rss_bytes`, a
  tree whose resident sets pass it is killed (`killed` is then True)."""

  def __init__(self, pid, interval, max_rss_bytes=None):
    self.pid, self.interval = pid, interval
    self.max_rss_bytes = max_rss_bytes
    self.rss = self.pss = 0
    self.killed = False
    self._done = threading.Event()
    # The first sample is taken here, before the thread starts: a command
    # that ends within milliseconds (on a loaded machine, before the thread
    # first runs) still has one.
    self._sample_once()
    self._thread = threading.Thread(target=self._sample, daemon=True)
    self._thread.start()

  def _sample_once(self):
    rss, pss = tree_memory(self.pid)
    self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
    if self.max_rss_bytes is not None and rss > self.max_rss_bytes:
      self._kill()

  def _sample(self):
    while not self._done.wait(self.interval):
      self._sample_once()

  def _kill(self):
    self.killed = True
    for pid in process_tree(self.pid):
      try:
        os.kill(pid, 9)
      except OSError:
        pass  # Already gone.

  def stop(self):
    self._done.set()
    self._thread.join()
