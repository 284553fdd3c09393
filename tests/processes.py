"""Processes of a command under test, seen through /proc: waiting for a
state, the workers a run started, and a run whose Beam worker is killed."""
import os
import signal
import subprocess
import sys
import time

# How Beam's local runners start an SDK worker process.
_BEAM_WORKER = [sys.executable.encode(), b"-m",
                b"apache_beam.runners.worker.sdk_worker_main"]


def wait_for(condition, seconds):
  """Polls `condition()` until it is true (True) or `seconds` pass
  (False)."""
  deadline = time.monotonic() + seconds
  while not condition():
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


def _stat_fields(pid):
  """The fields of /proc/<pid>/stat after the command name (state first),
  or None when the process is gone."""
  try:
    with open("/proc/%s/stat" % pid, encoding="ascii") as f:
      return f.read().rpartition(")")[2].split()
  except OSError:
    return None


def running(pid):
  """Whether process `pid` exists and is no zombie."""
  fields = _stat_fields(pid)
  return fields is not None and fields[0] not in ("Z", "X")


def _all_pids():
  return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(pid):
  """The pids of the processes below `pid`."""
  children = {}
  for child in _all_pids():
    fields = _stat_fields(child)
    if fields:
      children.setdefault(int(fields[1]), []).append(child)
  found, todo = [], [pid]
  while todo:
    for child in children.get(todo.pop(), []):
      found.append(child)
      todo.append(child)
  return found


def _command_line(pid):
  try:
    with open("/proc/%d/cmdline" % pid, "rb") as f:
      return f.read().split(b"\0")
  except OSError:
    return []


def beam_workers(pid):
  """The Python processes of Beam's SDK workers below `pid` (not the
  shells that start them)."""
  return [p for p in descendants(pid) if _command_line(p)[:3] == _BEAM_WORKER]


def session_processes(sid):
  """The live processes of session `sid`."""
  found = []
  for pid in _all_pids():
    fields = _stat_fields(pid)
    if fields and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
      found.append(pid)
  return found


def run_killing_a_beam_worker(command, env, started, seconds=240):
  """Runs `command` in a session of its own and, once `started()` is true
  and two Beam workers run below it, kills one of them (kill -9); waits
  for the run's end and for every process of its session to be gone.

  Returns:
    (exit status, stdout, stderr).
  """
  run = subprocess.Popen(command, cwd=os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
  try:
    assert wait_for(lambda: run.poll() is not None or (
        started() and len(beam_workers(run.pid)) == 2), seconds), (
            "the run never had two workers at work")
    assert run.poll() is None, run.communicate()[1][-3000:]
    os.kill(beam_workers(run.pid)[0], signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=seconds)
    assert wait_for(lambda: not session_processes(run.pid), 30), (
        session_processes(run.pid))
  finally:
    try:
      os.killpg(run.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass  # The run and its workers have ended.
    run.wait()
  return run.returncode, stdout, stderr
