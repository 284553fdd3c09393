# coding=utf-8
"""How much a run prints: a progress report, or with `-v 1` Google's log.

By default a script prints its settings, progress lines and results, each
line the time of day and the message ("10:28:56 step 5/5 (100.0%), ..."),
a warning or an error marked as such. absl's own flag `--verbosity=1`
(short `-v 1`) adds what Google's scripts logged on top of that, unchanged
and in absl's format (level, date, time, thread, file and line): the
features of the first examples (`details`), every trainable variable and
the model's input shapes, and TensorFlow's own INFO lines (restoring and
writing files) and its notices about deprecated functions that it calls.
Nothing here imports TensorFlow.
"""

import contextlib
import logging as python_logging
import os
import time

from absl import logging

# The absl verbosity from which the details are logged (absl's DEBUG).
DETAILS = logging.DEBUG
# The attribute of a log record that a Progress line sets (`extra=`): a line
# that says how far a long loop is.
PROGRESS_LINE = "progress_line"
# The Python logger TensorFlow's Python code logs to.
TENSORFLOW_LOGGER = "tensorflow"
# TensorFlow's module that warns when code calls one of its deprecated
# functions (Saver calls some itself, e.g. when it deletes old checkpoints).
_DEPRECATION_MODULE = os.path.join("util", "deprecation.py")
# Part of the path of every module of TensorFlow's Python package (in
# site-packages, or a distribution's dist-packages).
_TENSORFLOW_PACKAGE = "-packages" + os.sep + os.path.join("tensorflow", "")


def details():
  """Whether the command line asked for Google's detailed log (-v 1)."""
  return logging.get_verbosity() >= DETAILS


class DeprecationNoticeFilter(python_logging.Filter):
  """Drops TensorFlow's notices that a function it calls is deprecated
  (advice for TensorFlow's developers, not for the user's run), except
  with `details()`."""

  def filter(self, record):
    return details() or not record.pathname.endswith(_DEPRECATION_MODULE)


class TensorFlowInfoFilter(python_logging.Filter):
  """Drops the INFO lines that TensorFlow's own modules log through absl
  (loading a SavedModel says some), except with `details()`."""

  def filter(self, record):
    return (details() or record.levelno > python_logging.INFO or
            _TENSORFLOW_PACKAGE not in record.pathname)


def quiet_deprecation_notices():
  """Adds a DeprecationNoticeFilter to TensorFlow's logger (once)."""
  logger = python_logging.getLogger(TENSORFLOW_LOGGER)
  if not any(isinstance(f, DeprecationNoticeFilter) for f in logger.filters):
    logger.addFilter(DeprecationNoticeFilter())


class ProgressFormatter(python_logging.Formatter):
  """A log line as a person reads it: "HH:MM:SS message", with "Warning: "
  or "Error: " before the message of those levels."""

  def format(self, record):
    message = record.getMessage()
    if record.levelno >= python_logging.WARNING:
      message = "%s: %s" % (record.levelname.capitalize(), message)
    return "%s %s" % (time.strftime("%H:%M:%S",
                                    time.localtime(record.created)), message)


def start_logging():
  """INFO lines on (absl shows only warnings by default), unless the
  command line asked for more, in the progress report's format (absl's
  own with `details()`); TensorFlow's INFO lines only with `details()`:
  they name the files it reads and writes, which the scripts' own lines
  already say."""
  logging.set_verbosity(max(logging.get_verbosity(), logging.INFO))
  handler = logging.get_absl_handler()
  if not any(isinstance(f, TensorFlowInfoFilter) for f in handler.filters):
    handler.addFilter(TensorFlowInfoFilter())
  if not details():
    handler.setFormatter(ProgressFormatter())
  python_logging.getLogger(TENSORFLOW_LOGGER).setLevel(
      python_logging.NOTSET if details() else python_logging.WARNING)


class _OnlyProgressFilter(python_logging.Filter):
  """Drops INFO lines but those of a loop's progress; warnings pass."""

  def filter(self, record):
    return (details() or record.levelno > python_logging.INFO or
            getattr(record, PROGRESS_LINE, False))


@contextlib.contextmanager
def only_progress_lines():
  """Within it, the INFO lines of the report are only the progress lines of
  long loops (userio/progress.py); warnings and errors stay, and `details()`
  shows everything. For work that ends in one line of its own (an
  evaluation during training), which its usual lines would bury."""
  handler = logging.get_absl_handler()
  only_progress = _OnlyProgressFilter()
  handler.addFilter(only_progress)
  try:
    yield
  finally:
    handler.removeFilter(only_progress)
