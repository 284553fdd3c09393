# coding=utf-8
"""The values a model_fn is called with and returns, as tf.estimator named
them.

`ModeKeys` are the three modes a model_fn is called in; `EstimatorSpec` is
what it returns in each; `ServingInputReceiver` is what an export's
`serving_input_receiver_fn` returns. The model_fn gets `params["batch_size"]`,
the examples of one run (in training a micro-batch), as TPUEstimator passed
it; in TRAIN mode also `params[ACCUMULATION_STEPS_KEY]`, RunConfig's
`num_accumulation_steps`, so the train op accumulates exactly as many
micro-batches as the runner feeds per update (runner/training_graph.py
reads it there).

Nothing here builds a graph or imports TensorFlow.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections

# The model_fn's params key of the accumulation steps in TRAIN mode.
ACCUMULATION_STEPS_KEY = "num_accumulation_steps"


class ModeKeys(object):
  """The three modes a `model_fn` is called in (values as in tf.estimator)."""
  TRAIN = "train"
  EVAL = "eval"
  PREDICT = "infer"


_SPEC_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops",
                "scaffold", "scaffold_fn")


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _SPEC_FIELDS)):
  """What a `model_fn` returns.

  Fields:
    mode: one of `ModeKeys`.
    predictions: (PREDICT) a tensor or a dict of tensors, batch-major.
    loss: (TRAIN, optionally EVAL) a scalar float tensor.
    train_op: (TRAIN) the op that consumes one micro-batch.
    eval_metric_ops: (EVAL) dict name -> (value_tensor, update_op), as
      `tf.compat.v1.metrics.*` return them.
    scaffold: None or a `tf.compat.v1.train.Scaffold`; its `init_fn` runs only
      when training starts fresh (not on resume).
    scaffold_fn: alternative to `scaffold` in the original scripts' style: a
      callable with no arguments returning a Scaffold (or None).
  """

  def __new__(cls, mode, predictions=None, loss=None, train_op=None,
              eval_metric_ops=None, scaffold=None, scaffold_fn=None):
    if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
      raise ValueError("EstimatorSpec: mode=%r is not one of %r, %r, %r." %
                       (mode, ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT))
    if scaffold is not None and scaffold_fn is not None:
      raise ValueError("EstimatorSpec: pass either scaffold or scaffold_fn, "
                       "not both.")
    return super(EstimatorSpec, cls).__new__(
        cls, mode, predictions, loss, train_op, eval_metric_ops, scaffold,
        scaffold_fn)

  def resolve_scaffold(self):
    """Returns the Scaffold (calling `scaffold_fn` if given) or None."""
    if self.scaffold_fn is not None:
      return self.scaffold_fn()
    return self.scaffold


class ServingInputReceiver(collections.namedtuple(
    "ServingInputReceiver", ["features", "receiver_tensors",
                             "extra_signatures"], defaults=({},))):
  """What a `serving_input_receiver_fn` returns, as in TF1's Estimator.

  features: dict of the Tensors the model_fn reads.
  receiver_tensors: dict of the placeholders a served request feeds, by the
    names the SavedModel's signature gives them.
  extra_signatures: dict name -> (inputs, outputs_fn), signatures beside
    "serving_default": their input placeholders by name, and a callable
    from the model_fn's predictions to their outputs by name.
  """
