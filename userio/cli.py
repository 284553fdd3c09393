# coding=utf-8
"""How every command-line script ends when something goes wrong.

A script hands its `main` to `run` (absl scripts) or `call` (argparse ones):

  * `UserError` (bad flags, files, configs, checkpoints, vocabularies) and a
    flag absl cannot parse end the program with ONE line on stderr,
    `<script>: error: <message>`, and exit status 2. The message names the
    flag, file or line and says how to fix it; no traceback.
  * Known failures of a run (out of memory, a loss that is no longer finite,
    a failed worker; runner/failures.py defines them, raised with their
    advice) end with "Training stopped. <advice>" (or "Evaluation
    stopped.", "Prediction stopped." when those run out of memory) and
    status 1.
  * A full disk, a read-only file system or a missing permission ends with
    one line naming the folder and what was being written (with about how
    much space it needs, when the writer knows: userio/disk_space.py),
    status 1.
  * Ctrl-C ends with one line, status 130. While training, the first Ctrl-C
    or SIGTERM lets the update under way finish and saves a checkpoint
    (failures.TrainingInterrupted); the line names it, and the status is
    128 + the signal's number (130, 143). Outside training, SIGTERM stops
    the command at once as Ctrl-C does (the files being written are
    removed, never left half-written), with one line and status 143.
  * Anything else is a bug: its traceback, then one line saying so and where
    to report it, status 1.

`--help` prints the first paragraph of the script's docstring and the help
of the flags a user needs (the script's key flags); `--helpfull` lists all.
Both exit with status 0. A script that loads TensorFlow calls
`answer_help(__name__, define_flags)` before its TensorFlow imports, so that
help comes in a moment rather than after the seconds TensorFlow takes to
load.

When the command ends, the output folders it locked are released
(userio/folder_lock.py). Library functions raise `UserError` (the class of
userio/user_errors.py, which this module re-exports) and never exit; it is
a ValueError, so callers that catch ValueError keep working. This module
imports no TensorFlow, and of the project only modules of userio that
import none either (disk_space, file_systems, user_errors), so light
scripts stay light.
"""

import gc
import os
import re
import signal
import sys
import threading
import traceback

from absl import app
from absl import flags

from userio import disk_space
from userio import file_systems
from userio import user_errors

USAGE_STATUS = 2
FAILURE_STATUS = 1
INTERRUPTED_STATUS = 130
_TERMINATED_LINE = "%s: stopped by SIGTERM."
_RESEND_DELAY_SECONDS = 0.05

_HELP_ARGS = ("--help", "-help", "--helpshort", "-helpshort", "-?", "-h")
_HELPFULL_ARGS = ("--helpfull", "-helpfull")
# The runner's exceptions whose message is the advice (runner/failures.py).
_TRAINING_FAILURES = ("NonFiniteLossError", "OutOfMemoryError",
                      "WorkerFailedError")
# TensorFlow reads this variable once, when its CPU allocator starts: the
# most bytes that allocator may reserve (by default the machine's RAM). It
# aborts the process, with a C++ stack trace, on a value it cannot read.
CPU_ALLOCATOR_CAP = "TF_MKL_ALLOC_MAX_BYTES"


# Defined in its own module so that file_systems, which this module imports
# (itself and through disk_space), can raise it without importing cli back.
UserError = user_errors.UserError


class Terminated(KeyboardInterrupt):
  """SIGTERM arrived where no code of the command asked for it (a training
  loop does: it saves a checkpoint first). A KeyboardInterrupt, so that
  what cleans up after Ctrl-C cleans up after SIGTERM too."""


class StopOnSigterm(object):
  """Context that makes SIGTERM raise Terminated, where it would otherwise
  end the process on the spot (its default handler, in the main thread,
  where handlers are set), and remembers that it came: raised inside a
  C extension's callback, the exception can come out as another one (a
  TypeError from TensorFlow's nest.flatten), which is then the signal's
  doing, not a bug.

  Where Python cannot let an exception out (a hook that os.fork runs, a
  finalizer), it reports it to sys.unraisablehook and goes on; the context's
  hook then has SIGTERM sent again, so that Terminated is raised at the next
  point that can raise it instead of being lost (a run that forks workers
  went on to its end).

  Attributes:
    received: whether SIGTERM came while the context was entered.
  """

  def __init__(self):
    self.received = False
    self._installed = False
    self._unraisable_hook = None

  def _raise(self, signum, frame):
    del signum, frame  # Unused.
    self.received = True
    raise Terminated()

  def _raise_again(self, unraisable):
    if issubclass(unraisable.exc_type, Terminated):
      # A moment later, from another thread: sent at once, the signal would
      # be handled (and lost again) before this hook returns. Should it land
      # in such a place again, this hook sends it once more.
      resend = threading.Timer(_RESEND_DELAY_SECONDS, os.kill,
                               (os.getpid(), signal.SIGTERM))
      resend.daemon = True
      resend.start()
    else:
      self._unraisable_hook(unraisable)

  def __enter__(self):
    if (threading.current_thread() is threading.main_thread() and
        signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
      signal.signal(signal.SIGTERM, self._raise)
      self._unraisable_hook = sys.unraisablehook
      sys.unraisablehook = self._raise_again
      self._installed = True
    return self

  def __exit__(self, *unused_exc_info):
    if self._installed:
      signal.signal(signal.SIGTERM, signal.SIG_DFL)
      sys.unraisablehook = self._unraisable_hook
    return False


def program_name():
  """The script's file name, as the user typed it (e.g. run_classifier.py)."""
  return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else (
      "python")


def _one_line(text):
  return " ".join(str(text).split())


def _exit(status, line):
  """Prints `line` alone as the last line of stderr and exits."""
  sys.stdout.flush()
  sys.stderr.flush()
  sys.stderr.write(line + "\n")
  sys.stderr.flush()
  # Nothing may follow the line: native code still logs while the process
  # ends (a cluster's coordination agent, in several lines, when a peer
  # died first).
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  os.close(devnull)
  sys.exit(status)


def error_line(message):
  """`<script>: error: <message>` on one line."""
  return "%s: error: %s" % (program_name(), _one_line(message))


def training_failure(error):
  """The advice of a known training failure, or None.

  Only the runner raises these, and runner/failures.py defines them, so an
  exception can be one only when that module was imported; looking it up in
  sys.modules keeps this module free of TensorFlow.
  """
  failures = sys.modules.get("runner.failures")
  if failures is None:
    return None
  kinds = tuple(getattr(failures, name) for name in _TRAINING_FAILURES
                if hasattr(failures, name))
  if kinds and isinstance(error, kinds):
    # An out-of-memory error may come from evaluation or prediction too.
    return "%s stopped. %s" % (getattr(error, "activity", "Training"), error)
  return None


def _training_interrupted(error):
  """The signal number of a failures.TrainingInterrupted, or None."""
  failures = sys.modules.get("runner.failures")
  kind = getattr(failures, "TrainingInterrupted", None)
  return error.signum if kind is not None and isinstance(error, kind) else None


def _release_folder_locks():
  """Releases the output folders this run locked, if it locked any (looked
  up in sys.modules, as `training_failure` does, so that a command that
  locks nothing imports nothing for it)."""
  folder_lock = sys.modules.get("userio.folder_lock")
  if folder_lock is not None:
    folder_lock.release_all()


def check_cpu_allocator_cap(environ):
  """UserError unless `environ` leaves TF_MKL_ALLOC_MAX_BYTES unset or sets
  it to a positive whole number of bytes."""
  value = environ.get(CPU_ALLOCATOR_CAP)
  if value is None:
    return
  # ASCII digits only: str.isdigit also takes characters such as "²",
  # which int() and TensorFlow refuse.
  if not re.fullmatch(r"\s*[0-9]+\s*", value) or int(value) == 0:
    raise UserError(
        "%s=%s must be a positive whole number of bytes (e.g. 6012954214 for "
        "5.6 GiB), or unset: TensorFlow aborts on any other value." % (
            CPU_ALLOCATOR_CAP, value))


def call(main, *args):
  """Runs `main(*args)` and ends the program as the module docstring says.

  Returns:
    What `main` returns, when it returns.
  """
  sigterm = StopOnSigterm()
  try:
    with sigterm:
      check_cpu_allocator_cap(os.environ)
      file_systems.load_file_systems(sys.argv)
      return main(*args)
  except (UserError, app.UsageError) as e:
    _exit(USAGE_STATUS, error_line(e))
  except Terminated:
    _exit(128 + signal.SIGTERM, _TERMINATED_LINE % program_name())
  except KeyboardInterrupt:
    _exit(INTERRUPTED_STATUS, "%s: interrupted." % program_name())
  except disk_space.WriteFailed as e:
    _exit(FAILURE_STATUS, error_line(e))
  except Exception as e:  # pylint: disable=broad-except
    if sigterm.received:
      _exit(128 + signal.SIGTERM, _TERMINATED_LINE % program_name())
    signum = _training_interrupted(e)
    if signum is not None:
      _exit(128 + signum, "%s: %s" % (program_name(), _one_line(e)))
    advice = training_failure(e)
    if advice is not None:
      _exit(FAILURE_STATUS, advice)
    # A full disk or an unwritable folder that no disk_space.writing named.
    problem = disk_space.failure_of(e, flag="--output_dir")
    if problem is not None:
      _exit(FAILURE_STATUS, error_line(problem))
    traceback.print_exc()
    _exit(FAILURE_STATUS, "%s: internal error: the traceback above is a bug "
          "in this program, not a problem with your input; please report "
          "it, with the command line, on the project's issue tracker." %
          program_name())
  finally:
    _release_folder_locks()


def _summary():
  """The first paragraph of the running script's docstring."""
  main_module = sys.modules.get("__main__")
  doc = (getattr(main_module, "__doc__", None) or "").strip()
  return doc.split("\n\n")[0].strip()


def print_help(full=False, flag_values=flags.FLAGS, out=None):
  """The script's summary and the help of its key flags (all if `full`)."""
  out = out or sys.stdout
  summary = _summary()
  if summary:
    out.write(summary + "\n\n")
  out.write("USAGE: %s [flags]\n\nflags:\n" % program_name())
  out.write((flag_values.get_help() if full else
             flag_values.main_module_help()) + "\n")
  if not full:
    out.write("\nTry --helpfull to list every flag, absl's own included. "
              "Add -v 1 (absl's verbosity flag) for Google's detailed log: "
              "the first examples' features, every variable and "
              "TensorFlow's own lines.\n")


def _help_asked(argv):
  """None, "short" or "full": the help the command line asks for."""
  args = argv[1:argv.index("--")] if "--" in argv else argv[1:]
  if any(arg in _HELPFULL_ARGS for arg in args):
    return "full"
  if any(arg in _HELP_ARGS for arg in args):
    return "short"
  return None


def answer_help(module_name, define_flags):
  """Prints the help and exits with status 0 when the script runs as a
  program (`module_name` is "__main__") and its command line asks for help;
  returns otherwise.

  Called by a script between its light imports (absl, this module,
  startup/shared_flags.py) and its TensorFlow ones, with its `define_flags`
  (callable() defining its flags, which must need no TensorFlow).
  """
  asked = _help_asked(sys.argv)
  if module_name != "__main__" or asked is None:
    return
  define_flags()
  print_help(full=asked == "full")
  sys.exit(0)


def _parse_flags(argv, known_only=False):
  """absl's flag parsing, with one-line errors and our --help; with
  `known_only`, flags absl does not know stay in the returned argv."""
  asked = _help_asked(argv)
  if asked is not None:
    print_help(full=asked == "full")
    sys.exit(0)
  try:
    return flags.FLAGS(argv, known_only=known_only)
  except flags.Error as e:
    strangers = _undefined_flags(argv[1:]) if known_only else []
    if strangers:
      # A misspelt flag is the likely cause of a missing or invalid one.
      e = "%s; %s %s not a flag of this script" % (
          str(e).rstrip("."), ", ".join(strangers), "is" if len(strangers) == 1 else "are")
    _exit(USAGE_STATUS, error_line("%s (see --help)" % e))


def _undefined_flags(args):
  """The arguments among `args` that look like flags absl does not know
  (the Beam options of a Beam runner among them)."""
  found = []
  for arg in args:
    name = arg.lstrip("-").split("=", 1)[0]
    if arg.startswith("-") and name not in flags.FLAGS and not (
        name.startswith("no") and name[2:] in flags.FLAGS):
      found.append(arg)
  return found


def _ending(status):
  """`status`, after leaving the objects made so far out of the
  interpreter's last garbage collection: it would walk every object
  TensorFlow made (seconds of silence after the last line), and the
  process is ending, which frees their memory anyway."""
  gc.freeze()
  return status


def run(main, argv=None, known_only=False):
  """absl.app.run(main) with the endings of the module docstring.

  With `known_only`, the flags the script does not define are left in the
  argv that `main` gets (after argv[0]), for another parser (e.g. Apache
  Beam's PipelineOptions) to take.
  """
  app.run(lambda args: _ending(call(main, args)), argv=argv,
          flags_parser=lambda args: _parse_flags(args, known_only))
