"""The task heads of the three training scripts against NumPy, in training
mode (dropout on) and out of it.

Each test builds the graph the way the script does (its `create_model` or
`model_fn_builder`) on a tiny encoder with fixed weights, and fetches, in
the same session run as the head's outputs, the encoder output the head
read: a `modeling.BertModel` subclass that records the models the scripts
build stands in for the class, so the reference starts from the very
tensor the head consumed and checks the head alone.

Why the references are independent of the code under test:
  * the head's algebra (weights [classes, hidden] times the input, plus
    the bias, log-softmax, the cross-entropy or squared error and their
    means) is written here in float64 NumPy from Google's definitions;
  * the training-time dropout mask of the classifier head is drawn again
    in NumPy from the generator engine/dropout_masks.py documents: the
    SplitMix64 stream keyed by the two seed words (graph seed and CRC-32
    of the site; micro_step // k plus global_step << 32, k the recorded
    accumulation steps), each 64-bit output split into four 16-bit
    values, the run's batch taking the values from (micro_step % k) times
    its element count on (its share of the update's whole batch), a value
    kept when it is at least round(0.1 * 65536), kept values scaled by
    1 / 0.9. The finalizer is
    tests/test_modeling.py's NumPy one, which that file checks against the
    published first output of SplitMix64. Nothing of the graph's mask is
    read back, so a head that drops another rate, another tensor, or
    nothing gives different numbers.
Google's span and pretraining heads apply no dropout of their own (the
encoder's dropout sits inside its layers); their training-mode references
apply none, so dropout added at a head's input fails them.
"""
import zlib

import numpy as np
import pytest
import tensorflow as tf

from engine import dropout_masks
from engine import graph_keys
from runner import estimator
import modeling
import run_classifier
import run_pretraining
from tasks import pretraining
import run_squad
import test_modeling
import test_run_pretraining

TRAIN, EVAL, PREDICT = (estimator.ModeKeys.TRAIN, estimator.ModeKeys.EVAL,
                        estimator.ModeKeys.PREDICT)
CONFIG = dict(test_modeling.TINY, hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1)
# Google's classifier head drops 10% of the pooled output when training.
HEAD_DROPOUT = 0.1
GRAPH_SEED = 11
GLOBAL_STEP, MICRO_STEP = 3, 5
BATCH, SEQ = 4, 12
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def _config():
  return modeling.BertConfig(**CONFIG)


def _inputs():
  """int32 ids, mask, segment ids [BATCH, SEQ]; examples 1 and 3 padded."""
  rng = np.random.RandomState(0)
  ids = rng.randint(1, CONFIG["vocab_size"], (BATCH, SEQ)).astype(np.int32)
  mask = np.ones((BATCH, SEQ), np.int32)
  mask[1, 7:] = 0
  mask[3, 9:] = 0
  ids[mask == 0] = 0
  types = np.zeros((BATCH, SEQ), np.int32)
  types[:, 5:] = 1
  types[mask == 0] = 0
  return ids, mask, types


@pytest.fixture
def built_models(monkeypatch):
  """The list of BertModels the scripts build in the test, in order."""
  models = []

  class RecordedBertModel(modeling.BertModel):

    def __init__(self, *args, **kwargs):
      super().__init__(*args, **kwargs)
      models.append(self)

  monkeypatch.setattr(modeling, "BertModel", RecordedBertModel)
  return models


def _start_graph():
  """Seeds the default graph and makes its step counters."""
  tf.compat.v1.set_random_seed(GRAPH_SEED)
  graph_keys.get_or_create_global_step()
  graph_keys.get_or_create_micro_step()


def _run(fetches, arrays):
  """`fetches` in a session of the default graph, after loading `arrays`
  (by variable name) and setting the step counters."""
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    test_modeling._assign(sess, arrays)
    sess.run([graph_keys.get_or_create_global_step().assign(GLOBAL_STEP),
              graph_keys.get_micro_step().assign(MICRO_STEP)])
    return sess.run(fetches)


def _head_shapes():
  """{name: shape} of the default graph's trainable variables outside the
  encoder's "bert/" scope."""
  return {v.op.name: v.shape.as_list()
          for v in tf.compat.v1.trainable_variables()
          if not v.op.name.startswith("bert/")}


def _head_arrays(shapes, seed):
  """Random values for head variables {name: shape}, biases included, far
  from their zero / small initial values."""
  rng = np.random.RandomState(seed)
  return {name: ((0.3 if name.endswith("bias") else 0.5) *
                 rng.randn(*shape)).astype(np.float32)
          for name, shape in shapes.items()}


# ------------------------------------------------------ NumPy references


def np_keep_mask(shape, dropout_prob, site, graph_seed=GRAPH_SEED,
                 global_step=GLOBAL_STEP, micro_step=MICRO_STEP,
                 accumulation_steps=1):
  """bool [shape], True where the stateless dropout of `site` (its variable
  scope and name, first call there) keeps a value in a run's batch of
  `shape`, re-derived from the generator's documentation (see the module
  docstring)."""
  gamma = np.uint64(0x9E3779B97F4A7C15)
  size = int(np.prod(shape))
  update = micro_step // accumulation_steps + (global_step << 32)
  # The run's batch is share micro_step % k of the update's k batches.
  first = (micro_step % accumulation_steps) * size
  words = np.array([((graph_seed & 0x7FFFFFFF) << 32) |
                    zlib.crc32(site.encode("utf-8")), update],
                   np.int64).view(np.uint64)
  finalize = test_modeling._np_splitmix64_finalize
  with np.errstate(over="ignore"):
    key = finalize(words[0] ^ finalize(words[1]))
    draws = finalize(key + np.arange(1, (first + size + 3) // 4 + 1,
                                     dtype=np.uint64) * gamma)
  values = draws.astype("<u8").view("<u2")[first:first + size].reshape(shape)
  return values >= int(round(dropout_prob * 65536))


def _np_dense_head(inputs, weights, bias):
  """float64 inputs [..., hidden] times weights [classes, hidden], + bias."""
  return (np.asarray(inputs, np.float64) @
          np.asarray(weights, np.float64).T + bias)


def np_classifier(pooled, weights, bias, labels, keep=None):
  """Google's classifier head on `pooled` [batch, hidden]: dropout (the
  bool `keep` mask, rate HEAD_DROPOUT) when training, then logits,
  log-softmax cross-entropy per example and its mean, probabilities.
  With one class it is the regressor: prediction = the logit, squared
  error per example and its mean.

  Returns:
    (loss, per-example loss [batch], logits [batch, classes], outputs:
     probabilities [batch, classes] or predictions [batch]).
  """
  inputs = np.asarray(pooled, np.float64)
  if keep is not None:
    inputs = np.where(keep, inputs / (1.0 - HEAD_DROPOUT), 0.0)
  logits = _np_dense_head(inputs, weights, bias)
  if weights.shape[0] == 1:
    predictions = logits[:, 0]
    per_example = (predictions - labels) ** 2
    return per_example.mean(), per_example, logits, predictions
  log_probs = test_run_pretraining._np_log_softmax(logits)
  per_example = -log_probs[np.arange(len(labels)), labels]
  return per_example.mean(), per_example, logits, np.exp(log_probs)


def np_span_logits(sequence_output, weights, bias):
  """Google's span head: (start, end) logits [batch, seq], rows 0 and 1
  of the weights [2, hidden] and bias [2] on every position."""
  logits = _np_dense_head(sequence_output, weights, bias)
  return logits[..., 0], logits[..., 1]


def np_span_loss(start_logits, end_logits, start_positions, end_positions):
  """Google's SQuAD loss: the mean over examples of the cross-entropy of
  the start position, likewise of the end position, averaged."""
  log_softmax = test_run_pretraining._np_log_softmax
  rows = np.arange(len(start_positions))
  start = -log_softmax(start_logits)[rows, start_positions].mean()
  end = -log_softmax(end_logits)[rows, end_positions].mean()
  return (start + end) / 2.0


# -------------------------------------------------------- run_classifier


def _labels(num_labels):
  """The batch's labels: class ids, or STS-B-like scores for one label."""
  if num_labels == 1:
    return np.array([0.5, 2.0, 4.1, 3.3], np.float32)
  return np.array([0, 2, 1, 2], np.int32)


def _check_dropout_matters(pooled, weights, bias, labels, keep):
  """The case can tell the head's dropout apart from none: the mask drops
  values and that moves the logits well beyond the tolerance."""
  assert 0 < (~keep).sum() < keep.size
  with_dropout = np_classifier(pooled, weights, bias, labels, keep)[2]
  without = np_classifier(pooled, weights, bias, labels)[2]
  assert np.abs(with_dropout - without).max() > 1e-2


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classes", "regression"])
@pytest.mark.parametrize("is_training", [False, True],
                         ids=["eval", "training"])
def test_classifier_head_matches_numpy(built_models, num_labels, is_training):
  """run_classifier.create_model: output_weights [num_labels, hidden] and
  output_bias [num_labels] at the root; logits, per-example loss, mean loss
  and probabilities (or, with one label, STS-B's regression predictions and
  squared error) against NumPy on the pooled output the head read; in
  training mode after dropout 0.1 with the mask drawn again in NumPy."""
  ids, mask, types = _inputs()
  labels = _labels(num_labels)
  config = _config()
  with tf.Graph().as_default():
    _start_graph()
    head = run_classifier.create_model(
        config, is_training, tf.constant(ids), tf.constant(mask),
        tf.constant(types), tf.constant(labels), num_labels, False)
    (model,) = built_models
    shapes = _head_shapes()
    arrays = _head_arrays(shapes, seed=num_labels)
    arrays.update(test_modeling._random_weights(config, seed=1))
    got = _run((head, model.get_pooled_output()), arrays)
  assert shapes == {"output_weights": [num_labels, config.hidden_size],
                    "output_bias": [num_labels]}
  (loss, per_example, logits, outputs), pooled = got
  weights, bias = arrays["output_weights"], arrays["output_bias"]
  keep = None
  if is_training:
    # The head's call sits in Google's "loss" variable scope.
    keep = np_keep_mask(pooled.shape, HEAD_DROPOUT, "loss/dropout")
    _check_dropout_matters(pooled, weights, bias, labels, keep)
  want = np_classifier(pooled, weights, bias, labels, keep)
  assert logits.shape == (BATCH, num_labels) and logits.dtype == np.float32
  np.testing.assert_allclose(logits, want[2], **TOLERANCE)
  np.testing.assert_allclose(per_example, want[1], **TOLERANCE)
  np.testing.assert_allclose(loss, want[0], **TOLERANCE)
  np.testing.assert_allclose(outputs, want[3], **TOLERANCE)
  # The bias counts: without it the logits would be off by more than the
  # tolerance.
  assert np.abs(bias).min() > 1e-3


def np_multi_label(pooled, weights, bias, labels, pos_weight=None):
  """The multi-label classifier head (no dropout) as Hugging Face's
  BCEWithLogitsLoss defines it: each label's logit, its sigmoid, and
  -(w y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), w the positive
  weight (1 without one), averaged over labels (per example) and then over
  examples.

  Returns:
    (loss, per-example loss [batch], logits, sigmoids [batch, labels]).
  """
  logits = _np_dense_head(pooled, weights, bias)
  sigmoid = 1.0 / (1.0 + np.exp(-logits))
  weight = 1.0 if pos_weight is None else np.asarray(pos_weight, np.float64)
  per_label = -(weight * labels * np.log(sigmoid) +
                (1.0 - labels) * np.log(1.0 - sigmoid))
  per_example = per_label.mean(axis=1)
  return per_example.mean(), per_example, logits, sigmoid


@pytest.mark.parametrize("pos_weight", [None, 2.5, [1.0, 3.0, 0.5]],
                         ids=["unweighted", "one_weight", "per_label"])
def test_multi_label_head_matches_numpy(built_models, pos_weight):
  """create_model(multi_label=True): one sigmoid per label and the mean
  binary cross-entropy with the positive weights, against NumPy on the
  pooled output the head read (evaluation mode: no dropout)."""
  ids, mask, types = _inputs()
  labels = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 1], [1, 1, 1]],
                    np.float32)
  config = _config()
  with tf.Graph().as_default():
    _start_graph()
    head = run_classifier.create_model(
        config, False, tf.constant(ids), tf.constant(mask),
        tf.constant(types), tf.constant(labels), 3, False, multi_label=True,
        pos_weight=pos_weight)
    (model,) = built_models
    arrays = _head_arrays(_head_shapes(), seed=7)
    arrays.update(test_modeling._random_weights(config, seed=1))
    (loss, per_example, logits, outputs), pooled = _run(
        (head, model.get_pooled_output()), arrays)
  want = np_multi_label(pooled, arrays["output_weights"],
                        arrays["output_bias"], labels, pos_weight)
  np.testing.assert_allclose(logits, want[2], **TOLERANCE)
  np.testing.assert_allclose(outputs, want[3], **TOLERANCE)
  np.testing.assert_allclose(per_example, want[1], **TOLERANCE)
  np.testing.assert_allclose(loss, want[0], **TOLERANCE)
  # Each label has its own probability: the rows do not sum to 1.
  assert np.abs(outputs.sum(axis=1) - 1.0).max() > 0.05
  if pos_weight is not None:
    unweighted = np_multi_label(pooled, arrays["output_weights"],
                                arrays["output_bias"], labels)
    assert abs(unweighted[0] - want[0]) > 1e-3


def test_classifier_head_mask_of_a_micro_batch(built_models):
  """With 2 accumulation steps recorded (as the runner does), micro_step 5
  is the second micro-batch of update 2: the head's mask is the one the
  NumPy generator gives that share of the update's batch (its values from
  the micro-batch's element count on), not the first share's."""
  ids, mask, types = _inputs()
  labels = _labels(3)
  config = _config()
  with tf.Graph().as_default():
    _start_graph()
    dropout_masks.record_accumulation_steps(2)
    head = run_classifier.create_model(
        config, True, tf.constant(ids), tf.constant(mask),
        tf.constant(types), tf.constant(labels), 3, False)
    (model,) = built_models
    arrays = _head_arrays(_head_shapes(), seed=3)
    arrays.update(test_modeling._random_weights(config, seed=1))
    (_, _, logits, _), pooled = _run((head, model.get_pooled_output()),
                                     arrays)
  keep = np_keep_mask(pooled.shape, HEAD_DROPOUT, "loss/dropout",
                      accumulation_steps=2)
  first_share = np_keep_mask(pooled.shape, HEAD_DROPOUT, "loss/dropout",
                             micro_step=MICRO_STEP - 1, accumulation_steps=2)
  assert np.mean(keep != first_share) > 0.05
  weights, bias = arrays["output_weights"], arrays["output_bias"]
  _check_dropout_matters(pooled, weights, bias, labels, keep)
  want = np_classifier(pooled, weights, bias, labels, keep)
  np.testing.assert_allclose(logits, want[2], **TOLERANCE)


def _classifier_features(ids, mask, types, labels):
  """run_classifier's features, as tensors of the default graph."""
  return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
          "segment_ids": tf.constant(types), "label_ids": tf.constant(labels),
          "is_real_example": tf.ones([BATCH], tf.int32)}


def _check_encoder_mode(pooled, arrays, config, mode):
  """The mode reached the encoder: its pooled output is the dropout-free
  NumPy forward pass (tests/test_modeling.py) outside training, and not in
  training (the encoder's own dropout)."""
  ids, mask, types = _inputs()
  _, want = test_modeling._np_bert(arrays, config, ids, mask, types)
  gap = np.abs(pooled - want).max()
  if mode == TRAIN:
    assert gap > 1e-2
  else:
    assert gap < 1e-4


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classes", "regression"])
@pytest.mark.parametrize("mode", [TRAIN, EVAL])
def test_classifier_model_fn_loss(built_models, num_labels, mode):
  """run_classifier.model_fn_builder: the loss its TRAIN and EVAL specs
  report is the NumPy head's on the pooled output the head read, with the
  head's dropout (mask re-derived in NumPy) exactly when training, and the
  encoder in the mode's state (checked against tests/test_modeling.py's
  NumPy forward pass)."""
  ids, mask, types = _inputs()
  labels = _labels(num_labels)
  config = _config()
  with tf.Graph().as_default():
    _start_graph()
    model_fn = run_classifier.model_fn_builder(
        config, 3, None, 1e-4, 10, 1, False, False,
        is_regression=num_labels == 1)
    spec = model_fn(_classifier_features(ids, mask, types, labels), None,
                    mode, {})
    (model,) = built_models
    shapes = _head_shapes()
    arrays = _head_arrays(shapes, seed=num_labels)
    arrays.update(test_modeling._random_weights(config, seed=1))
    loss, pooled = _run((spec.loss, model.get_pooled_output()), arrays)
  assert shapes == {"output_weights": [num_labels, config.hidden_size],
                    "output_bias": [num_labels]}
  _check_encoder_mode(pooled, arrays, config, mode)
  keep = None
  if mode == TRAIN:
    keep = np_keep_mask(pooled.shape, HEAD_DROPOUT, "loss/dropout")
  want = np_classifier(pooled, arrays["output_weights"],
                       arrays["output_bias"], labels, keep)
  np.testing.assert_allclose(loss, want[0], **TOLERANCE)


# ------------------------------------------------------------- run_squad


SPAN_POSITIONS = (np.array([1, 9, 0, 4], np.int32),
                  np.array([3, 11, 0, 8], np.int32))


@pytest.mark.parametrize("mode", [TRAIN, PREDICT])
def test_span_head_and_training_loss_match_numpy(built_models, mode):
  """run_squad.model_fn_builder: cls/squad/output_weights [2, hidden] and
  cls/squad/output_bias [2]; start logits from row 0, end logits from row 1
  at every position of the sequence output the head read (no dropout of
  the head's own in training, as in Google's); TRAIN's loss is the mean
  of the start and end cross-entropies, each averaged over the batch."""
  ids, mask, types = _inputs()
  start_positions, end_positions = SPAN_POSITIONS
  config = _config()
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": types,
              "start_positions": start_positions,
              "end_positions": end_positions,
              "unique_ids": 1000000001 + np.arange(BATCH, dtype=np.int32)}
  with tf.Graph().as_default():
    _start_graph()
    model_fn = run_squad.model_fn_builder(config, None, 1e-4, 10, 1, False,
                                          False)
    spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None,
                    mode, {})
    (model,) = built_models
    shapes = _head_shapes()
    arrays = _head_arrays(shapes, seed=7)
    arrays.update(test_modeling._random_weights(config, seed=2))
    fetches = spec.loss if mode == TRAIN else spec.predictions
    got, sequence_output, pooled = _run(
        (fetches, model.get_sequence_output(), model.get_pooled_output()),
        arrays)
  assert shapes == {"cls/squad/output_weights": [2, config.hidden_size],
                    "cls/squad/output_bias": [2]}
  _check_encoder_mode(pooled, arrays, config, mode)
  start, end = np_span_logits(sequence_output,
                              arrays["cls/squad/output_weights"],
                              arrays["cls/squad/output_bias"])
  if mode == TRAIN:
    want = np_span_loss(start, end, start_positions, end_positions)
    np.testing.assert_allclose(got, want, **TOLERANCE)
    return
  assert sorted(got) == ["end_logits", "start_logits", "unique_ids"]
  np.testing.assert_array_equal(got["unique_ids"],
                                1000000001 + np.arange(BATCH))
  assert got["start_logits"].shape == (BATCH, SEQ)
  np.testing.assert_allclose(got["start_logits"], start, **TOLERANCE)
  np.testing.assert_allclose(got["end_logits"], end, **TOLERANCE)


# ------------------------------------------------------- run_pretraining


MASKED_POSITIONS = np.array([[1, 4, 0], [2, 5, 6], [3, 0, 0], [7, 8, 10]],
                            np.int32)
MASKED_IDS = np.array([[7, 30, 0], [98, 5, 12], [40, 0, 0], [3, 61, 77]],
                      np.int32)
MASKED_WEIGHTS = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]],
                          np.float32)
NEXT_SENTENCE_LABELS = np.array([[0], [1], [1], [0]], np.int32)


@pytest.mark.parametrize("mode", [TRAIN, EVAL])
def test_pretraining_model_fn_loss_reads_the_encoder_outputs(built_models,
                                                             mode):
  """run_pretraining.model_fn_builder's loss in TRAIN and EVAL: the masked-LM
  loss of the sequence output at the masked positions (the word embeddings
  as output weights) plus the next-sentence loss of the pooled output,
  with the NumPy heads of tests/test_run_pretraining.py (which test the
  head functions on given inputs; this checks what model_fn feeds them).
  In training, the encoder drops (its own dropout, checked on the pooled
  output) and the heads read its outputs as they are: a dropout added at
  either head's input, a feature routed to the wrong place or a loss left
  out of the sum fails here."""
  ids, mask, types = _inputs()
  config = _config()
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": types,
              "masked_lm_positions": MASKED_POSITIONS,
              "masked_lm_ids": MASKED_IDS,
              "masked_lm_weights": MASKED_WEIGHTS,
              "next_sentence_labels": NEXT_SENTENCE_LABELS}
  assert sorted(features) == sorted(pretraining.record_features(SEQ, 3))
  with tf.Graph().as_default():
    _start_graph()
    model_fn = run_pretraining.model_fn_builder(config, None, 1e-4, 10, 1,
                                                False, False)
    spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None,
                    mode, {})
    (model,) = built_models
    arrays = dict(test_modeling._random_weights(config, seed=3),
                  **test_run_pretraining._head_weights(config, 4))
    loss, sequence_output, pooled = _run(
        (spec.loss, model.get_sequence_output(), model.get_pooled_output()),
        arrays)
  _check_encoder_mode(pooled, arrays, config, mode)
  log_probs, _ = test_run_pretraining._np_masked_lm(arrays, sequence_output,
                                                    MASKED_POSITIONS)
  masked_lm_loss, _ = test_run_pretraining._np_masked_lm_loss(
      log_probs, MASKED_IDS, MASKED_WEIGHTS)
  next_log_probs = test_run_pretraining._np_next_sentence(arrays, pooled)
  next_sentence_loss = -next_log_probs[np.arange(BATCH),
                                       NEXT_SENTENCE_LABELS[:, 0]].mean()
  np.testing.assert_allclose(loss, masked_lm_loss + next_sentence_loss,
                             **TOLERANCE)
