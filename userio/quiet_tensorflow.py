# coding=utf-8
"""Imports TensorFlow without the start-up lines that are noise on a CPU.

Imported first by each script (before anything imports TensorFlow). On a
machine without CUDA, TensorFlow 2.21 prints at import and at its first
device query:

  WARNING: All log messages before absl::InitializeLog() is called are
    written to STDERR                                  (twice)
  I... port.cc:153] oneDNN custom operations are on. You may see slightly
    different numerical results due to floating-point round-off errors
    ...                                                (twice)
  I... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU
    will not be used.                                  (twice)
  I... cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use
    available CPU instructions ... To enable the following instructions:
    AVX2 FMA, in other operations, rebuild TensorFlow ...
  E... cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error:
    Failed call to cuInit: UNKNOWN ERROR (303)

Two mechanisms, each for what it can silence without hiding real problems:

  * TF_CPP_MIN_LOG_LEVEL=1, set only when the user has not set it, hides
    TensorFlow's C++ INFO lines (the CPU-feature notice among them) and keeps
    its warnings and errors (a worker of a multi-worker cluster gets 2,
    which keeps errors: `_log_level`). Level 3 would also hide errors.
  * The cudart_stub and absl lines are written before TensorFlow reads that
    variable, and the cuInit line is an ERROR; so the import and the first
    device query run with stderr (file descriptor 2) sent to a temporary
    file, and every line of it is written back except those known lines.
    The cuInit failure is dropped only when the cudart_stub line said that
    the machine has no CUDA driver at all, where it is expected; on a machine
    with a driver it is kept, since there it is a real problem
    (userio/native_errors.py holds the descriptor). The oneDNN
    line (a notice that kernels may round differently, printed by every
    import on x86) is written before the log level is read too.

Before the import, hardware/cpu.py chooses TensorFlow's CPU kernels, which
TensorFlow fixes as it loads, from the CPU's features and the command
line's --precision (`CPU_KERNELS` keeps the decision for the run's log).

TensorFlow's Python logger also gets a handler of its own when it is
imported before absl's logging is set up, so each of its lines came out
twice (once in Python's format, once in absl's); that handler is removed
and its lines go through absl's alone (userio/verbosity.py says which;
its notices that TensorFlow calls its own deprecated functions only with
-v 1).
"""

import os
import re
import sys

from hardware import cpu
from userio import native_errors
from userio import verbosity

_NO_DRIVER = re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers")
_NOISE = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is "
               r"called are written to STDERR$"),
    _NO_DRIVER,
    re.compile(r"port\.cc:\d+\] oneDNN custom operations are on"),
)
_NOISE_WITHOUT_DRIVER = re.compile(r"cuda_platform\.cc:\d+\] failed call to "
                                   r"cuInit")


def kept_lines(lines):
  """The lines of TensorFlow's start-up output that are not known noise."""
  no_driver = any(_NO_DRIVER.search(line) for line in lines)
  return [line for line in lines
          if not any(pattern.search(line) for pattern in _NOISE) and
          not (no_driver and _NOISE_WITHOUT_DRIVER.search(line))]


def _import_tensorflow():
  """Imports TensorFlow and queries its devices with fd 2 filtered."""
  with native_errors.held(keep=kept_lines):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.config.list_physical_devices()
  logger = tf.get_logger()
  for handler in list(logger.handlers):
    logger.removeHandler(handler)
  verbosity.quiet_deprecation_notices()


def _log_level(argv):
  """TF_CPP_MIN_LOG_LEVEL for the command `argv`: 1 (warnings and errors),
  or 2 (errors) for a worker of a multi-worker cluster, where every
  session's end logs a warning that its collectives' rendezvous is
  cleaned up ("Local rendezvous is aborting with status: ABORTED:
  Cleanup"), and a connection being retried is said at length: the
  runner's own line says when a worker stops or cannot be reached."""
  distribution = cpu.command_line_value(argv[1:], "distribution", None)
  return "2" if distribution == "multi_worker" else "1"


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", _log_level(sys.argv))
# The hardware/cpu.KernelSettings this process loaded TensorFlow with; None
# where TensorFlow was loaded before this module (its kernels were chosen
# then).
CPU_KERNELS = None
if "tensorflow" not in sys.modules:
  CPU_KERNELS = cpu.choose_kernels(sys.argv, os.environ)
  with cpu.set_while_loading(CPU_KERNELS, os.environ):
    _import_tensorflow()
