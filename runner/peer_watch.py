# coding=utf-8
"""Ends a multi-worker process stuck in a collective with a dead peer.

TensorFlow's coordination service notices a worker that died by its missing
heartbeats and aborts the collectives in flight, which the training loop
reports as failures.WorkerFailedError in one line. A collective that starts
after that abort (the stop vote after an update, when the peer died during
the update) is not aborted and waits for the dead peer forever. While the
loop waits in a collective, a thread here looks at the other workers'
servers once the wait has lasted longer than TensorFlow takes to notice a
death; when one no longer accepts connections, it writes the loop's one
line and ends the process. A peer that is alive (busy with an evaluation
the others wait for, say) is never a reason to stop.
"""

import contextlib
import os
import sys
import threading
import time

from runner import distribution
from userio import cli

# Longer than the coordination service takes to report a dead worker (its
# heartbeat timeout, 10 s by default, several times over), so that its
# report, when it comes, is the one the user reads.
GRACE_SECONDS = 60.0
_POLL_SECONDS = 5.0


class PeerWatch(object):
  """Watches the waits of one process of a multi-worker cluster.

  Args:
    line: a function of the addresses (host:port) that no longer answer,
      returning the line to end the process with.
    addresses: a function returning the host:port of the other workers.
    grace_seconds: how long a wait lasts before the peers are looked at.
    poll_seconds: how often the thread looks.
  """

  def __init__(self, line, addresses=distribution.other_addresses,
               grace_seconds=GRACE_SECONDS, poll_seconds=_POLL_SECONDS):
    self._line = line
    self._addresses = addresses
    self._grace_seconds = grace_seconds
    self._poll_seconds = poll_seconds
    self._since = None
    thread = threading.Thread(target=self._watch, name="peer_watch",
                              daemon=True)
    thread.start()

  @contextlib.contextmanager
  def waiting(self):
    """The block is a wait that a dead peer can make endless."""
    self._since = time.monotonic()
    try:
      yield
    finally:
      self._since = None

  def _watch(self):
    while True:
      time.sleep(self._poll_seconds)
      since = self._since
      if since is None or time.monotonic() - since < self._grace_seconds:
        continue
      gone = [address for address in self._addresses()
              if not distribution.accepts(address)]
      if gone and self._since == since:
        _end(self._line(gone))


def _end(line):
  """Writes `line` as the process's last line and ends it at once: the
  main thread is blocked in TensorFlow and cannot unwind. Checkpoints are
  written whole or not at all, so the relaunch resumes from the last one."""
  sys.stdout.flush()
  sys.stderr.write(line + "\n")
  sys.stderr.flush()
  os._exit(cli.FAILURE_STATUS)  # pylint: disable=protected-access
