"""Shared pytest fixtures: the real assets beside the checkout, and results
that expensive fixtures build once for all xdist workers."""
import atexit
import fcntl
import importlib
import os
import shutil
import signal
import tempfile
import time

import pytest
# Registers the op of the text signature that exported classifiers hold, for
# the tests that load an export themselves (predictor.py does it on its own).
import tensorflow_text  # pylint: disable=unused-import

import script_runner as script_runner_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _interruptible_as_from_a_terminal():
  """Gives SIGINT and SIGTERM their usual handling in this process, so the
  commands the tests start get them as a terminal's commands do.

  A POSIX shell without job control starts a background job (`make test &`
  in a script, a CI step's runner) with SIGINT ignored; Python keeps an
  ignored SIGINT at start-up, and every process started from here would
  inherit it through exec and never see Ctrl-C. A blocked signal is
  inherited the same way.
  """
  if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
  if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


_interruptible_as_from_a_terminal()

XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory="


def _share_compiled_kernels():
  """Lets every TensorFlow process of this pytest run reuse XLA executables.

  Each new session compiles the XLA kernels again (the optimizer's update,
  GELU's passes, the dropout masks), most of a tiny training run's first
  step, and the suite's many tiny runs share their shapes. TensorFlow's
  persistent compilation cache (written atomically, checked against the HLO
  on load) lets them compile once. The first process (the controller, before
  it starts xdist workers) makes the folder, its children inherit it through
  TF_XLA_FLAGS, and it is removed when that process exits.
  """
  flags = os.environ.get("TF_XLA_FLAGS", "")
  if XLA_CACHE_FLAG in flags:
    return
  folder = tempfile.mkdtemp(prefix="bert_tests_xla_cache_")
  atexit.register(shutil.rmtree, folder, ignore_errors=True)
  os.environ["TF_XLA_FLAGS"] = (flags + " " + XLA_CACHE_FLAG + folder).strip()


def env_without_compilation_cache():
  """os.environ without the shared compilation cache, for a test that
  counts XLA compilations."""
  env = dict(os.environ)
  flags = [flag for flag in env.get("TF_XLA_FLAGS", "").split()
           if not flag.startswith(XLA_CACHE_FLAG)]
  env["TF_XLA_FLAGS"] = " ".join(flags)
  return env


_share_compiled_kernels()

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared", "assets")
MINILM_DIR = os.path.join(ASSETS_DIR, "models", "minilm-l6-h384-uncased")


def load_bench_script(name):
  """The module bench.<name>, imported as any module (the repository's root
  is on the tests' module search path, see pytest.ini)."""
  return importlib.import_module("bench." + name)


def pytest_collection_modifyitems(items):
  """Runs the tests marked slow first, each group in collection order.

  With work stealing (`-n 3 --dist worksteal`, the Makefile's), the fast
  tests then fill the gaps at the end instead of one worker finishing a
  long test alone.
  """
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _signal_state():
  """How this process treats SIGINT and SIGTERM: each one's handler, and
  which signals its main thread blocks. A command started from here
  inherits an ignored or blocked signal through exec."""
  return ({signum: signal.getsignal(signum)
           for signum in (signal.SIGINT, signal.SIGTERM)},
          signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.fixture(autouse=True)
def signals_left_as_found():
  """Fails a test that leaves SIGINT's or SIGTERM's handling changed: the
  tests after it on the same worker would start their commands with it."""
  before = _signal_state()
  yield
  after = _signal_state()
  if after != before:
    pytest.fail("The test left the signal handling changed: %r became %r."
                % (before, after), pytrace=False)


@pytest.fixture(scope="session")
def assets_dir():
  """Root of ../shared/assets (read-only real data); fails loudly if absent."""
  if not os.path.isdir(ASSETS_DIR):
    pytest.fail("Expected the shared assets at %s (see README)." % ASSETS_DIR)
  return ASSETS_DIR


@pytest.fixture(scope="session")
def minilm_dir(assets_dir):
  """The real pretrained MiniLM model in Google's checkpoint layout."""
  return MINILM_DIR


def _script_env():
  """The environment the scripts run in: this process's without TF_CONFIG
  (a test chooses its own distribution)."""
  env = dict(os.environ)
  env.pop("TF_CONFIG", None)
  return env


@pytest.fixture(scope="session")
def script_runner():
  """The worker's script_runner.ScriptRunner: each run is a fork of one
  helper that has imported TensorFlow and the scripts already, which saves
  the seconds of importing them in every run. The helper's environment is
  _script_env(); tests that need another environment before TensorFlow
  starts run their own subprocess."""
  runner = script_runner_module.ScriptRunner(_script_env())
  yield runner
  runner.close()


@pytest.fixture(scope="session")
def run_script(script_runner):  # pylint: disable=redefined-outer-name
  """run_script(script, args, timeout=600, stdin=None) -> Result(returncode,
  stdout, stderr) of `python <script> <args>` from the repository root,
  with the text `stdin` as standard input (none by default)."""
  return lambda script, args, timeout=600, stdin=None: script_runner.run(
      script, args, timeout, stdin)


def run_logged(run_script, script, args, log_path, timeout=900):
  """Runs `script` with `args` through `run_script`, which must succeed;
  writes its stdout and stderr to `log_path` and returns them."""
  result = run_script(script, args, timeout)
  text = result.stdout + result.stderr
  with open(log_path, "w") as log:
    log.write(text)
  assert result.returncode == 0, text[-3000:]
  return text


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory):
  """A folder shared by every xdist worker of this test session."""
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent
  path = base / "built_once"
  path.mkdir(exist_ok=True)
  return path


def build_once(shared_dir, name, build):
  """Runs `build(folder)` once per test session, whichever worker asks
  first; the others wait for it and reuse the folder. A build that failed
  is tried again by the next caller.

  Returns:
    The folder's path (str).
  """
  folder = shared_dir / name
  with open(str(shared_dir / (name + ".lock")), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (folder / ".complete").exists():
      if folder.exists():
        shutil.rmtree(str(folder))
      folder.mkdir()
      build(str(folder))
      (folder / ".complete").touch()
  return str(folder)


def checkpoint_step(output_dir):
  """The step of the newest checkpoint in `output_dir`
  (checkpoint_checks.latest_checkpoint), or None before the first one."""
  from checkpoints import checkpoint_checks  # pylint: disable=import-outside-toplevel
  latest = checkpoint_checks.latest_checkpoint(output_dir)
  return int(latest.rsplit("-", 1)[1]) if latest else None


def signal_after_first_update_saved(runner, script, args, output_dir,
                                    log_path, signum, timeout=600):
  """Runs `python <script> <args>` through the ScriptRunner `runner`,
  sends `signum` to it once `output_dir` holds a checkpoint past step 0
  (a new run saves its starting point first), and waits for it.

  Its output goes to `log_path`. Returns its exit status (negative: ended
  by a signal).

  Raises:
    subprocess.TimeoutExpired: the run outlived `timeout` (it was killed).
  """
  running = runner.start(script, args, timeout, output_path=log_path)
  deadline = time.monotonic() + timeout
  while (running.alive() and time.monotonic() < deadline and
         not checkpoint_step(output_dir)):
    time.sleep(0.01)
  running.signal(signum)
  return running.wait().returncode


# The user property under which tests/test_chaos.py records each trial.
CHAOS_PROPERTY = "chaos_trial"


def pytest_terminal_summary(terminalreporter):
  """After the tests, the fault-injection trials of tests/test_chaos.py:
  per fault kind, how many were tried and how many survived (their test
  passed). The trials come from the reports' user properties, which xdist
  carries from its workers."""
  counts = {}
  for reports in terminalreporter.stats.values():
    for report in reports:
      if getattr(report, "when", None) != "call":
        continue
      for key, value in getattr(report, "user_properties", ()):
        if key == CHAOS_PROPERTY:
          tried_survived = counts.setdefault(value["fault"], [0, 0, set()])
          tried_survived[0] += 1
          tried_survived[1] += int(report.passed)
          tried_survived[2].add(value["command"])
  if counts:
    terminalreporter.write_sep("-", "fault injection (tests/test_chaos.py)")
    for fault in sorted(counts):
      tried, survived, commands = counts[fault]
      terminalreporter.write_line(
          "%s: tried %d, survived %d (%s)" % (
              fault, tried, survived, ", ".join(sorted(commands))))
