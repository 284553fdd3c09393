# coding=utf-8
"""The official GLUE metrics of a classifier or regressor.

Two forms of each metric:
  * plain NumPy functions (`accuracy`, `f1_score`, `matthews_corrcoef`,
    `pearson`, `spearman`) for tests and for results computed in Python;
  * streaming ops for EVAL that return `(value, update_op)` pairs as the
    `tf.compat.v1.metrics.*` functions do, so they go straight into
    `EstimatorSpec.eval_metric_ops`.

F1 and the Matthews correlation are streamed through a weighted confusion
matrix (TP, FP, TN, FN) kept in local variables. Pearson and Spearman need
every value (Spearman ranks the whole set), so the streaming versions append
each batch's predictions and labels to local variables (via concat) and
compute the coefficient at read time with the NumPy functions below. An
eval set of GLUE size (at most tens of thousands of floats) fits easily.
For those two, `weights` act as a mask: examples with weight 0 (the padding
examples of the last batch) are left out, others count once.

Positive class for F1 and MCC is label id 1 (label "1" in MRPC, QQP, CoLA).
"""

import numpy as np
import tensorflow as tf


# ------------------------------------------------------------------ NumPy --


def _weights_like(values, weights):
  """Returns float64 weights [n]: all ones when `weights` is None."""
  if weights is None:
    return np.ones(len(values), dtype=np.float64)
  weights = np.asarray(weights, dtype=np.float64).reshape(-1)
  if len(weights) != len(values):
    raise ValueError("Got %d weights for %d values; pass one weight per "
                     "example." % (len(weights), len(values)))
  return weights


def accuracy(labels, predictions, weights=None):
  """Weighted fraction of predictions equal to labels (0.0 if no weight)."""
  labels = np.asarray(labels).reshape(-1)
  predictions = np.asarray(predictions).reshape(-1)
  weights = _weights_like(labels, weights)
  total = weights.sum()
  if total == 0:
    return 0.0
  return float((weights * (labels == predictions)).sum() / total)


def confusion_counts(labels, predictions, weights=None):
  """Weighted (tp, fp, tn, fn) of a binary task, positive class 1."""
  labels = np.asarray(labels).reshape(-1) == 1
  predictions = np.asarray(predictions).reshape(-1) == 1
  weights = _weights_like(labels, weights)
  tp = float((weights * (labels & predictions)).sum())
  fp = float((weights * (~labels & predictions)).sum())
  tn = float((weights * (~labels & ~predictions)).sum())
  fn = float((weights * (labels & ~predictions)).sum())
  return tp, fp, tn, fn


def f1_score(labels, predictions, weights=None):
  """F1 of the positive class 1: 2tp / (2tp + fp + fn); 0.0 if undefined."""
  tp, fp, _, fn = confusion_counts(labels, predictions, weights)
  denominator = 2 * tp + fp + fn
  return 0.0 if denominator == 0 else 2 * tp / denominator


def matthews_corrcoef(labels, predictions, weights=None):
  """Matthews correlation of a binary task; 0.0 when a margin is empty.

  MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)). A zero
  denominator (all predictions or all labels in one class) gives 0.0, the
  convention of scikit-learn, which GLUE's CoLA scorer uses.
  """
  tp, fp, tn, fn = confusion_counts(labels, predictions, weights)
  denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
  if denominator == 0:
    return 0.0
  return float((tp * tn - fp * fn) / np.sqrt(denominator))


def pearson(x, y):
  """Pearson correlation of two 1-D sequences; 0.0 if either is constant."""
  x = np.asarray(x, dtype=np.float64).reshape(-1)
  y = np.asarray(y, dtype=np.float64).reshape(-1)
  if len(x) != len(y):
    raise ValueError("pearson needs equal lengths, got %d and %d."
                     % (len(x), len(y)))
  dx = x - x.mean() if len(x) else x
  dy = y - y.mean() if len(y) else y
  denominator = np.sqrt((dx * dx).sum() * (dy * dy).sum())
  if denominator == 0:
    return 0.0
  return float((dx * dy).sum() / denominator)


def rank_average(values):
  """1-based ranks [n]; tied values share the average of their ranks."""
  values = np.asarray(values, dtype=np.float64).reshape(-1)
  order = np.argsort(values, kind="stable")
  ranks = np.empty(len(values), dtype=np.float64)
  start = 0
  while start < len(order):
    end = start
    while (end + 1 < len(order) and
           values[order[end + 1]] == values[order[start]]):
      end += 1
    # Positions start..end (0-based) hold one tied group: ranks start+1..end+1.
    ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
    start = end + 1
  return ranks


def spearman(x, y):
  """Spearman rank correlation: Pearson of the average ranks."""
  return pearson(rank_average(x), rank_average(y))


# ------------------------------------------------------------ multi-label --


# The smallest probability the multi-label loss takes the log of.
_MIN_PROBABILITY = 1e-7


def _ratio(numerator, denominator):
  """numerator / denominator, 0.0 when the denominator is 0 (scikit-learn's
  zero_division=0)."""
  return float(numerator) / denominator if denominator else 0.0


def _precision_recall_f1(true_positives, predicted, actual):
  precision = _ratio(true_positives, predicted)
  recall = _ratio(true_positives, actual)
  return precision, recall, _ratio(2 * precision * recall,
                                   precision + recall)


def label_ranking_average_precision(labels, scores):
  """Label ranking average precision, as scikit-learn defines it: for each
  example, the mean over its true labels j of (its true labels scored at
  least as high as j) / (all labels scored at least as high as j); an
  example with no true label, or with every label true, scores 1; the
  mean over examples.

  Args:
    labels: 0/1 [examples, labels].
    scores: [examples, labels], higher means more likely.
  """
  labels = np.asarray(labels, dtype=bool)
  scores = np.asarray(scores, dtype=np.float64)
  total = 0.0
  for truth, score in zip(labels, scores):
    if not truth.any() or truth.all():
      total += 1.0
      continue
    at_least = score[None, :] >= score[truth][:, None]
    total += np.mean(np.sum(at_least & truth[None, :], axis=1) /
                     np.sum(at_least, axis=1))
  return _ratio(total, len(labels))


def multi_label_metrics(labels, probabilities, threshold, names,
                        prefix="eval_"):
  """The metrics of a multi-label evaluation.

  Args:
    labels: 0/1 [examples, labels], the true labels.
    probabilities: [examples, labels], each label's sigmoid.
    threshold: a label is predicted when its probability is above it.
    names: the labels' names, for the per-label metrics.
    prefix: put before every metric's name.

  Returns:
    dict: loss (the mean binary cross-entropy, probabilities clipped to
    [1e-7, 1 - 1e-7]); precision, recall and F1 micro-averaged (counted over
    all labels and examples) and macro-averaged (the mean over labels);
    exact_match (the share of examples whose predicted set is their true
    one); lrap (label_ranking_average_precision); threshold; and each
    label's precision, recall and F1 ("<prefix>f1_<name>", ...).
  """
  labels = np.asarray(labels, dtype=bool)
  probabilities = np.asarray(probabilities, dtype=np.float64)
  predicted = probabilities > threshold
  clipped = np.clip(probabilities, _MIN_PROBABILITY, 1 - _MIN_PROBABILITY)
  values = {"loss": float(-np.mean(np.where(labels, np.log(clipped),
                                            np.log(1 - clipped)))),
            "exact_match": float(np.mean(np.all(predicted == labels,
                                                axis=1))),
            "lrap": label_ranking_average_precision(labels, probabilities),
            "threshold": float(threshold)}
  hits = predicted & labels
  micro = _precision_recall_f1(hits.sum(), predicted.sum(), labels.sum())
  per_label = [_precision_recall_f1(hits[:, j].sum(), predicted[:, j].sum(),
                                    labels[:, j].sum())
               for j in range(labels.shape[1])]
  for i, kind in enumerate(("precision", "recall", "f1")):
    values["micro_" + kind] = micro[i]
    values["macro_" + kind] = float(np.mean([p[i] for p in per_label]))
    for name, scores in zip(names, per_label):
      values["%s_%s" % (kind, name)] = scores[i]
  return {prefix + key: value for key, value in values.items()}


# The thresholds `best_threshold` tries.
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))


def best_threshold(labels, probabilities):
  """Of THRESHOLDS, the one with the highest micro-averaged F1 on
  (`labels`, `probabilities`); ties go to the one nearest 0.5."""
  def micro_f1(threshold):
    predicted = np.asarray(probabilities) > threshold
    truth = np.asarray(labels, dtype=bool)
    return _precision_recall_f1((predicted & truth).sum(), predicted.sum(),
                                truth.sum())[2]
  return max(THRESHOLDS, key=lambda t: (micro_f1(t), -abs(t - 0.5)))


# -------------------------------------------------------------- Streaming --


def _local_variable(name, shape, dtype, validate_shape=True):
  """A zero-initialized metric variable in LOCAL_VARIABLES (reset per eval)."""
  return tf.compat.v1.Variable(
      initial_value=tf.zeros(shape if validate_shape else [0], dtype=dtype),
      name=name,
      trainable=False,
      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                   tf.compat.v1.GraphKeys.METRIC_VARIABLES],
      validate_shape=validate_shape,
      shape=shape if validate_shape else tf.TensorShape([None]))


def _weights_or_ones(values, weights):
  """Float64 weights [batch] aligned with `values` [batch]."""
  if weights is None:
    return tf.ones_like(values, dtype=tf.float64)
  return tf.cast(tf.reshape(weights, [-1]), tf.float64)


def streaming_confusion_counts(labels, predictions, weights=None, name=None):
  """Streams the weighted confusion matrix of a binary task.

  Args:
    labels: int Tensor [batch], 0 or 1.
    predictions: int Tensor [batch], 0 or 1.
    weights: optional float Tensor [batch].
    name: variable scope name.

  Returns:
    (counts, update_op): `counts` is a float64 Tensor [4] read from the
    local variables, in the order tp, fp, tn, fn.
  """
  with tf.compat.v1.variable_scope(name, default_name="confusion_counts"):
    labels = tf.equal(tf.reshape(labels, [-1]), 1)
    predictions = tf.equal(tf.reshape(predictions, [-1]), 1)
    weights = _weights_or_ones(tf.cast(labels, tf.float64), weights)
    cells = {
        "tp": tf.logical_and(labels, predictions),
        "fp": tf.logical_and(tf.logical_not(labels), predictions),
        "tn": tf.logical_and(tf.logical_not(labels),
                             tf.logical_not(predictions)),
        "fn": tf.logical_and(labels, tf.logical_not(predictions)),
    }
    variables, updates = [], []
    for key in ("tp", "fp", "tn", "fn"):
      variable = _local_variable(key, [], tf.float64)
      batch_count = tf.reduce_sum(weights * tf.cast(cells[key], tf.float64))
      variables.append(variable)
      updates.append(variable.assign_add(batch_count))
    counts = tf.stack([v.read_value() for v in variables])
    update_op = tf.stack(updates)
  return counts, update_op


def _f1_from_counts(counts):
  """F1 (float64 scalar) from [tp, fp, tn, fn]; 0 when undefined."""
  tp, fp, _, fn = tf.unstack(counts)
  return tf.math.divide_no_nan(2.0 * tp, 2.0 * tp + fp + fn)


def _mcc_from_counts(counts):
  """Matthews correlation (float64 scalar) from [tp, fp, tn, fn]; 0 if
  undefined."""
  tp, fp, tn, fn = tf.unstack(counts)
  denominator = tf.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return tf.math.divide_no_nan(tp * tn - fp * fn, denominator)


def streaming_f1(labels, predictions, weights=None, name=None):
  """Streaming F1 of class 1: (value, update_op) with float64 values."""
  counts, update = streaming_confusion_counts(
      labels, predictions, weights, name=name or "f1")
  return _f1_from_counts(counts), _f1_from_counts(update)


def streaming_matthews_corrcoef(labels, predictions, weights=None, name=None):
  """Streaming Matthews correlation: (value, update_op), float64."""
  counts, update = streaming_confusion_counts(
      labels, predictions, weights, name=name or "mcc")
  return _mcc_from_counts(counts), _mcc_from_counts(update)


def _streaming_collect(predictions, labels, weights, name):
  """Appends the kept (weight != 0) predictions and labels to local variables.

  Returns:
    (stored_predictions, stored_labels, update_op): float32 variables of
    shape [n] holding every kept example so far, and the op that appends
    one batch.
  """
  with tf.compat.v1.variable_scope(name):
    predictions = tf.cast(tf.reshape(predictions, [-1]), tf.float32)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    keep = tf.not_equal(_weights_or_ones(predictions, weights), 0.0)
    stored = []
    updates = []
    for key, batch in (("predictions", predictions), ("labels", labels)):
      variable = _local_variable(key, None, tf.float32, validate_shape=False)
      appended = tf.concat(
          [variable.read_value(), tf.boolean_mask(batch, keep)], axis=0)
      stored.append(variable)
      updates.append(variable.assign(appended, read_value=False))
  return stored[0], stored[1], tf.group(*updates)


def _numpy_coefficient(function, stored_predictions, stored_labels):
  """Runs a NumPy coefficient on the stored values; float64 scalar Tensor."""
  value = tf.numpy_function(
      lambda a, b: np.float64(function(a, b)),
      [stored_predictions.read_value(), stored_labels.read_value()],
      tf.float64, stateful=True)
  return tf.reshape(value, [])


def _streaming_correlation(function, predictions, labels, weights, name):
  """(value, update_op) of a correlation over all streamed examples."""
  stored_predictions, stored_labels, update = _streaming_collect(
      predictions, labels, weights, name)
  value = _numpy_coefficient(function, stored_predictions, stored_labels)
  with tf.control_dependencies([update]):
    # Read again after the append, as tf.compat.v1.metrics update ops do.
    updated = _numpy_coefficient(function, stored_predictions, stored_labels)
  return value, updated


def streaming_pearson(predictions, labels, weights=None, name=None):
  """Streaming Pearson correlation: (value, update_op), float64."""
  return _streaming_correlation(pearson, predictions, labels, weights,
                                name or "pearson")


def streaming_spearman(predictions, labels, weights=None, name=None):
  """Streaming Spearman correlation (average ranks): (value, update_op)."""
  return _streaming_correlation(spearman, predictions, labels, weights,
                                name or "spearman")


def classification_metric_ops(label_ids, predictions, per_example_loss,
                              weights, official_metrics=()):
  """EVAL metrics of a classification task.

  Args:
    label_ids: int32 Tensor [batch].
    predictions: int32 Tensor [batch], argmax of the logits.
    per_example_loss: float32 Tensor [batch].
    weights: float32 Tensor [batch], 0 for padding examples.
    official_metrics: names among "f1", "mcc" to add.

  Returns:
    dict of name -> (value, update_op): eval_accuracy, eval_loss and
    eval_<metric> for each official metric.
  """
  metric_ops = {
      "eval_accuracy": tf.compat.v1.metrics.accuracy(
          labels=label_ids, predictions=predictions, weights=weights),
      "eval_loss": tf.compat.v1.metrics.mean(
          values=per_example_loss, weights=weights),
  }
  streaming = {"f1": streaming_f1, "mcc": streaming_matthews_corrcoef}
  for metric in official_metrics:
    if metric not in streaming:
      raise ValueError("Unknown classification metric %r; known: %s."
                       % (metric, ", ".join(sorted(streaming))))
    metric_ops["eval_" + metric] = streaming[metric](
        label_ids, predictions, weights)
  return metric_ops


def regression_metric_ops(labels, predictions, per_example_loss, weights):
  """EVAL metrics of a regression task (STS-B).

  Args:
    labels: float32 Tensor [batch].
    predictions: float32 Tensor [batch].
    per_example_loss: float32 Tensor [batch], squared errors.
    weights: float32 Tensor [batch], 0 for padding examples.

  Returns:
    dict with eval_loss (mean squared error), eval_pearson, eval_spearman.
  """
  return {
      "eval_loss": tf.compat.v1.metrics.mean(
          values=per_example_loss, weights=weights),
      "eval_pearson": streaming_pearson(predictions, labels, weights),
      "eval_spearman": streaming_spearman(predictions, labels, weights),
  }
