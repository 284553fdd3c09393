# coding=utf-8
"""Runs reproduce.py's steps: resumable, one per device at a time.

Each step runs as `python <script> <flags>` in a child process with
CUDA_VISIBLE_DEVICES set to its device, stdout and stderr going to
stdout.log and stderr.log in the step's folder. Before starting, the step's
command goes to step.json there; after it, the attempt's exit status and
wall time, and, when it succeeded, the size and sha256 of each of its done
files (userio/sidecars.py). A step is done when step.json holds the same
command and its done files are still the files recorded (a record of an
older version, without them, when they exist; they are recorded then):
such steps are skipped, so a grid run again after a kill redoes only what was not
finished; a done file that was changed, cut short or damaged since has its
step run again, with a line saying why. A step that was killed is started
again with the same command, and the training scripts resume from the
checkpoint in its folder. A step whose folder holds a different command is
started over in an emptied folder.

A step whose folder is locked by a live run (userio/folder_lock.py: the
cell's script holds its --output_dir's lock while it runs, e.g. in another
reproduce.py of the same grid) is not started; it is reported as failed,
naming that run.

A failing step does not stop the others; it is reported with its exit
status and the last line of its stderr. A full disk while the scheduler
writes a step's record or logs fails that step with one line
(userio/disk_space.py).
"""

import dataclasses
import datetime
import json
import os
import queue
import shutil
import subprocess
import threading
import time

from userio import cli
from userio import disk_space
from userio import folder_lock
from userio import sidecars

RECORD = "step.json"
CPU = "cpu"
# step.json's record of the done files of the attempt that succeeded.
DONE_FILES = "done_files"
# The exit status reported for a step not started because its folder is
# locked: the status its script ends with when it refuses the folder.
LOCKED_STATUS = cli.USAGE_STATUS


@dataclasses.dataclass
class Outcome:
  """How a step ended in this run ("done", "skipped" or "failed")."""
  status: str
  exit_status: int = 0
  last_stderr_line: str = ""
  wall_seconds: float = 0.0


def _record_path(step):
  return os.path.join(step.output_dir, RECORD)


def read_record(step):
  """The step's step.json as a dict, or None if absent or unreadable."""
  try:
    with open(_record_path(step)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def _write_record(step, record):
  path = _record_path(step)
  with open(path + ".tmp", "w") as f:
    json.dump(record, f, indent=2)
  os.replace(path + ".tmp", path)


def why_not_done(step):
  """None when the step is done: step.json holds its command and its done
  files are those recorded when it succeeded; else why not (a reason
  worth telling a user when the step had succeeded, else "")."""
  record = read_record(step)
  if record is None or record.get("command") != list(step.args):
    return ""
  recorded = record.get(DONE_FILES)
  if recorded is None:
    # A record of an older version, which kept no checksums: its step is
    # done when its done files exist (`_adopt` then records them).
    return None if _have_done_files(step) else ""
  if set(recorded) != set(step.done_files):
    return "its done files changed (%s)" % ", ".join(step.done_files)
  return sidecars.check_files(step.output_dir, recorded)


def is_done(step):
  """True if step.json holds the step's command and its done files are
  the ones recorded when it succeeded (same size and sha256)."""
  return why_not_done(step) is None


def _have_done_files(step):
  return all(os.path.exists(os.path.join(step.output_dir, name))
             for name in step.done_files)


def _record_done_files(step, record):
  """Adds the size and sha256 of the step's done files to `record`, when
  they all exist."""
  if _have_done_files(step):
    record[DONE_FILES] = sidecars.describe_files(step.output_dir,
                                                 step.done_files)


def _adopt(step):
  """Records the done files of a done step whose step.json has none (an
  older version's), so that later runs verify them."""
  record = read_record(step)
  if record is not None and DONE_FILES not in record:
    _record_done_files(step, record)
    _write_record(step, record)


def total_wall_seconds(step):
  """Wall time of all the step's recorded attempts."""
  record = read_record(step) or {}
  return sum(a.get("wall_seconds", 0.0) for a in record.get("attempts", ()))


def last_line(path):
  """The last non-empty line of a text file ("" if none)."""
  try:
    with open(path, "rb") as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 65536))
      lines = f.read().decode("utf-8", "replace").splitlines()
  except OSError:
    return ""
  for line in reversed(lines):
    if line.strip():
      return line.strip()
  return ""


def _prepare_folder(step):
  """Creates the step's folder; empties one holding another command.

  Only folders that a step made (they hold step.json) are ever emptied.
  Returns the record to continue (its attempts kept on a resume).
  """
  record = read_record(step)
  if record is not None and record.get("command") != list(step.args):
    shutil.rmtree(step.output_dir)
    record = None
  os.makedirs(step.output_dir, exist_ok=True)
  return record or {"command": list(step.args), "attempts": []}


def device_env(device, base_env):
  """The environment of a child on `device` (a GPU index or "cpu")."""
  env = dict(base_env)
  env["CUDA_VISIBLE_DEVICES"] = "" if device == CPU else str(device)
  return env


def run_step(step, python, device, env=None, processes=None):
  """Runs one step to its end on `device`; returns its Outcome.

  processes: a set the running child is added to while it runs, so that an
  interrupted grid can stop it.
  """
  owner = folder_lock.held_by(step.output_dir)
  if owner is not None:
    return Outcome("failed", LOCKED_STATUS, "not started: %s is in use by "
                   "another run (%s)" % (step.output_dir,
                                         folder_lock.describe(owner)),
                   total_wall_seconds(step))
  try:
    return _run_child(step, python, device, env, processes)
  except OSError as e:
    failure = disk_space.failure_of(e)
    if failure is None:
      raise
    return Outcome("failed", cli.FAILURE_STATUS, str(failure),
                   total_wall_seconds(step))


def _run_child(step, python, device, env, processes):
  """run_step once the step's folder is free to use."""
  record = _prepare_folder(step)
  record.pop(DONE_FILES, None)
  attempt = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
             "device": str(device)}
  record["attempts"].append(attempt)
  _write_record(step, record)
  stderr_path = os.path.join(step.output_dir, "stderr.log")
  start = time.monotonic()
  with open(os.path.join(step.output_dir, "stdout.log"), "ab") as out, \
      open(stderr_path, "ab") as err:
    child = subprocess.Popen([python] + list(step.args), stdout=out,
                             stderr=err, cwd=step.output_dir,
                             env=device_env(device, env or os.environ))
    if processes is not None:
      processes.add(child)
    try:
      exit_status = child.wait()
    finally:
      if processes is not None:
        processes.discard(child)
  attempt["wall_seconds"] = round(time.monotonic() - start, 3)
  attempt["exit_status"] = exit_status
  if exit_status == 0:
    _record_done_files(step, record)
  _write_record(step, record)
  if exit_status == 0 and is_done(step):
    return Outcome("done", 0, "", total_wall_seconds(step))
  message = last_line(stderr_path)
  if exit_status == 0:
    message = "exited 0 without writing %s" % ", ".join(step.done_files)
  return Outcome("failed", exit_status, message, total_wall_seconds(step))


def _duration(seconds):
  seconds = int(round(seconds))
  if seconds < 3600:
    return "%dm%02ds" % divmod(seconds, 60)
  return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


class Progress:
  """Counts steps over a whole grid and words the progress line.

  Time left: the mean wall time of the steps finished in this run, times
  the steps still to do, over the number of devices. `what` names the
  steps in the line ("cells" for training, "test predictions" after).
  """

  def __init__(self, total, num_devices, clock=time.monotonic, what="cells"):
    self.total = total
    self.num_devices = num_devices
    self.what = what
    self.clock = clock
    self.start = clock()
    self.done = self.failed = self.skipped = self.running = 0
    self.timed = []

  def line(self):
    finished = self.done + self.failed + self.skipped
    text = ("%s %d/%d finished (%d skipped as done, %d failed, "
            "%d running)" % (self.what, finished, self.total, self.skipped,
                             self.failed, self.running))
    text += ", %s elapsed" % _duration(self.clock() - self.start)
    remaining = self.total - finished
    if remaining and self.timed:
      mean = sum(self.timed) / len(self.timed)
      text += ", about %s left" % _duration(
          mean * remaining / min(self.num_devices, remaining))
    elif remaining:
      text += ", time left known once one finishes"
    return text


def run_steps(steps, python, devices, log=print, env=None, what="cells",
              stop_requested=None):
  """Runs `steps`, one per device at a time; returns {name: Outcome}.

  `what` names the steps in the progress lines (see `Progress`).

  Steps already done are skipped. On KeyboardInterrupt the running children
  are terminated (their folders keep what they wrote, for a later resume);
  so they are when `stop_requested` (a callable, looked at every second)
  returns True, and KeyboardInterrupt is raised then.
  """
  progress = Progress(len(steps), len(devices), what=what)
  outcomes = {}
  pending = queue.Queue()
  for step in steps:
    reason = why_not_done(step)
    if reason is None:
      _adopt(step)
      outcomes[step.name] = Outcome("skipped", 0, "", total_wall_seconds(step))
      progress.skipped += 1
    else:
      if reason:
        log("run %s again: %s" % (step.name, reason))
      pending.put(step)
  if steps:
    log(progress.line())
  lock = threading.Lock()
  processes = set()
  stop = threading.Event()

  def worker(device):
    while not stop.is_set():
      try:
        step = pending.get_nowait()
      except queue.Empty:
        return
      with lock:
        progress.running += 1
        log("start %s on %s" % (step.name, device))
      outcome = run_step(step, python, device, env, processes)
      with lock:
        outcomes[step.name] = outcome
        progress.running -= 1
        if outcome.status == "done":
          progress.done += 1
          progress.timed.append(outcome.wall_seconds)
          log("done %s in %s" % (step.name, _duration(outcome.wall_seconds)))
        else:
          progress.failed += 1
          log("FAILED %s (exit status %d): %s" % (
              step.name, outcome.exit_status, outcome.last_stderr_line))
        log(progress.line())

  threads = [threading.Thread(target=worker, args=(device,), daemon=True)
             for device in devices]
  for thread in threads:
    thread.start()
  try:
    for thread in threads:
      while thread.is_alive():
        if stop_requested is not None and stop_requested():
          raise KeyboardInterrupt()
        thread.join(timeout=1.0)
  except KeyboardInterrupt:
    stop.set()
    for child in list(processes):
      child.terminate()
    # The workers record the stopped attempts and take no new step.
    for thread in threads:
      thread.join(timeout=60)
    raise
  return outcomes


def detect_devices(env=None, which=shutil.which, run=subprocess.run):
  """The GPUs to spread cells over, as CUDA indices; ["cpu"] if none.

  CUDA_VISIBLE_DEVICES, when set, lists them; else `nvidia-smi -L` does.
  """
  env = os.environ if env is None else env
  visible = env.get("CUDA_VISIBLE_DEVICES")
  if visible is not None:
    ids = [d.strip() for d in visible.split(",") if d.strip()]
    return ids or [CPU]
  if which("nvidia-smi") is None:
    return [CPU]
  try:
    listing = run(["nvidia-smi", "-L"], capture_output=True, text=True,
                  timeout=30)
  except (OSError, subprocess.SubprocessError):
    return [CPU]
  ids = [line.split(":")[0].split()[1] for line in listing.stdout.splitlines()
         if line.startswith("GPU ")]
  return ids or [CPU]
