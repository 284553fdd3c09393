"""Tests for classifier_metrics: hand-computed values and streaming == NumPy."""
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tasks import classifier_metrics as cm  # pylint: disable=g-import-not-at-top

tf.compat.v1.enable_resource_variables()

# labels/predictions used by several hand computations below:
#   index:       0  1  2  3  4
#   label:       1  1  0  0  1
#   prediction:  1  0  1  0  1
#   cell:       TP FN FP TN TP  -> tp=2, fn=1, fp=1, tn=1
LABELS = [1, 1, 0, 0, 1]
PREDICTIONS = [1, 0, 1, 0, 1]


def test_accuracy_by_hand():
  # 3 of 5 equal (indices 0, 3, 4).
  assert cm.accuracy(LABELS, PREDICTIONS) == pytest.approx(3 / 5)
  # Weights 1,1,0,1,2: correct weight = 1 (i0) + 1 (i3) + 2 (i4) = 4 of 5.
  assert cm.accuracy(LABELS, PREDICTIONS, [1, 1, 0, 1, 2]) == pytest.approx(
      4 / 5)


def test_confusion_counts_by_hand():
  assert cm.confusion_counts(LABELS, PREDICTIONS) == (2.0, 1.0, 1.0, 1.0)


def test_f1_by_hand():
  # precision = 2/3, recall = 2/3 -> F1 = 2tp/(2tp+fp+fn) = 4/6.
  assert cm.f1_score(LABELS, PREDICTIONS) == pytest.approx(2 / 3)
  # Weight 0 on index 2 removes the FP: 2*2/(4+0+1) = 4/5.
  assert cm.f1_score(LABELS, PREDICTIONS, [1, 1, 0, 1, 1]) == pytest.approx(
      4 / 5)


def test_f1_without_positives_is_zero():
  assert cm.f1_score([0, 0, 0], [0, 0, 0]) == 0.0


def test_mcc_by_hand():
  # (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))
  # = (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6.
  assert cm.matthews_corrcoef(LABELS, PREDICTIONS) == pytest.approx(1 / 6)


def test_mcc_published_example():
  # scikit-learn's documented example: y_true [+1,+1,+1,-1],
  # y_pred [+1,-1,+1,+1] -> -0.33...; here with 1/0 for +1/-1:
  # tp=2, fn=1, fp=1, tn=0 -> (0 - 1)/sqrt(3*3*1*1) = -1/3.
  assert cm.matthews_corrcoef([1, 1, 1, 0], [1, 0, 1, 1]) == pytest.approx(
      -1 / 3)


def test_mcc_zero_denominator_is_zero():
  # All predictions 1: tn+fn = 0, the product is 0 -> 0 by convention.
  assert cm.matthews_corrcoef([1, 0, 1], [1, 1, 1]) == 0.0
  # All labels 0: tp+fn = 0.
  assert cm.matthews_corrcoef([0, 0, 0], [1, 0, 1]) == 0.0


def test_pearson_by_hand():
  # x=[1,2,3], y=[2,4,7]: dx=[-1,0,1], dy=[-7/3,-1/3,8/3];
  # sum(dx*dy)=7/3+8/3=5, sum(dx^2)=2, sum(dy^2)=(49+1+64)/9=114/9;
  # r = 5/sqrt(2*114/9) = 15/sqrt(228).
  assert cm.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
  assert cm.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_pearson_constant_input_is_zero():
  assert cm.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_rank_average_ties():
  # 1 is smallest (rank 1), 2 next (rank 2), the two 3s share ranks 3 and 4.
  np.testing.assert_allclose(cm.rank_average([3, 1, 3, 2]),
                             [3.5, 1.0, 3.5, 2.0])


def test_spearman_with_ties():
  # ranks x=[1,2,2,3] -> [1,2.5,2.5,4]; y increasing -> [1,2,3,4].
  # dx=[-1.5,0,0,1.5], dy=[-1.5,-0.5,0.5,1.5]: sum dx*dy = 4.5,
  # sum dx^2 = 4.5, sum dy^2 = 5 -> 4.5/sqrt(22.5) = 3/sqrt(10).
  assert cm.spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(
      3 / math.sqrt(10))
  # Monotonic but non-linear -> exactly 1.
  assert cm.spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)


def _run_streaming(metric_fn, batches):
  """Feeds batches (dicts of arrays) through metric_fn's update op; value."""
  with tf.Graph().as_default():
    a = tf.compat.v1.placeholder(batches[0]["a"].dtype, [None])
    b = tf.compat.v1.placeholder(batches[0]["b"].dtype, [None])
    w = tf.compat.v1.placeholder(tf.float32, [None])
    value, update = metric_fn(a, b, w)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.local_variables_initializer())
      for batch in batches:
        sess.run(update, {a: batch["a"], b: batch["b"], w: batch["w"]})
      return sess.run(value)


def _random_batches(seed, kind):
  rng = np.random.RandomState(seed)
  batches = []
  for size in (5, 8, 3):
    if kind == "binary":
      a = rng.randint(0, 2, size).astype(np.int32)
      b = rng.randint(0, 2, size).astype(np.int32)
    else:
      # Rounded so that ties occur, exercising average ranks.
      a = np.round(rng.uniform(0, 5, size), 0).astype(np.float32)
      b = np.round(a + rng.normal(0, 1.5, size), 0).astype(np.float32)
    w = rng.choice([0.0, 1.0, 0.5, 2.0], size).astype(np.float32)
    batches.append({"a": a, "b": b, "w": w})
  return batches


def _concat(batches, key):
  return np.concatenate([batch[key] for batch in batches])


@pytest.mark.parametrize("stream_fn,numpy_fn", [
    (lambda l, p, w: tf.compat.v1.metrics.accuracy(l, p, weights=w),
     cm.accuracy),
    (cm.streaming_f1, cm.f1_score),
    (cm.streaming_matthews_corrcoef, cm.matthews_corrcoef),
])
def test_streaming_binary_metrics_equal_numpy(stream_fn, numpy_fn):
  batches = _random_batches(0, "binary")
  expected = numpy_fn(_concat(batches, "a"), _concat(batches, "b"),
                      _concat(batches, "w"))
  assert _run_streaming(stream_fn, batches) == pytest.approx(expected)


@pytest.mark.parametrize("stream_fn,numpy_fn", [
    (cm.streaming_pearson, cm.pearson),
    (cm.streaming_spearman, cm.spearman),
])
def test_streaming_correlations_equal_numpy_on_kept_examples(stream_fn,
                                                             numpy_fn):
  batches = _random_batches(1, "float")
  keep = _concat(batches, "w") != 0
  expected = numpy_fn(_concat(batches, "a")[keep], _concat(batches, "b")[keep])
  assert keep.sum() < len(keep)  # some examples really are masked out
  assert _run_streaming(stream_fn, batches) == pytest.approx(expected)


def test_classification_metric_ops_keys_and_values():
  with tf.Graph().as_default():
    ops = cm.classification_metric_ops(
        tf.constant(LABELS), tf.constant(PREDICTIONS),
        tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]),
        tf.constant([1.0, 1.0, 1.0, 1.0, 0.0]), ("f1", "mcc"))
    assert sorted(ops) == ["eval_accuracy", "eval_f1", "eval_loss",
                           "eval_mcc"]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.local_variables_initializer())
      sess.run([update for _, update in ops.values()])
      values = sess.run({k: v for k, (v, _) in ops.items()})
  # Index 4 has weight 0: first four -> tp=1, fn=1, fp=1, tn=1.
  assert values["eval_accuracy"] == pytest.approx(2 / 4)
  assert values["eval_loss"] == pytest.approx((1 + 2 + 3 + 4) / 4)
  assert values["eval_f1"] == pytest.approx(2 / 4)
  assert values["eval_mcc"] == pytest.approx(0.0)


def test_unknown_metric_name_is_refused():
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="Unknown classification metric"):
      cm.classification_metric_ops(tf.constant([1]), tf.constant([1]),
                                   tf.constant([0.5]), tf.constant([1.0]),
                                   ("auc",))


# ------------------------------------------------------------ multi-label

# Four examples, three labels. At threshold 0.5 (strictly above) the
# predictions are [1,0,1], [0,1,0], [1,0,0], [0,0,0]: the first two exact,
# the third misses label 1, the fourth misses label 2.
MULTI_TRUTH = [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]]
MULTI_PROBS = [[0.9, 0.2, 0.6], [0.4, 0.7, 0.1], [0.8, 0.3, 0.2],
               [0.1, 0.5, 0.3]]


def test_label_ranking_average_precision_published_example():
  # scikit-learn's documented example of label_ranking_average_precision_score
  # gives 0.416... (= (1/2 + 1/3) / 2).
  assert cm.label_ranking_average_precision(
      [[1, 0, 0], [0, 0, 1]], [[0.75, 0.5, 1], [1, 0.2, 0.1]]) == (
          pytest.approx(0.41666666666666663))


def test_multi_label_metrics_worked_example():
  """By hand, from the definitions (scikit-learn's precision, recall and F1
  with average="micro" / "macro", accuracy_score of label sets, label
  ranking average precision):
    label 0: predicted {0, 2}, true {0, 2}: P 1, R 1, F1 1;
    label 1: predicted {1}, true {1, 2}: P 1, R 1/2, F1 2/3;
    label 2: predicted {0}, true {0, 3}: P 1, R 1/2, F1 2/3;
    micro: 4 hits, 4 predicted, 6 true: P 1, R 2/3, F1 0.8;
    macro: P 1, R 2/3, F1 7/9; exact match 2/4;
    LRAP: examples 1-3 rank their true labels first (1 each); example 4's
    true label 2 (0.3) is below label 1 (0.5): 1/2; mean 3.5/4."""
  values = cm.multi_label_metrics(MULTI_TRUTH, MULTI_PROBS, 0.5,
                                  ["a", "b", "c"])
  want = {"eval_precision_a": 1.0, "eval_recall_a": 1.0, "eval_f1_a": 1.0,
          "eval_precision_b": 1.0, "eval_recall_b": 0.5,
          "eval_f1_b": 2 / 3, "eval_precision_c": 1.0, "eval_recall_c": 0.5,
          "eval_f1_c": 2 / 3, "eval_micro_precision": 1.0,
          "eval_micro_recall": 2 / 3, "eval_micro_f1": 0.8,
          "eval_macro_precision": 1.0, "eval_macro_recall": 2 / 3,
          "eval_macro_f1": 7 / 9, "eval_exact_match": 0.5,
          "eval_lrap": 3.5 / 4, "eval_threshold": 0.5}
  # The mean binary cross-entropy over the 12 (example, label) entries.
  entries = [math.log(p) if t else math.log(1 - p)
             for truth, probs in zip(MULTI_TRUTH, MULTI_PROBS)
             for t, p in zip(truth, probs)]
  want["eval_loss"] = -sum(entries) / len(entries)
  assert values == pytest.approx(want)


def test_multi_label_metrics_count_an_undefined_ratio_as_zero():
  """A label never predicted and never true has precision, recall and F1 0
  (scikit-learn's zero_division=0); an example with no true label and none
  predicted is an exact match and ranks perfectly (LRAP 1)."""
  values = cm.multi_label_metrics([[0, 1], [0, 0]], [[0.1, 0.9], [0.2, 0.1]],
                                  0.5, ["x", "y"])
  assert (values["eval_precision_x"], values["eval_recall_x"],
          values["eval_f1_x"]) == (0.0, 0.0, 0.0)
  assert values["eval_macro_f1"] == pytest.approx(0.5)
  assert values["eval_exact_match"] == 1.0
  assert values["eval_lrap"] == 1.0


def test_best_threshold_takes_the_best_micro_f1_nearest_one_half():
  # 0.15, 0.20 and 0.25 all separate the two true labels from the false one
  # (F1 1); 0.25 is the nearest to 0.5.
  assert cm.best_threshold([[1], [1], [0]], [[0.3], [0.35], [0.1]]) == 0.25
  # The worked example's micro F1 is 0.8 at 0.5, 2/3 at 0.3, and 6/7 at
  # both 0.2 and 0.25 (all 6 true labels among 8 predicted): 0.25 wins.
  assert cm.best_threshold(MULTI_TRUTH, MULTI_PROBS) == 0.25
