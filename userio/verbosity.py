# coding=utf-8
"""How much a run prints: a progress report, or with `-v 1` Google's log.

By default a script prints its settings, progress lines and results.
absl's own flag `--verbosity=1` (short `-v 1`) adds what Google's scripts
logged on top of that, unchanged: the features of the first examples
(`details`), every trainable variable and the model's input shapes, and
TensorFlow's own INFO lines (restoring and writing files). Nothing here
imports TensorFlow.
"""

import logging as python_logging

from absl import logging

# The absl verbosity from which the details are logged (absl's DEBUG).
DETAILS = logging.DEBUG
# The Python logger TensorFlow's Python code logs to.
TENSORFLOW_LOGGER = "tensorflow"


def details():
  """Whether the command line asked for Google's detailed log (-v 1)."""
  return logging.get_verbosity() >= DETAILS


def start_logging():
  """INFO lines on (absl shows only warnings by default), unless the
  command line asked for more; TensorFlow's INFO lines only with
  `details()`: they name the files it reads and writes, which the scripts'
  own lines already say."""
  logging.set_verbosity(max(logging.get_verbosity(), logging.INFO))
  python_logging.getLogger(TENSORFLOW_LOGGER).setLevel(
      python_logging.NOTSET if details() else python_logging.WARNING)
