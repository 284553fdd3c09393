# coding=utf-8
"""A classifier's answers from its model's outputs.

`combine_windows` makes one output of a long text's windows'
(--long_text=windows); `prediction_lines` gives test_results.tsv's lines
and GLUE's submission file's; `answer` turns one output into the
prediction dict of a user's own files (predictions.jsonl, predictor.py).
"""

import numpy as np

from checkpoints import problem_types
from tasks import windows

# The smallest probability the windows' combination takes the log of.
MIN_PROBABILITY = 1e-30


def combine_windows(outputs, counts, is_regression, multi_label=False):
  """Each example's output from its windows' (in order): the mean of the
  regression scores; with `multi_label`, each label's highest probability
  (a label an example has shows in one window of it at least); else the
  probabilities of the mean log-probabilities
  (tasks/windows.mean_log_probabilities)."""
  combined, start = [], 0
  for count in counts:
    part = np.asarray(outputs[start:start + count], np.float64)
    start += count
    if is_regression:
      combined.append(float(part.mean()))
    elif multi_label:
      combined.append(part.max(axis=0))
    else:
      # float32 probabilities: a floor keeps log() finite.
      combined.append(np.exp(windows.mean_log_probabilities(
          np.log(np.maximum(part, MIN_PROBABILITY)))))
  return combined


def prediction_lines(outputs, label_list, is_regression):
  """(test_results.tsv lines, GLUE submission lines) of the examples'
  `outputs` in order: probability vectors (softmax, or a multi-label
  model's sigmoids), or a regression's scores."""
  result_lines = []
  submission_lines = ["index\tprediction\n"]
  for (i, output) in enumerate(outputs):
    if is_regression:
      score = float(output)
      result_lines.append("%s\n" % score)
      submission_lines.append("%d\t%.3f\n" % (i, score))
    else:
      probabilities = [float(p) for p in output]
      result_lines.append("\t".join(str(p) for p in probabilities) + "\n")
      best = max(range(len(probabilities)), key=probabilities.__getitem__)
      submission_lines.append("%d\t%s\n" % (i, label_list[best]))
  return result_lines, submission_lines


def answer(output, labels, problem_type, threshold=0.5):
  """One example's prediction, from a classifier's model output.

  Args:
    output: its probabilities [labels] (softmax, or sigmoids for
      multi-label), or its score (regression).
    labels: the label list ([None] for regression).
    problem_type: one of problem_types.PROBLEM_TYPES.
    threshold: multi-label: a label is predicted above it.

  Returns:
    {"score"} (regression), {"label", "probabilities"} or, multi-label,
    {"labels" (those above the threshold, in label order),
    "probabilities"}; "probabilities" is a dict by label.
  """
  if problem_type == problem_types.REGRESSION:
    return {"score": float(output)}
  probabilities = dict(zip(labels, (float(p) for p in output)))
  if problem_type == problem_types.MULTI_LABEL:
    return {"labels": [label for label in labels
                       if probabilities[label] > threshold],
            "probabilities": probabilities}
  return {"label": max(labels, key=probabilities.get),
          "probabilities": probabilities}
