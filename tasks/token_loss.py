# coding=utf-8
"""How the token classifier averages its words' cross-entropies into the
loss of a batch.

  window  each window's mean over its labeled words, then the mean over
          the batch's windows: every window weighs the same, so a word of a
          short sentence weighs more than a word of a long one.
  word    the mean over every labeled word of the batch (Hugging Face's
          BertForTokenClassification: CrossEntropyLoss over the positions
          whose label is not -100): every word weighs the same.

Plain Python, so that a command can list the choices in its --help before
TensorFlow loads.
"""

WINDOW = "window"
WORD = "word"
LOSS_AVERAGES = (WINDOW, WORD)
# Over five seeds of a real-text tagging task, window averaging left more
# runs predicting O everywhere (docs/results.md#the-loss-average).
DEFAULT = WORD
