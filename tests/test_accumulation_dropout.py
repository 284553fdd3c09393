"""Gradient accumulation with dropout on gives the update of one big batch.

A dropout mask is drawn for the update's whole batch and each micro-batch
(and replica) takes its examples' slice of it (engine/dropout_masks.py), so
k micro-batches of b examples use exactly the masks of one batch of k * b.
Checked here on a tiny BERT classifier (run_classifier's create_model and
model_fn: dropout 0.1 in the encoder and the head's own 0.1 on the pooled
output), batch 8 against 4 x 2 and 2 x 4:
  * the masks themselves: a micro-batch's are the big batch's rows, and
    differ from those of the update's other micro-batches (the control:
    without the record of the accumulation steps, the old per-micro-batch
    masks, they are not the big batch's);
  * the gradients: the mean over the micro-batches equals the big batch's,
    on every path that draws masks (skip-padding rows, recomputed layers,
    attention masks drawn again in the backward pass, the pooler's
    first-token pass), and the old masks miss by far more;
  * the runner: the weights and Adam slots after two updates, with
    accumulation and on 2 replicas (with and without accumulation).

Tolerances. The runs compute the same float32 gradient terms (one per row,
example x position) and add them in other orders and groupings; kernels
for other batch sizes may also round single values differently (the
per-example losses differ in their last bits). Two orders of a float32 sum
of n terms differ by at most 2 (n - 1) u times the sum of the terms'
magnitudes (u = 2^-24, tests/rounding.py; Higham, Accuracy and Stability
of Numerical Algorithms, 4.2). Here n = 96 rows per update, and the
magnitude is that of the gradient sums: the float64 sum over examples of
|the example's share of the gradient|, taken at its largest element over
all variables (an element's own would miss what cancels within one
example: attention's key biases have a gradient of 0 in exact arithmetic
and rounding noise in float32). The forward values' differences are a few
roundings each, well inside 190 u times that magnitude (the largest error
seen is under 2% of the bound). Through the runner, the gradients reach
the weights through the clip and Adam's formulas, which carry the bound to
first order (`_clipped`, `_adam_bound`).
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from engine import dropout_masks
from engine import graph_keys
from runner import estimator
import modeling
import rounding
import run_classifier
import synthetic
import test_modeling

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(test_modeling.TINY, hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1)
BATCH, SEQ = 8, 12
NUM_LABELS = 2
GRAPH_SEED = 11
# The update the single-graph tests build (global_step; micro_step is
# UPDATE * k + the micro-batch's index).
UPDATE = 3
U32 = rounding.unit_roundoff(tf.float32)
# Adam's constants in optimization.AdamWeightDecayOptimizer (Google's).
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-6


def _config():
  return modeling.BertConfig(**CONFIG)


def _features(num_examples, seed):
  """run_classifier's features; every other example padded after 8 of its
  12 positions (so the skip-padding layout drops rows)."""
  features = synthetic.classifier_features(
      num_examples, SEQ, CONFIG["vocab_size"], seed, two_segments=True)
  features["input_mask"][1::2, 8:] = 0
  features["input_ids"] *= features["input_mask"]
  features["segment_ids"] *= features["input_mask"]
  return features


def _weights():
  """{name: value} of every trainable variable: the encoder's from
  tests/test_modeling.py, the head's random and far from 0."""
  rng = np.random.RandomState(4)
  arrays = test_modeling._random_weights(_config(), seed=5)
  arrays["output_weights"] = (0.5 * rng.randn(
      NUM_LABELS, CONFIG["hidden_size"])).astype(np.float32)
  arrays["output_bias"] = (0.3 * rng.randn(NUM_LABELS)).astype(np.float32)
  return arrays


def _summation_tolerance(magnitude, rows=BATCH * SEQ):
  """2 (n - 1) u M for gradient sums of n = `rows` terms of magnitude M."""
  return 2 * (rows - 1) * U32 * magnitude


def _set_counters(sess, micro_step, global_step=UPDATE):
  sess.run([graph_keys.get_or_create_global_step().assign(global_step),
            graph_keys.get_micro_step().assign(micro_step)])


# ------------------------------------------------------------------ masks


def _dropout_keep(shape, micro_step, accumulation_steps=None):
  """The keep mask of one dropout call on ones of `shape` (a run's batch)
  in update UPDATE, at `micro_step`; `accumulation_steps` recorded as the
  runner records them (None: no record)."""
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(GRAPH_SEED)
    if accumulation_steps is not None:
      dropout_masks.record_accumulation_steps(accumulation_steps)
    with tf.compat.v1.variable_scope("layer"):
      dropped = modeling.dropout(tf.ones(shape), 0.1)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _set_counters(sess, micro_step)
      return sess.run(dropped) != 0


@pytest.mark.parametrize("k", [2, 4])
def test_micro_batch_masks_are_rows_of_the_big_batchs(k):
  """Each example holds 3 x 5 values, so micro-batches of 2 examples start
  inside one of the generator's 64-bit outputs. The micro-batches' masks
  are the big batch's rows; they differ from each other and from the next
  update's. Without the record (the masks of the old scheme: each
  micro-batch numbers its own values from 0) the second micro-batch's mask
  is not the big batch's."""
  example = [3, 5]
  big = _dropout_keep([BATCH] + example, micro_step=UPDATE)
  micro = BATCH // k
  masks = [_dropout_keep([micro] + example, UPDATE * k + i, k)
           for i in range(k)]
  for i, mask in enumerate(masks):
    np.testing.assert_array_equal(mask, big[i * micro:(i + 1) * micro])
  assert np.mean(masks[0] != masks[1]) > 0.05
  next_update = _dropout_keep([BATCH] + example, micro_step=UPDATE + 1)
  assert np.mean(next_update != big) > 0.05
  old_scheme = _dropout_keep([micro] + example, UPDATE * k + 1)
  assert np.mean(old_scheme != big[micro:2 * micro]) > 0.05
  assert abs(np.mean(~big) - 0.1) < 0.05


def test_accumulation_steps_must_be_whole_and_positive():
  with tf.Graph().as_default():
    for bad in (0, 1.5):
      with pytest.raises(ValueError, match="num_accumulation_steps"):
        dropout_masks.record_accumulation_steps(bad)


# -------------------------------------------------------------- gradients


def _classifier_run(features, micro_step, accumulation_steps=None,
                    per_example=False, loss_examples=None, update=UPDATE,
                    **model_kwargs):
  """One run of run_classifier.create_model (training mode) on `features`
  at `micro_step` of `update` (global_step).

  Args:
    loss_examples: (optional) slice of the examples whose mean loss is
      differentiated; all by default.

  Returns:
    (the examples' losses, {name: gradient of their mean loss}, and with
    `per_example` {name: float64 sum over them of |gradient of loss_e /
    their count|} (the magnitudes of the gradient sums), else None).
  """
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(GRAPH_SEED)
    if accumulation_steps is not None:
      dropout_masks.record_accumulation_steps(accumulation_steps)
    _, per_example_loss, _, _ = run_classifier.create_model(
        _config(), True, *[tf.constant(features[name]) for name in (
            "input_ids", "input_mask", "segment_ids", "label_ids")],
        NUM_LABELS, False, **model_kwargs)
    losses = per_example_loss[loss_examples or slice(None)]
    count = tf.cast(tf.size(losses), tf.float32)
    tvars = tf.compat.v1.trainable_variables()
    fetches = [losses, _dense(tf.gradients(tf.reduce_mean(losses), tvars))]
    if per_example:
      fetches.append([_dense(tf.gradients(losses[e] / count, tvars))
                      for e in range(losses.shape[0])])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      test_modeling._assign(sess, _weights())
      _set_counters(sess, micro_step, update)
      values = sess.run(fetches)
  names = [v.op.name for v in tvars]
  magnitudes = None
  if per_example:
    magnitudes = {name: sum(np.abs(shares[j]).astype(np.float64)
                            for shares in values[2])
                  for j, name in enumerate(names)}
  return values[0], dict(zip(names, values[1])), magnitudes


def _dense(grads):
  return [tf.convert_to_tensor(g) for g in grads]


def _assert_same_gradients(got, want, magnitudes, what):
  """Every gradient within the summation tolerance of the largest
  magnitude."""
  assert sorted(got) == sorted(want) == sorted(_weights())
  tolerance = _summation_tolerance(max(m.max() for m in magnitudes.values()))
  for name in want:
    rounding.assert_within_bound(got[name], want[name], tolerance,
                                 "%s: %s" % (what, name))


def _max_gap(got, want):
  return max(np.abs(got[name] - want[name]).max() for name in want)


@pytest.fixture(scope="module")
def big_batch():
  """(per-example losses, gradients, magnitudes) of the batch of 8 in one
  run (update UPDATE, no accumulation)."""
  return _classifier_run(_features(BATCH, 1), UPDATE, per_example=True)


@pytest.fixture(scope="module")
def second_half():
  """(losses, gradients of their mean, magnitudes) of the big batch's
  examples 4 to 7, differentiated in the run of all 8 (plain path)."""
  return _classifier_run(_features(BATCH, 1), UPDATE, per_example=True,
                         loss_examples=slice(BATCH // 2, None))


@pytest.mark.parametrize("k", [2, 4])
def test_accumulated_gradients_are_the_big_batchs(big_batch, k):
  """The mean of k micro-batches' gradients (what the accumulators apply)
  is the big batch's within the summation tolerance, and the micro-batches'
  per-example losses are the big batch's. The old masks (no record) move
  the gradients by more than a hundred times the tolerance."""
  features = _features(BATCH, 1)
  micro = BATCH // k
  big_losses, big_grads, magnitudes = big_batch

  def accumulated(record):
    losses, sums = [], None
    for i in range(k):
      rows = slice(i * micro, (i + 1) * micro)
      part = {name: value[rows] for name, value in features.items()}
      loss, grads, _ = _classifier_run(part, UPDATE * k + i,
                                       k if record else None)
      losses.append(loss)
      sums = grads if sums is None else {
          name: sums[name] + grads[name] for name in grads}
    return np.concatenate(losses), {name: total / k
                                    for name, total in sums.items()}

  losses, grads = accumulated(record=True)
  _assert_same_gradients(grads, big_grads, magnitudes, "k=%d" % k)
  rounding.assert_within_bound(losses, big_losses, _summation_tolerance(
      np.abs(big_losses).max()), "per-example losses")
  _, old_grads = accumulated(record=False)
  tolerance = _summation_tolerance(max(m.max() for m in magnitudes.values()))
  assert _max_gap(old_grads, big_grads) > 100 * tolerance


@pytest.mark.parametrize("model_kwargs,attention_again", [
    ({}, False), ({"skip_padding": True}, False),
    ({"gradient_checkpointing": True}, False), ({}, True),
    ({"skip_padding": True, "gradient_checkpointing": True}, True)],
                         ids=["plain", "skip_padding", "checkpointing",
                              "attention_again", "all_three"])
def test_every_path_draws_the_big_batchs_masks(second_half, monkeypatch,
                                               model_kwargs, attention_again):
  """The second of 2 micro-batches (the big batch's examples 4 to 7),
  built with the skip-padding rows, with recomputed layers, and with
  attention drawing its masks again in the backward pass (the encoder
  built with keep_activations_up_to=0): its per-example losses and the
  gradients of their mean are those of the same 4 examples in the plain
  run of all 8 (each example contributes to the gradient on its own, so
  these 4's part of the big run is this run)."""
  if attention_again:

    class AttentionAgain(modeling.BertModel):

      def __init__(self, *args, **kwargs):
        super().__init__(*args, keep_activations_up_to=0, **kwargs)

    monkeypatch.setattr(modeling, "BertModel", AttentionAgain)
  features = _features(BATCH, 1)
  half = {name: value[BATCH // 2:] for name, value in features.items()}
  want_losses, want_grads, magnitudes = second_half
  losses, grads, _ = _classifier_run(half, UPDATE * 2 + 1, 2, **model_kwargs)
  rounding.assert_within_bound(losses, want_losses, _summation_tolerance(
      np.abs(want_losses).max()), "per-example losses")
  _assert_same_gradients(grads, want_grads, magnitudes, "second micro-batch")


# ----------------------------------------------------------------- runner

# Two updates through the runner: the first at learning rate 0 (warmup), so
# both updates' gradients are taken at the initial weights in every run.
INIT_LR, TRAIN_STEPS, WARMUP_STEPS = 1e-3, 10, 1
WEIGHT_DECAY = 0.01
RUNNER_UPDATES = 2


def _runner_features():
  return _features(BATCH * RUNNER_UPDATES, 2)


def _write_checkpoint(path):
  """_weights() saved under the variables' names."""
  with tf.Graph().as_default():
    variables = [tf.compat.v1.get_variable(name, initializer=value)
                 for name, value in _weights().items()]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(variables).save(sess, path,
                                               write_meta_graph=False)


def _train(model_dir, init_checkpoint, k, distribution=None):
  """RUNNER_UPDATES updates of run_classifier's model_fn with k micro-batches
  per batch of BATCH (on `distribution`'s replicas); {name: value} of the
  checkpoint's variables."""
  model_fn = run_classifier.model_fn_builder(
      _config(), NUM_LABELS, init_checkpoint, INIT_LR, TRAIN_STEPS,
      WARMUP_STEPS, False, False)
  est = estimator.Estimator(
      model_fn, estimator.RunConfig(model_dir, tf_random_seed=GRAPH_SEED,
                                    num_accumulation_steps=k,
                                    distribution=distribution),
      train_batch_size=BATCH)
  features = _runner_features()
  est.train(lambda params: tf.data.Dataset.from_tensor_slices(
      features).batch(params["batch_size"], drop_remainder=True),
            max_steps=RUNNER_UPDATES)
  reader = tf.train.load_checkpoint(est.latest_checkpoint())
  return {name: reader.get_tensor(name)
          for name, _ in tf.train.list_variables(est.latest_checkpoint())}


def _clipped(gradients, magnitudes):
  """({name: the gradient after the global-norm clip}, {name: how far it
  can move}) of one update whose gradients are each within tau = 2 (n - 1)
  u M of the exact ones (M the largest magnitude of the gradient sums).

  Above norm 1 the clip divides by the norm, which moves by at most
  tau |g|_1 / |g|_2 (to first order) plus its own rounding: N u |g|_2 for
  its sum of N squares, the worst case of any order, and 2 u for the
  square root; the quotient g / |g| then moves by tau / |g| + |g_i| d|g| /
  |g|^2 plus its rounding. Both runs must be on the same side of the clip.
  """
  tau = _summation_tolerance(max(m.max() for m in magnitudes.values()))
  flat = np.concatenate([g.astype(np.float64).ravel()
                         for g in gradients.values()])
  norm = np.sqrt((flat**2).sum())
  assert abs(norm - 1.0) > 0.05, norm  # both runs clip, or neither does
  if norm < 1.0:
    return ({name: np.abs(g).astype(np.float64)
             for name, g in gradients.items()},
            {name: tau for name in gradients})
  moved_norm = tau * np.abs(flat).sum() / norm + (flat.size + 2) * U32 * norm
  clipped, moved = {}, {}
  for name, g in gradients.items():
    clipped[name] = np.abs(g).astype(np.float64) / norm
    moved[name] = (tau / norm + clipped[name] * moved_norm / norm +
                   2 * U32 * clipped[name])
  return clipped, moved


def _adam_bound(gradients, magnitudes, m, v):
  """How far Adam's two updates can move (m, the weights) when each
  update's gradients are off by up to their summation tolerance.

  With the first update at learning rate 0 and the clipped gradients g1,
  g2 of the two updates (each moving by up to d1, d2, `_clipped`),
  m = b1 (1 - b1) g1 + (1 - b1) g2 and v = b2 (1 - b2) g1^2 +
  (1 - b2) g2^2 move to first order by
    dm <= (1 - b1) (b1 d1 + d2),
    dv <= 2 (1 - b2) (b2 |g1| d1 + |g2| d2),
  the direction r = m / (sqrt(v) + eps) by
    dr <= dm / (sqrt(v) + eps) + |m| dv / (2 sqrt(v) (sqrt(v) + eps)^2),
  at most twice the largest |r| two such updates allow,
  (1 - b1) sqrt(b1^2 / b2 + 1) / sqrt(1 - b2), and the weights by lr dr.
  Each side also rounds its own update: 2 u per rounding of the values it
  rounds, counted as 6 roundings of |m| (two updates of m) and 10 of
  lr (|r| + decay |w|) besides the final |w|.

  Args:
    gradients, magnitudes: per update, {name: float64 array}.
    m, v: {name: the big batch's Adam slots after the two updates}.

  Returns:
    {name: (bound on |dm|, bound on |dw| less the final rounding of w)}.
  """
  lr = INIT_LR * (1.0 - 1.0 / TRAIN_STEPS)  # the schedule's rate at step 1
  (g1, d1), (g2, d2) = (_clipped(grads, sums)
                        for grads, sums in zip(gradients, magnitudes))
  r_cap = (1 - BETA_1) * np.sqrt(BETA_1**2 / BETA_2 + 1) / np.sqrt(1 - BETA_2)
  bounds = {}
  for name in m:
    m_abs = np.abs(m[name]).astype(np.float64)
    root = np.sqrt(v[name].astype(np.float64))
    dm = (1 - BETA_1) * (BETA_1 * d1[name] + d2[name])
    dv = 2 * (1 - BETA_2) * (BETA_2 * g1[name] * d1[name] +
                             g2[name] * d2[name])
    with np.errstate(divide="ignore", invalid="ignore"):
      dr = dm / (root + EPSILON) + m_abs * dv / (
          2 * root * (root + EPSILON)**2)
    dr = np.minimum(np.nan_to_num(dr, nan=np.inf), 2 * r_cap)
    direction = m_abs / (root + EPSILON) + WEIGHT_DECAY * np.abs(
        _weights()[name])
    bounds[name] = (dm + 2 * 6 * U32 * m_abs,
                    lr * dr + 2 * 10 * U32 * lr * direction)
  return bounds


def _reference_bounds(runs):
  """_adam_bound of the runs' two updates, from the big batch's gradients
  at the initial weights (the plain path, one run per update) and the
  single-device big batch's slots `runs["k1"]`."""
  features = _runner_features()
  gradients, magnitudes = [], []
  for update in range(RUNNER_UPDATES):
    rows = slice(update * BATCH, (update + 1) * BATCH)
    _, grads, sums = _classifier_run(
        {name: value[rows] for name, value in features.items()}, update,
        per_example=True, update=update)
    gradients.append(grads)
    magnitudes.append(sums)
  big = runs["k1"]
  return _adam_bound(gradients, magnitudes,
                     {name: big[name + "/adam_m"] for name in _weights()},
                     {name: big[name + "/adam_v"] for name in _weights()})


def _assert_same_update(runs, others):
  """The runs `others` (names in `runs`) end where runs["k1"] does: Adam's
  m and the weights within _adam_bound; returns the bounds' median
  fraction of the weights' movement."""
  big, initial = runs["k1"], _weights()
  bounds = _reference_bounds(runs)
  fractions = []
  for run in others:
    assert runs[run]["global_step"] == RUNNER_UPDATES
    for name, (m_bound, w_bound) in bounds.items():
      rounding.assert_within_bound(runs[run][name + "/adam_m"],
                                   big[name + "/adam_m"], m_bound,
                                   "%s: %s/adam_m" % (run, name))
      rounding.assert_within_bound(
          runs[run][name], big[name],
          w_bound + 2 * U32 * np.abs(big[name]), "%s: %s" % (run, name))
      fractions.append((w_bound / np.maximum(
          np.abs(big[name] - initial[name]), 1e-30)).ravel())
  return np.median(np.concatenate(fractions))


@pytest.mark.slow
def test_runner_accumulation_gives_the_big_batchs_update(tmp_path):
  """run_classifier's model_fn through the runner, dropout on, batch 8 as
  1 x 8, 2 x 4 and 4 x 2: the Adam slot m (the gradients' running mean)
  and the weights after two updates agree within the tolerance that the
  gradients' summation tolerance gives through Adam's formulas
  (_adam_bound), for every variable; for most weights that tolerance is
  far below how far the second update moved them."""
  init = str(tmp_path / "init" / "model.ckpt")
  _write_checkpoint(init)
  runs = {"k%d" % k: _train(str(tmp_path / ("k%d" % k)), init, k)
          for k in (1, 2, 4)}
  assert _assert_same_update(runs, ["k2", "k4"]) < 0.01


def _run_mirrored(out_dir):
  """Subprocess: the big batch on one device, and on 2 replicas (/cpu:0,
  /cpu:1) without and with 2 accumulation steps -> <run>.npz."""
  from runner import distribution  # pylint: disable=import-outside-toplevel
  strategy = distribution.make_distribution("mirrored", ["/cpu:0", "/cpu:1"])
  init = os.path.join(out_dir, "init", "model.ckpt")
  _write_checkpoint(init)
  for run, k, replicas in (("k1", 1, None), ("mirrored_k1", 1, strategy),
                           ("mirrored_k2", 2, strategy)):
    np.savez(os.path.join(out_dir, run + ".npz"),
             **_train(os.path.join(out_dir, run), init, k, replicas))


@pytest.mark.slow
def test_replicas_give_the_big_batchs_update(tmp_path):
  """The same two updates on 2 replicas (4 examples each), and on 2
  replicas with 2 accumulation steps (2 examples per replica and run):
  each replica's share is its rows of the update's masks, so the runs end
  where the single-device big batch does (as above). Run in a subprocess:
  the CPU splits into two devices only before TensorFlow starts."""
  process = subprocess.run(
      [sys.executable, os.path.abspath(__file__), str(tmp_path)],
      env=dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2"),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=600, check=False)
  assert process.returncode == 0, process.stdout[-3000:]
  runs = {run: dict(np.load(str(tmp_path / (run + ".npz"))))
          for run in ("k1", "mirrored_k1", "mirrored_k2")}
  assert _assert_same_update(runs, ["mirrored_k1", "mirrored_k2"]) < 0.01


if __name__ == "__main__":
  _run_mirrored(sys.argv[1])
