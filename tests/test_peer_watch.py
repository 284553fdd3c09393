"""runner/peer_watch.py in a process of its own: a wait that lasts past the
grace with a peer whose port no longer accepts connections ends the
process in the given line, status 1; a wait on a live peer, or a dead peer
outside a wait, ends nothing."""
import socket
import subprocess
import sys

import conftest

_CHILD = r"""
import sys, time
from runner import peer_watch
address, wait = sys.argv[1], sys.argv[2] == "wait"
watch = peer_watch.PeerWatch(lambda gone: "stopped: %s is gone" % gone[0],
                             addresses=lambda: [address], grace_seconds=0.5,
                             poll_seconds=0.1)
if wait:
  with watch.waiting():
    time.sleep(float(sys.argv[3]))
else:
  time.sleep(float(sys.argv[3]))
print("finished")
"""


def _run(address, wait, seconds):
  return subprocess.run(
      [sys.executable, "-c", _CHILD, address, "wait" if wait else "no",
       str(seconds)], cwd=conftest.REPO_ROOT, capture_output=True, text=True,
      timeout=120, check=False,
      env=dict(conftest.env_without_compilation_cache(),
               PYTHONPATH=conftest.REPO_ROOT))


def _closed_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return "127.0.0.1:%d" % s.getsockname()[1]


def test_a_wait_on_a_dead_peer_ends_in_the_line():
  address = _closed_port()
  result = _run(address, True, 60)
  assert (result.returncode, result.stdout) == (1, "")
  assert result.stderr.splitlines()[-1] == "stopped: %s is gone" % address


def test_a_live_peer_or_no_wait_ends_nothing():
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    live = _run("127.0.0.1:%d" % server.getsockname()[1], True, 1.5)
  assert (_stdout(live), live.returncode) == ("finished", 0)
  idle = _run(_closed_port(), False, 1.5)
  assert (_stdout(idle), idle.returncode) == ("finished", 0)


def _stdout(result):
  return result.stdout.strip()
