"""Runs the project's scripts as `python <script> <args>` does, but fast.

Most of a failing script's time is the import of TensorFlow. A
`ScriptRunner` starts one helper process that imports TensorFlow and the
scripts' modules once, then forks a child per run; the child sets sys.argv,
runs the script file as __main__ (runpy) with its standard streams on files
(stdin /dev/null unless the run gives text), and exits with the script's
status, exactly as the interpreter would end it. The helper forks before
TensorFlow runs anything (no session, no thread pools), and each child
starts from that state.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Result = collections.namedtuple("Result", ["returncode", "stdout", "stderr"])

# A warning (or worse) of a script's progress report: the time of day, the
# level, the message (userio/verbosity.ProgressFormatter).
WARNING_LINE = re.compile(r"\d\d:\d\d:\d\d (?:Warning|Error|Critical): ")


def warning_lines(text):
  """The lines of a script's output that are warnings or errors."""
  return [line for line in text.splitlines() if WARNING_LINE.match(line)]

_HELPER = r'''
import json, os, runpy, signal, sys, tempfile, time, traceback
from userio import quiet_tensorflow  # Imports TensorFlow, as the scripts do first.
import extract_features, memory_plan, run_classifier  # noqa
import run_pretraining, run_squad  # noqa

WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC

def child(request):
  opened = {}  # One file for both streams when their paths are the same.
  for fd, name, mode in ((0, "stdin", os.O_RDONLY), (1, "stdout", WRITE),
                         (2, "stderr", WRITE)):
    if request[name] not in opened:
      opened[request[name]] = os.open(request[name], mode, 0o644)
    os.dup2(opened[request[name]], fd)
  for target in opened.values():
    os.close(target)
  # The helper's sys.stdin buffers its requests; the script reads its own.
  sys.stdin = open(0, encoding="utf-8", closefd=False)
  os.chdir(request["cwd"])
  # os._exit skips atexit, where TensorFlow deletes its autograph files;
  # temporary files made here go into the runner's folder, removed at close.
  tempfile.tempdir = os.environ["TMPDIR"] = request["tmpdir"]
  sys.argv = [request["script"]] + request["args"]
  status = 0
  try:
    runpy.run_path(request["script"], run_name="__main__")
  except SystemExit as e:
    if e.code is None:
      status = 0
    elif isinstance(e.code, int):
      status = e.code
    else:
      sys.stderr.write("%s\n" % e.code)
      status = 1
  except BaseException:  # What the interpreter prints and returns.
    traceback.print_exc()
    status = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)

for line in sys.stdin:
  request = json.loads(line)
  sys.stdout.flush()
  pid = os.fork()
  if pid == 0:
    child(request)
  print(json.dumps({"pid": pid}), flush=True)
  deadline = time.monotonic() + request["timeout"]
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      code = os.waitstatus_to_exitcode(status)
      break
    if time.monotonic() > deadline:
      os.kill(pid, signal.SIGKILL)
      os.waitpid(pid, 0)
      code = "timeout"
      break
    time.sleep(0.02)
  print(json.dumps({"returncode": code}), flush=True)
'''


class ScriptRunner(object):
  """One helper process; scripts run one at a time (`run`, or `start` and
  then `Running.wait`), then `close`."""

  def __init__(self, env=None):
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = REPO_ROOT
    self._process = subprocess.Popen(
        [sys.executable, "-c", _HELPER], cwd=REPO_ROOT, env=environment,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self._folder = tempfile.mkdtemp(prefix="script_runner_")

  def run(self, script, args, timeout, stdin=None, tmpdir=None):
    """Runs `script` (a path relative to the repository) with `args`, and
    the text `stdin` (or nothing) as its standard input; its temporary
    folder ($TMPDIR) is `tmpdir`, or one of the runner's.

    Raises:
      subprocess.TimeoutExpired: the run took more than `timeout` seconds.
    """
    return self.start(script, args, timeout, stdin, tmpdir=tmpdir).wait()

  def start(self, script, args, timeout, stdin=None, output_path=None,
            tmpdir=None):
    """Starts a run as `run` does and returns its `Running` (its pid is
    that of the script's process, which may be signalled). With
    `output_path`, both output streams go to that file in the order
    written, and the Result's stderr is empty."""
    if output_path is None:
      paths = [os.path.join(self._folder, name) for name in ("out", "err")]
    else:
      paths = [output_path] * 2
    stdin_path = os.devnull
    if stdin is not None:
      stdin_path = os.path.join(self._folder, "in")
      with open(stdin_path, "w", encoding="utf-8") as f:
        f.write(stdin)
    request = {"script": os.path.join(REPO_ROOT, script), "args": list(args),
               "cwd": REPO_ROOT, "stdin": stdin_path, "stdout": paths[0],
               "stderr": paths[1], "tmpdir": tmpdir or self._folder,
               "timeout": timeout}
    self._process.stdin.write(json.dumps(request) + "\n")
    self._process.stdin.flush()
    pid = self.next_reply()["pid"]
    return Running(self, pid, [script] + list(args), timeout, paths)

  def next_reply(self):
    """The helper's next message (a dict)."""
    line = self._process.stdout.readline()
    if not line:
      raise RuntimeError("The script runner's helper process died.")
    return json.loads(line)

  def close(self):
    self._process.stdin.close()
    try:
      self._process.wait(timeout=60)
    except subprocess.TimeoutExpired:
      self._process.kill()
      self._process.wait(timeout=60)
    shutil.rmtree(self._folder, ignore_errors=True)


class Running(object):
  """A script started by `ScriptRunner.start`."""

  def __init__(self, runner, pid, command, timeout, paths):
    """`paths`: the files of stdout and stderr (the same file twice when
    both streams share one)."""
    self.pid = pid
    self._runner = runner
    self._command = command
    self._timeout = timeout
    self._paths = paths

  def alive(self):
    """Whether the script's process is still running: it exists and is not
    a zombie (one that has ended stays in the process table until the
    helper, which polls every 20 ms, reaps it; a signal sent to it then
    does nothing)."""
    try:
      with open("/proc/%d/stat" % self.pid, encoding="ascii") as f:
        stat = f.read()
    except OSError:
      return False
    # The state follows the command name, which is in parentheses.
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")

  def signal(self, signum):
    """Sends `signum` to the script's process, if it still exists."""
    try:
      os.kill(self.pid, signum)
    except ProcessLookupError:
      pass

  def wait(self):
    """The Result, once the script has ended.

    Raises:
      subprocess.TimeoutExpired: the script outlived its timeout (the
        helper has killed it).
    """
    returncode = self._runner.next_reply()["returncode"]
    if returncode == "timeout":
      raise subprocess.TimeoutExpired(self._command, self._timeout)
    stdout_path, stderr_path = self._paths
    stderr = "" if stderr_path == stdout_path else _read(stderr_path)
    return Result(returncode, _read(stdout_path), stderr)


# What TensorFlow logs each time it loads a kernel from the suite's shared
# compilation cache (tests/conftest.py): it first tries the entry as text,
# and it flags a CPU feature name of its own compiler as unsupported. A
# user's run has no such cache and never prints these lines.
_COMPILATION_CACHE_NOISE = re.compile(
    r"^E\d{4} [^\]]*\] (Error parsing text-format "
    r"tensorflow\.XlaSerializedCacheEntry|Loading XLA:CPU AOT result\. )")


def without_compilation_cache_noise(text):
  """`text` without the lines the shared compilation cache makes TensorFlow
  log when a kernel is loaded from it."""
  return "".join(line for line in text.splitlines(keepends=True)
                 if not _COMPILATION_CACHE_NOISE.match(line))


def _read(path):
  with open(path, encoding="utf-8", errors="replace") as f:
    return without_compilation_cache_noise(f.read())
