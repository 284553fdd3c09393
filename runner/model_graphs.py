# coding=utf-8
"""The model_fn and the input_fn called into graphs.

`ModelGraphs` holds what every graph of a run is built from: the model_fn,
its params, the RunConfig and the batch sizes of training, evaluation and
prediction. The training loop, evaluation and the export each build their
graph through one: a fresh graph with the RunConfig's seed, the params of
the mode (in training the micro-batch and the accumulation steps), and the
model_fn called in an XLA jit scope with `RunConfig(use_xla=True)`.

`call_input_fn` is how every graph reads its input: the input_fn's dataset,
prefetched, with the batches a resumed run already consumed skipped.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import contextlib
import re

import tensorflow as tf

from runner import model_spec

# Resource variables give well-defined read/write ordering under control
# dependencies, which the step counters and `recompute_grad` rely on.
tf.compat.v1.enable_resource_variables()

# Substrings of the op types that draw random numbers (RandomUniform,
# StatelessRandomUniformV2, TruncatedNormal, Multinomial, ...).
_RANDOM_OP_KINDS = ("Random", "TruncatedNormal", "Multinomial")
# Ops that get_variable adds beside each variable: its initializer, the
# assignment of the initial value, and the read that the Saver fetches.
_VARIABLE_SET_UP = re.compile(
    r"/(Initializer/|IsInitialized/|Assign$|Read/ReadVariableOp$)")


def _xla_compiles(node_def):
  """Whether the jit scope compiles this op: all but random number ops and
  the variables' set-up.

  XLA draws other numbers than TensorFlow's kernels from the same seed, so
  random ops stay TensorFlow kernels and initial values do not depend on
  --use_xla (dropout masks come from a kernel that is compiled either way,
  xla_kernels.keep_mask_16bit). The variables' set-up ops run once, or
  only when a checkpoint is saved, and each would become a cluster of its
  own, compiled for nothing.
  """
  if _VARIABLE_SET_UP.search(node_def.name):
    return False
  return not any(kind in node_def.op for kind in _RANDOM_OP_KINDS)


def call_input_fn(input_fn, params, skip_batches=0):
  """input_fn's dataset, its first `skip_batches` batches skipped, with the
  next batches prepared in the background while a step runs.

  tf.data's autotuning is off: its model thread sleeps between rounds for a
  period that doubles up to a minute, and closing the session waits for
  that sleep to end (up to 70 s of silence after training, evaluation and
  prediction on a busy machine). Without it, AUTOTUNE still means a
  parallel map over the CPU's cores and a prefetch buffer that grows while
  the step waits for input.
  """
  dataset = input_fn(params)
  if not isinstance(dataset, tf.data.Dataset):
    raise TypeError("input_fn must return a tf.data.Dataset of feature dicts, "
                    "got %r." % (type(dataset),))
  if skip_batches:
    dataset = dataset.skip(skip_batches)
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


class ModelGraphs(object):
  """A model_fn with what its graphs are built from.

  Attributes:
    config: the RunConfig.
    params: dict, the model_fn's params without the batch size.
    train_batch_size, eval_batch_size, predict_batch_size: the examples of
      an update, an evaluation batch and a prediction batch (None when not
      given; training needs train_batch_size).
  """

  def __init__(self, model_fn, config, params=None, train_batch_size=None,
               eval_batch_size=None, predict_batch_size=None):
    self._model_fn = model_fn
    self.config = config
    self.params = dict(params or {})
    self.train_batch_size = train_batch_size
    self.eval_batch_size = eval_batch_size
    self.predict_batch_size = predict_batch_size

  def params_with_batch_size(self, batch_size):
    params = dict(self.params)
    params["batch_size"] = batch_size
    return params

  def micro_batch_size(self):
    """Per-run batch size: --train_batch_size split into the RunConfig's
    num_accumulation_steps micro-batches.

    Raises:
      ValueError when the batch does not split into micro-batches that
      split evenly over the replicas (the training scripts' set-up chose
      num_accumulation_steps so that it does).
    """
    if not self.train_batch_size:
      raise ValueError("Estimator.train needs train_batch_size (flag "
                       "--train_batch_size).")
    num_accumulation_steps = self.config.num_accumulation_steps
    parts = num_accumulation_steps * self.config.num_replicas
    if self.train_batch_size % parts:
      raise ValueError(
          "train_batch_size=%d does not split into %d micro-batches over %d "
          "replicas." % (self.train_batch_size, num_accumulation_steps,
                         self.config.num_replicas))
    return self.train_batch_size // num_accumulation_steps

  def replica_batch_size(self):
    """Examples per replica and micro-batch."""
    return self.micro_batch_size() // self.config.num_replicas

  def train_params(self):
    """The params of the TRAIN graph: batch_size is the micro-batch, and
    ACCUMULATION_STEPS_KEY the accumulation steps of the RunConfig."""
    params = self.params_with_batch_size(self.micro_batch_size())
    params[model_spec.ACCUMULATION_STEPS_KEY] = (
        self.config.num_accumulation_steps)
    return params

  def call_model_fn(self, features, mode, params):
    """Calls the model_fn (in an XLA jit scope with use_xla)."""
    jit = (tf.xla.experimental.jit_scope(compile_ops=_xla_compiles)
           if self.config.use_xla else contextlib.nullcontext())
    with jit:
      spec = self._model_fn(features, None, mode, params)
    if not isinstance(spec, model_spec.EstimatorSpec):
      raise TypeError("model_fn must return an estimator.EstimatorSpec, got "
                      "%r." % (type(spec),))
    return spec

  def new_graph(self):
    """An empty graph with the RunConfig's random seed, if it has one."""
    graph = tf.Graph()
    if self.config.tf_random_seed is not None:
      with graph.as_default():
        tf.compat.v1.set_random_seed(self.config.tf_random_seed)
    return graph
