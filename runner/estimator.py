# coding=utf-8
"""A small Estimator-style runner that replaces the removed `tf.estimator`.

The training scripts keep the original's shape: they build a `model_fn` and an
`input_fn` and hand them to an `Estimator`. This module runs them in graph mode
with a plain `tf.compat.v1.Session` loop, so every step is easy to follow:

  * `train` builds a fresh graph, restores the latest checkpoint of `model_dir`
    if there is one (otherwise it initializes, applying `init_from_checkpoint`
    and the scaffold's `init_fn`), and runs the train op until `global_step`
    reaches `max_steps` or the data ends. A `micro_step` counter (one per run
    of the train op, i.e. per micro-batch) is checkpointed with the model; a
    resumed run skips that many batches, so it sees exactly the data an
    uninterrupted run would.
  * `evaluate` runs the streaming metric update ops over the data and returns
    the metric values.
  * `predict` yields one dict of numpy values per example.
  * `export_saved_model` writes the prediction graph with the latest
    checkpoint's weights as a SavedModel for serving.

The model_fn gets `params["batch_size"]`, the examples of one run (in
training a micro-batch), as TPUEstimator passed it; in TRAIN mode also
`params[ACCUMULATION_STEPS_KEY]`, RunConfig's `num_accumulation_steps`, so
the train op accumulates exactly as many micro-batches as the runner feeds
per update (runner/training_graph.py reads it there).

A full disk (or a folder that cannot be written) while a checkpoint,
the summaries or an export is written ends in disk_space.WriteFailed: one
line naming the folder, what was written and about how much space it
needs; what the write left is removed, and the last complete checkpoint
stays the one a rerun resumes from. A record file found cut short or
damaged while reading ends in one line naming it
(tfrecord_input.damaged_records_error).

With `RunConfig(distribution=strategy)` training is data parallel: each
global micro-batch is split evenly over the strategy's replicas, the model_fn
runs once per replica on its shard (inside `call_for_each_replica`), and
`optimization.create_optimizer` averages the gradients over the replicas.
Evaluation and prediction always run on a single device. With
`RunConfig(use_xla=True)` every model_fn graph is built in an XLA jit scope.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import contextlib
import datetime
import os
import re
import signal
import threading
import time

from absl import logging
import numpy as np
import tensorflow as tf

from checkpoints import checkpoint_checks
from engine import dropout_masks
from engine import graph_keys
from engine import host_memory
from engine import weight_casts
from memory import out_of_memory
from runner import summaries
from runner import tfrecord_input
from userio import disk_space
from userio import file_systems
from userio import progress
from engine import tf_internals

# Resource variables give well-defined read/write ordering under control
# dependencies, which the step counters and `recompute_grad` rely on.
tf.compat.v1.enable_resource_variables()

# The model_fn's params key of the accumulation steps in TRAIN mode.
ACCUMULATION_STEPS_KEY = "num_accumulation_steps"
# Substrings of the op types that draw random numbers (RandomUniform,
# StatelessRandomUniformV2, TruncatedNormal, Multinomial, ...).
_RANDOM_OP_KINDS = ("Random", "TruncatedNormal", "Multinomial")
# Ops that get_variable adds beside each variable: its initializer, the
# assignment of the initial value, and the read that the Saver fetches.
_VARIABLE_SET_UP = re.compile(
    r"/(Initializer/|IsInitialized/|Assign$|Read/ReadVariableOp$)")


class ModeKeys(object):
  """The three modes a `model_fn` is called in (values as in tf.estimator)."""
  TRAIN = "train"
  EVAL = "eval"
  PREDICT = "infer"


class NonFiniteLossError(RuntimeError):
  """The training loss became NaN or infinite."""


class OutOfMemoryError(RuntimeError):
  """The device ran out of memory.

  Attributes:
    activity: what ran out of memory: "Training", "Evaluation" or
      "Prediction".
  """

  def __init__(self, message, activity=out_of_memory.TRAINING):
    super(OutOfMemoryError, self).__init__(message)
    self.activity = activity


class WorkerFailedError(RuntimeError):
  """Another worker of a multi-worker cluster stopped or became unreachable."""


class TrainingInterrupted(RuntimeError):
  """SIGINT (Ctrl-C) or SIGTERM stopped training after a checkpoint.

  Attributes:
    signum: the signal's number.
  """

  def __init__(self, message, signum):
    super(TrainingInterrupted, self).__init__(message)
    self.signum = signum


class _StopRequests(object):
  """Context that turns the first SIGINT or SIGTERM into a request.

  Training checks `signum` after every run and stops at the end of the
  update, with a checkpoint; a second signal of either kind acts at once,
  as it would without this context. Signal handlers can only be set from
  the main thread; elsewhere nothing is installed.
  """
  _SIGNALS = (signal.SIGINT, signal.SIGTERM)

  def __init__(self):
    self.signum = None
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for signum in self._SIGNALS:
        self._previous[signum] = signal.signal(signum, self._request)
    return self

  def _request(self, signum, frame):
    del frame  # Unused.
    self.signum = signum
    for other, handler in self._previous.items():
      signal.signal(other, handler)
    logging.warning("%s received: training stops at the end of this update "
                    "and saves a checkpoint (send it again to stop at once).",
                    signal.Signals(signum).name)

  def __exit__(self, *unused_exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    return False


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


class RunConfig(object):
  """Where and how often the runner checkpoints, logs and writes summaries."""

  def __init__(self, model_dir, save_checkpoints_steps=1000,
               keep_checkpoint_max=5, log_step_count_steps=100,
               save_summary_steps=100, tf_random_seed=None,
               session_config=None, num_accumulation_steps=1,
               oom_message_fn=None, distribution=None, use_xla=False,
               save_checkpoints_secs=None, log_step_count_secs=None,
               init_checkpoint=None):
    """Constructs a RunConfig.

    Args:
      model_dir: directory for checkpoints and TensorBoard summaries.
      save_checkpoints_steps: checkpoint every this many optimizer updates.
      keep_checkpoint_max: how many recent checkpoints to keep (0/None: all).
      log_step_count_steps: progress line every this many updates.
      save_summary_steps: TensorBoard scalars every this many updates.
      tf_random_seed: graph-level seed (initializers, shuffling, dropout).
      session_config: optional `tf.compat.v1.ConfigProto` (threads, XLA, ...).
      num_accumulation_steps: micro-batches per optimizer update; the
        model_fn gets it as params[ACCUMULATION_STEPS_KEY] in TRAIN mode.
      oom_message_fn: optional callable(ResourceExhaustedError) -> str giving
        a tailored out-of-memory advice for training (the training scripts'
        is out_of_memory.training_advice_fn).
      distribution: None, or a `tf.compat.v1.distribute` strategy to train
        with (data parallel; evaluation and prediction stay single-device).
      use_xla: compile the model_fn's graph (training and inference) with
        XLA.
      save_checkpoints_secs: also checkpoint at the first update boundary
        this many seconds after the last checkpoint (None: steps only).
      log_step_count_secs: also log a progress line at the first update
        this many seconds after the last one (None: steps only).
      init_checkpoint: the checkpoint the model_fn loads its weights from
        when model_dir has none (None: its initializers'), for the lines
        that say which weights a run uses.
    """
    if not model_dir:
      raise ValueError("RunConfig: model_dir is required (set --output_dir).")
    for name, value in (("save_checkpoints_steps", save_checkpoints_steps),
                        ("log_step_count_steps", log_step_count_steps),
                        ("save_summary_steps", save_summary_steps),
                        ("num_accumulation_steps", num_accumulation_steps)):
      if value is None or int(value) < 1:
        raise ValueError("RunConfig: %s=%r must be a positive integer (flag "
                         "--%s)." % (name, value, name))
    if save_checkpoints_secs is not None and not save_checkpoints_secs > 0:
      raise ValueError("RunConfig: save_checkpoints_secs=%r must be positive "
                       "(flag --save_checkpoints_secs)." %
                       (save_checkpoints_secs,))
    self.save_checkpoints_secs = save_checkpoints_secs
    self.log_step_count_secs = log_step_count_secs
    self.model_dir = model_dir
    self.save_checkpoints_steps = int(save_checkpoints_steps)
    self.keep_checkpoint_max = keep_checkpoint_max
    self.log_step_count_steps = int(log_step_count_steps)
    self.save_summary_steps = int(save_summary_steps)
    self.tf_random_seed = tf_random_seed
    self.session_config = session_config
    self.num_accumulation_steps = int(num_accumulation_steps)
    self.oom_message_fn = oom_message_fn
    self.distribution = distribution
    self.use_xla = bool(use_xla)
    self.init_checkpoint = init_checkpoint or None

  @property
  def num_replicas(self):
    """Replicas training in sync (1 without a distribution strategy)."""
    if self.distribution is None:
      return 1
    return self.distribution.num_replicas_in_sync

  @property
  def is_chief(self):
    """Whether this process writes checkpoints, summaries and outputs.

    Only one worker of a multi-worker cluster does (task 0 of "chief", else
    "worker" 0); single-process runs always do.
    """
    return is_chief(self.distribution)


def is_chief(distribution):
  """Whether this process writes the checkpoints, summaries and outputs of
  a run with `distribution` (a strategy, or None for one device): only one
  worker of a multi-worker cluster does."""
  return distribution is None or distribution.extended.should_checkpoint


class _Meter(object):
  """Averages loss and counts examples between two reports."""

  def __init__(self):
    self.reset()

  def reset(self):
    self.loss_sum = 0.0
    self.runs = 0
    self.examples = 0
    self.start = time.time()

  def add(self, loss, examples):
    self.loss_sum += loss
    self.runs += 1
    self.examples += examples

  def mean_loss(self):
    return self.loss_sum / max(self.runs, 1)

  def examples_per_sec(self):
    return self.examples / max(time.time() - self.start, 1e-9)


class _TrainGraph(collections.namedtuple(
    "_TrainGraph", ("graph", "iterator", "step_op", "fetches", "saver",
                    "scaffold", "accumulate_only"))):
  """The pieces of a built training graph the loop needs.

  `accumulate_only` is None, or the (step_op, fetches) to run instead of
  (step_op, fetches) on the runs that accumulate without applying.
  """


def _step_fetches(train_op, loss, micro_step, global_step):
  """(step_op, fetches) of a training run that executes `train_op`.

  A train op of optimization.create_optimizer advances micro_step itself
  (graph_keys.MICRO_STEP_ADVANCES); after any other, step_op does. The
  fetches read the loss, the counters (after the run, so the loop sees the
  new values) and the learning rate and loss scale when the graph has them.
  """
  step_op = train_op
  if not tf.compat.v1.get_collection(graph_keys.MICRO_STEP_ADVANCES):
    with tf.control_dependencies([train_op]):
      step_op = micro_step.assign_add(1)
  with tf.control_dependencies([step_op]):
    fetches = {"loss": tf.identity(loss),
               "global_step": global_step.read_value(),
               "micro_step": micro_step.read_value()}
    for key, collection in (("learning_rate", graph_keys.LEARNING_RATE),
                            ("loss_scale", graph_keys.LOSS_SCALE)):
      tensors = tf.compat.v1.get_collection(collection)
      if tensors:
        # A tensor (under a strategy, replica 0's), or a variable's value.
        fetches[key] = tf.convert_to_tensor(tensors[0])
  return step_op, fetches


def make_step_callable(sess, step_op, fetches):
  """A function that runs `step_op` (an op or tensor) and returns the values
  of `fetches`, a dict of tensors, as a dict of numpy values.

  `sess.run` builds the executors of a set of fetches (graph optimization,
  kernels) inside its first run; a callable builds them here, and the heap
  memory that construction freed goes back to the system (engine/host_memory.py)
  before the first step allocates its tensors. (What the first runs free
  later, e.g. compiling XLA kernels, the train op of
  optimization.create_optimizer hands back itself.)
  """
  keys = sorted(fetches)
  run = tf_internals.prepared_callable(sess, step_op,
                                       [fetches[key] for key in keys])
  host_memory.release_freed_heap()
  return lambda: dict(zip(keys, run()))


def _step_fns(sess, built):
  """(apply, accumulate_only) step functions of `built`; the second is None
  without gradient accumulation. See `make_step_callable`."""
  apply_fn = make_step_callable(sess, built.step_op, built.fetches)
  accumulate_fn = (None if built.accumulate_only is None else
                   make_step_callable(sess, *built.accumulate_only))
  return apply_fn, accumulate_fn


def _variables_bytes(graph):
  """The bytes of `graph`'s global variables: about what a checkpoint (or a
  SavedModel's variables) of them takes."""
  with graph.as_default():
    variables = tf.compat.v1.global_variables()
  return sum(v.shape.num_elements() * v.dtype.base_dtype.size
             for v in variables if v.shape.is_fully_defined())


def _saved_model_bytes(graph, assets):
  """About the bytes of a SavedModel of `graph`: its graph, its variables
  and the files `assets` ({name: path})."""
  return (graph.as_graph_def().ByteSize() + _variables_bytes(graph) +
          sum(tf.io.gfile.stat(path).length
              for path in (assets or {}).values()))


@contextlib.contextmanager
def _damaged_records(graph):
  """Turns a DataLossError of `graph`'s input into one line naming the
  record file (tfrecord_input.damaged_records_error)."""
  try:
    yield
  except tf.errors.DataLossError as e:
    raise tfrecord_input.damaged_records_error(e, graph) from None


def _format_left(seconds):
  return str(datetime.timedelta(seconds=int(round(seconds))))


def _saver(**kwargs):
  """A Saver whose `checkpoint` file names checkpoints relative to their
  folder, so the folder can be moved or copied and still resume."""
  return tf.compat.v1.train.Saver(save_relative_paths=True, **kwargs)


def _restore(saver, sess, checkpoint):
  """Restores `checkpoint`, explaining a checkpoint of a different model."""
  try:
    saver.restore(sess, checkpoint)
  except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
    raise ValueError(
        "Checkpoint %s does not match this model (another task, "
        "--bert_config_file or --max_seq_length?). Use a new --output_dir or "
        "the matching flags.\nTensorFlow said: %s" %
        (checkpoint, e.message.splitlines()[0])) from e


def _recover_last_checkpoints(saver, checkpoints):
  """What Saver.recover_last_checkpoints does, without its deprecated
  helper (which logs a migration notice on every resume): the saver
  counts `checkpoints` (prefixes, oldest first) as its own, with the time
  each was written."""
  saver.set_last_checkpoints_with_time([
      (path, tf.io.gfile.stat(path + ".index").mtime_nsec / 1e9)
      for path in checkpoints if tf.io.gfile.exists(path + ".index")])


def _run_initializers(sess):
  sess.run([tf.compat.v1.global_variables_initializer(),
            tf.compat.v1.local_variables_initializer(),
            tf.compat.v1.tables_initializer()])


def _fill_weight_copies(sess):
  """Casts the final weights into their compute-dtype copies, if the graph
  keeps any (engine/weight_casts.py)."""
  initializer = weight_casts.initializer(sess.graph)
  if initializer is not None:
    sess.run(initializer)


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


def _call_input_fn(input_fn, params, skip_batches=0):
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


class Estimator(object):
  """Trains, evaluates and predicts with a `model_fn` (see module docstring)."""

  def __init__(self, model_fn, config, params=None, train_batch_size=None,
               eval_batch_size=None, predict_batch_size=None):
    if not isinstance(config, RunConfig):
      raise TypeError("Estimator: config must be a RunConfig, got %r." %
                      (type(config),))
    self._model_fn = model_fn
    self._config = config
    self._params = dict(params or {})
    self._train_batch_size = train_batch_size
    self._eval_batch_size = eval_batch_size
    self._predict_batch_size = predict_batch_size

  @property
  def model_dir(self):
    return self._config.model_dir

  @property
  def config(self):
    return self._config

  @property
  def params(self):
    return dict(self._params)

  def latest_checkpoint(self):
    """Path prefix of the newest checkpoint in `model_dir`, or None."""
    return checkpoint_checks.latest_checkpoint(self.model_dir)

  # ---------------------------------------------------------------- building

  def _params_with_batch_size(self, batch_size):
    params = dict(self._params)
    params["batch_size"] = batch_size
    return params

  def _micro_batch_size(self):
    """Per-run batch size: --train_batch_size split into the RunConfig's
    num_accumulation_steps micro-batches.

    Raises:
      ValueError when the batch does not split into micro-batches that
      split evenly over the replicas (the training scripts' set-up chose
      num_accumulation_steps so that it does).
    """
    if not self._train_batch_size:
      raise ValueError("Estimator.train needs train_batch_size (flag "
                       "--train_batch_size).")
    num_accumulation_steps = self._config.num_accumulation_steps
    parts = num_accumulation_steps * self._config.num_replicas
    if self._train_batch_size % parts:
      raise ValueError(
          "train_batch_size=%d does not split into %d micro-batches over %d "
          "replicas." % (self._train_batch_size, num_accumulation_steps,
                         self._config.num_replicas))
    return self._train_batch_size // num_accumulation_steps

  def _replica_batch_size(self):
    """Examples per replica and micro-batch."""
    return self._micro_batch_size() // self._config.num_replicas

  def _train_params(self):
    """The params of the TRAIN graph: batch_size is the micro-batch, and
    ACCUMULATION_STEPS_KEY the accumulation steps of the RunConfig."""
    params = self._params_with_batch_size(self._micro_batch_size())
    params[ACCUMULATION_STEPS_KEY] = self._config.num_accumulation_steps
    return params

  def _call_model_fn(self, features, mode, params):
    """Calls the model_fn (in an XLA jit scope with use_xla)."""
    jit = (tf.xla.experimental.jit_scope(compile_ops=_xla_compiles)
           if self._config.use_xla else contextlib.nullcontext())
    with jit:
      spec = self._model_fn(features, None, mode, params)
    if not isinstance(spec, EstimatorSpec):
      raise TypeError("model_fn must return an estimator.EstimatorSpec, got "
                      "%r." % (type(spec),))
    return spec

  def _new_graph(self):
    graph = tf.Graph()
    if self._config.tf_random_seed is not None:
      with graph.as_default():
        tf.compat.v1.set_random_seed(self._config.tf_random_seed)
    return graph

  def _build_train_graph(self, input_fn, skip_batches):
    """Builds the training graph; `skip_batches` batches are dropped first.

    The skip is applied in fresh runs too (as 0) so fresh and resumed runs
    create the same ops and thus draw the same op-level random seeds.
    """
    params = self._train_params()
    graph = self._new_graph()
    strategy = self._config.distribution
    scope = (strategy.scope() if strategy is not None
             else contextlib.nullcontext())
    with graph.as_default(), scope:
      global_step = graph_keys.get_or_create_global_step()
      micro_step = graph_keys.get_or_create_micro_step()
      # Each micro-batch then draws its part of its update's dropout masks.
      dropout_masks.record_accumulation_steps(params[ACCUMULATION_STEPS_KEY])
      dataset = _call_input_fn(input_fn, params, skip_batches)
      iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
      if strategy is None:
        loss, train_op, scaffold = self._train_spec(iterator.get_next(),
                                                    params)
      else:
        loss, train_op, scaffold = self._replicated_train_spec(
            strategy, iterator.get_next(), params)
      step_op, fetches = _step_fetches(train_op, loss, micro_step,
                                       global_step)
      accumulate_ops = tf.compat.v1.get_collection(
          graph_keys.ACCUMULATE_ONLY)
      accumulate_only = None
      if accumulate_ops:
        accumulate_only = _step_fetches(tf.group(*accumulate_ops), loss,
                                        micro_step, global_step)
      saver = _saver(max_to_keep=self._config.keep_checkpoint_max or 0)
    return _TrainGraph(graph, iterator, step_op, fetches, saver, scaffold,
                       accumulate_only)

  def _train_spec(self, features, params):
    """(loss, train_op, scaffold) of the model_fn in TRAIN mode."""
    spec = self._call_model_fn(features, ModeKeys.TRAIN, params)
    if spec.loss is None or spec.train_op is None:
      raise ValueError("model_fn must return loss and train_op in TRAIN "
                       "mode.")
    return spec.loss, spec.train_op, spec.resolve_scaffold()

  def _replicated_train_spec(self, strategy, features, params):
    """(loss, train_op, scaffold) with the model_fn run once per replica.

    Args:
      strategy: the distribution strategy; its scope is entered.
      features: the global micro-batch, tensors [micro_batch, ...]; replica
        r (over all workers) takes rows [r * b, (r + 1) * b) with b the
        replica batch size, so the replicas together see exactly the
        examples of a single-device run.
      params: the model_fn's params.

    Returns:
      The mean loss of this process's replicas (with mirrored: the global
      micro-batch's mean loss), the op running every local replica's train
      op, and the first local replica's scaffold.
    """
    batch = self._replica_batch_size()
    scaffolds = []

    def replica_fn(global_features):
      context = tf.distribute.get_replica_context()
      replica = tf.get_static_value(context.replica_id_in_sync_group)
      shard = tf.nest.map_structure(
          lambda t: t[replica * batch:(replica + 1) * batch], global_features)
      loss, train_op, scaffold = self._train_spec(shard, params)
      if not scaffolds:
        scaffolds.append(scaffold)
      return loss, train_op

    # The model_fn is graph-building Python code; autograph must not rewrite
    # its control flow.
    losses, train_ops = strategy.extended.call_for_each_replica(
        tf.autograph.experimental.do_not_convert(replica_fn),
        args=(features,))
    # This process's replicas' mean loss (every replica's with mirrored), for
    # the log: no extra communication per micro-batch.
    local_losses = strategy.experimental_local_results(losses)
    loss = tf.add_n(local_losses) / float(len(local_losses))
    train_op = tf.group(strategy.experimental_local_results(train_ops))
    return loss, train_op, scaffolds[0]

  def _build_eval_or_predict_graph(self, input_fn, mode, batch_size):
    """Returns (graph, iterator, spec, scaffold) for EVAL or PREDICT.

    The scaffold is resolved here, while building, because a `scaffold_fn`
    calling `init_from_checkpoint` must run before the initializers do.
    """
    params = self._params_with_batch_size(batch_size)
    graph = self._new_graph()
    with graph.as_default():
      tf.compat.v1.train.get_or_create_global_step()
      iterator = tf.compat.v1.data.make_initializable_iterator(
          _call_input_fn(input_fn, params))
      spec = self._call_model_fn(iterator.get_next(), mode, params)
      scaffold = spec.resolve_scaffold()
    return graph, iterator, spec, scaffold

  def _session(self, graph):
    return tf.compat.v1.Session(graph=graph, config=self._session_config())

  def _session_config(self):
    """RunConfig's session_config (else TensorFlow's default) with
    place_pruned_graph: the session then places and keeps only the parts of
    the graph it runs, instead of a placed copy of all of it (the Saver's
    restore ops, the initializers, ...), which lowers the process's peak
    (docs/results.md, "Whole-process peak of run_classifier.py"). None (TensorFlow's
    default, unchanged) when the default cannot be read."""
    if self._config.session_config is not None:
      config = tf.compat.v1.ConfigProto()
      config.CopyFrom(self._config.session_config)
    else:
      config = tf_internals.default_session_config()
      if config is None:
        return None
    config.graph_options.place_pruned_graph = True
    return config

  def _multi_worker(self):
    """Whether training spans several processes (TF_CONFIG's cluster)."""
    strategy = self._config.distribution
    resolver = strategy and strategy.cluster_resolver
    return resolver is not None and bool(resolver.cluster_spec().jobs)

  def _train_session(self, graph):
    """A session for the training graph.

    A multi-worker strategy's collectives reach the other workers through
    this worker's gRPC server (which the strategy started), so the session
    targets it with the strategy's settings.
    """
    if not self._multi_worker():
      return self._session(graph)
    strategy = self._config.distribution
    resolver = strategy.cluster_resolver
    address = resolver.cluster_spec().task_address(resolver.task_type,
                                                   resolver.task_id)
    config = strategy.update_config_proto(
        self._config.session_config or tf.compat.v1.ConfigProto())
    return tf.compat.v1.Session(target="grpc://" + address, graph=graph,
                                config=config)

  # ---------------------------------------------------------------- training

  def _checkpoint_counters(self, checkpoint):
    """(global_step, micro_step) stored in `checkpoint` (0 if absent)."""
    reader = checkpoint_checks.reader_of(checkpoint)
    values = []
    for name in ("global_step", "micro_step"):
      values.append(int(reader.get_tensor(name))
                    if reader.has_tensor(name) else 0)
    return tuple(values)

  def train(self, input_fn, max_steps):
    """Trains until `global_step` reaches `max_steps` or the data ends.

    Args:
      input_fn: callable(params) -> batched tf.data.Dataset of feature dicts;
        params["batch_size"] is the micro-batch size.
      max_steps: total number of optimizer updates (across restarts).

    Returns:
      self.
    """
    if self._config.is_chief:
      for name in checkpoint_checks.remove_unfinished_saves(self.model_dir):
        logging.info("Removed %s, left by a run stopped while it saved a "
                     "checkpoint.", name)
    checkpoint = self.latest_checkpoint()
    start_step, skip = (self._checkpoint_counters(checkpoint)
                        if checkpoint else (0, 0))
    if start_step >= max_steps:
      logging.info("Skipping training: %s is already at step %d >= "
                   "max_steps %d.", checkpoint, start_step, max_steps)
      return self
    logging.info("Preparing training: graph, session and %s ...",
                 "checkpoint" if checkpoint else "initial weights")
    built = self._build_train_graph(input_fn, skip)
    if self._config.is_chief:
      tf.io.gfile.makedirs(self.model_dir)
    with built.graph.as_default(), self._train_session(built.graph) as sess, \
        self._out_of_memory(out_of_memory.TRAINING):
      self._initialize_or_restore(sess, built, checkpoint, skip)
      built.graph.finalize()
      writer = self._new_event_file() if self._config.is_chief else None
      try:
        logging.info("Training from step %d to %d, a progress line every %d "
                     "steps%s ...", start_step, max_steps,
                     self._config.log_step_count_steps,
                     "" if self._config.log_step_count_secs is None else
                     " or %d s" % self._config.log_step_count_secs)
        with _damaged_records(built.graph):
          self._train_loop(sess, built, _step_fns(sess, built), writer,
                           max_steps, start_step, skip,
                           save_first=checkpoint is None)
      finally:
        if writer is not None:
          writer.close()
    return self

  def _initialize_or_restore(self, sess, built, checkpoint, skip):
    """Initializers first; a checkpoint then overrides them (resume)."""
    _run_initializers(sess)
    if checkpoint:
      logging.info("Resuming from %s; skipping %d batches already consumed.",
                   checkpoint, skip)
      _restore(built.saver, sess, checkpoint)
      # Only this folder's own files: the saver deletes the oldest of them
      # as it writes new ones.
      _recover_last_checkpoints(
          built.saver, checkpoint_checks.checkpoints_in(self.model_dir))
    elif built.scaffold is not None and built.scaffold.init_fn is not None:
      built.scaffold.init_fn(sess)
    sess.run(built.iterator.initializer)

  def _run_train_step(self, step_fns, micro_step):
    """One micro-batch; returns the fetched values or None at end of data.

    `step_fns` are (apply, accumulate_only) from `_step_fns`; `micro_step`
    counts the micro-batches run before this one.
    """
    apply_fn, accumulate_fn = step_fns
    run_fn = apply_fn
    if (accumulate_fn is not None and
        (micro_step + 1) % self._config.num_accumulation_steps):
      run_fn = accumulate_fn  # This run does not apply.
    try:
      return run_fn()
    except tf.errors.OutOfRangeError:
      return None
    except tf.errors.UnavailableError as e:
      if not self._multi_worker():
        raise
      raise WorkerFailedError(
          "Training stopped: a worker of the cluster in TF_CONFIG stopped or "
          "is unreachable. Restart all workers with the same flags; they "
          "resume from the chief's last checkpoint (%s).\nTensorFlow said: "
          "%s" % (self.latest_checkpoint() or "none yet",
                  e.message.splitlines()[0])) from e

  @contextlib.contextmanager
  def _out_of_memory(self, activity):
    """Turns an allocation that fails inside into OutOfMemoryError with
    out_of_memory's advice for `activity` (out_of_memory.TRAINING,
    EVALUATION or PREDICTION)."""
    try:
      yield
    except tf.errors.ResourceExhaustedError as e:
      if disk_space.problem(e) is not None:
        # A save op out of disk space, not of memory.
        raise disk_space.failure_of(e, flag="--output_dir") from None
      batch_size = {out_of_memory.TRAINING: self._train_batch_size,
                    out_of_memory.EVALUATION: self._eval_batch_size,
                    out_of_memory.PREDICTION: self._predict_batch_size}
      raise OutOfMemoryError(out_of_memory.message(
          e, activity, batch_size=batch_size[activity],
          num_accumulation_steps=self._config.num_accumulation_steps,
          training_advice=self._config.oom_message_fn), activity) from e

  def _check_finite(self, values, step, micro_step):
    loss = values["loss"]
    if np.all(np.isfinite(loss)):
      return
    lr = values.get("learning_rate")
    raise NonFiniteLossError(
        "Loss is %s at step %d (micro-batch %d, learning rate %s). Nothing "
        "was saved from this run after the last checkpoint (%s), so a rerun "
        "resumes from it. Try: lower --learning_rate, raise "
        "--warmup_proportion (--num_warmup_steps in run_pretraining.py), use "
        "--precision=fp32 (or fp16 with loss "
        "scaling), and check the input data for bad values." %
        (loss, step, micro_step, "n/a" if lr is None else "%.3g" % lr,
         self.latest_checkpoint() or "none yet"))

  def _save(self, sess, built, step):
    if not self._config.is_chief:
      return
    name = "%s-%d" % (checkpoint_checks.CHECKPOINT_BASENAME, step)
    with disk_space.writing(
        self.model_dir, "checkpoint " + name,
        size=lambda: _variables_bytes(built.graph),
        partial=self._unfinished_checkpoint(name), flag="--output_dir",
        then=self._resume_point):
      # Graphs may embed in-memory features as constants; the code, not a
      # .meta file, rebuilds the graph, so the meta graph is not written.
      path = built.saver.save(
          sess,
          os.path.join(self.model_dir, checkpoint_checks.CHECKPOINT_BASENAME),
          global_step=step, write_meta_graph=False)
    logging.info("Saved checkpoint %s", path)

  def _unfinished_checkpoint(self, name):
    """callable(entry) -> whether an entry of model_dir that a failed save
    of checkpoint `name` created is to be removed: the temporary files of
    TensorFlow's save, and the checkpoint's own files unless the
    `checkpoint` file already lists it (then only its removal of older
    checkpoints failed)."""
    def unfinished(entry):
      if disk_space.is_partial(entry):
        return True
      latest = self.latest_checkpoint()
      return entry.startswith(name + ".") and not (
          latest and os.path.basename(latest) == name)
    return unfinished

  def _resume_point(self):
    """What running the same command again does, for messages."""
    latest = self.latest_checkpoint()
    if latest:
      return "it resumes from %s" % os.path.basename(latest)
    return "it starts over (no checkpoint was saved yet)"

  def _new_event_file(self):
    """The summaries.EventFile of this training run's summaries in model_dir."""
    with disk_space.writing(self.model_dir, "TensorBoard summaries",
                            partial=lambda entry: False, flag="--output_dir",
                            then=self._resume_point):
      return summaries.EventFile(self.model_dir)

  def _train_loop(self, sess, built, step_fns, writer, max_steps, start_step,
                  skip, save_first=False):
    """Runs micro-batches; checkpoints, logs and summarizes per update.

    Checkpoints are written at update boundaries (no partial accumulation):
    first if `save_first`, every save_checkpoints_steps updates,
    save_checkpoints_secs after the last one, at the end, and when SIGINT or
    SIGTERM asks training to stop, which then raises TrainingInterrupted.
    """
    micro_batch = self._micro_batch_size()
    log_meter, summary_meter = _Meter(), _Meter()
    start_time = last_save_time = last_log_time = time.time()
    step, micro_step = start_step, skip
    saved = (step, micro_step)
    with _StopRequests() as stop:
      if save_first:
        # A new run saves its starting point, as tf.estimator did: a folder
        # that cannot take a checkpoint fails before the first step, and
        # TensorFlow's first save, which grows the C heap for good, runs
        # before the step's tensors exist instead of on top of them.
        self._save(sess, built, step)
      while step < max_steps:
        values = self._run_train_step(step_fns, micro_step)
        if values is None:
          logging.info("Input data ended at step %d.", step)
          break
        micro_step = int(values["micro_step"])
        self._check_finite(values, step + 1, micro_step)
        log_meter.add(values["loss"], micro_batch)
        summary_meter.add(values["loss"], micro_batch)
        if micro_step % self._config.num_accumulation_steps:
          continue  # a micro-batch of an update still being accumulated
        updated, step = step != values["global_step"], int(
            values["global_step"])
        if (stop.signum is not None or
            (updated and step % self._config.save_checkpoints_steps == 0) or
            self._save_is_due_by_time(last_save_time)):
          self._save(sess, built, step)
          saved, last_save_time = (step, micro_step), time.time()
        if stop.signum is not None:
          raise self._interrupted(stop.signum, step, max_steps)
        if not updated:
          continue  # fp16's loss scaling skipped the update
        if (step % self._config.log_step_count_steps == 0 or
            step >= max_steps or self._log_is_due_by_time(last_log_time)):
          self._log_progress(log_meter, values, step, max_steps,
                             (time.time() - start_time) / (step - start_step))
          last_log_time = time.time()
        if step % self._config.save_summary_steps == 0 or step >= max_steps:
          self._write_summaries(summary_meter, values, step, writer)
      if saved != (step, micro_step):
        # Inside the context: a signal during this last save waits for it.
        self._save(sess, built, step)
      if stop.signum is not None:
        raise self._interrupted(stop.signum, step, max_steps)

  def _interrupted(self, signum, step, max_steps):
    """The exception that ends training on `signum`, once step `step` is
    saved."""
    return TrainingInterrupted(
        "Training stopped by %s at step %d/%d; checkpoint %s holds it. "
        "Run the same command again to resume." % (
            signal.Signals(signum).name, step, max_steps,
            self.latest_checkpoint()), signum)

  def _log_is_due_by_time(self, last_log_time):
    secs = self._config.log_step_count_secs
    return secs is not None and time.time() - last_log_time >= secs

  def _save_is_due_by_time(self, last_save_time):
    secs = self._config.save_checkpoints_secs
    return secs is not None and time.time() - last_save_time >= secs

  def _log_progress(self, meter, values, step, max_steps, secs_per_step):
    parts = ["step %d/%d (%.1f%%)" % (step, max_steps,
                                      100.0 * step / max_steps),
             "loss = %.4f" % meter.mean_loss()]
    if "learning_rate" in values:
      parts.append("lr = %.1e" % values["learning_rate"])
    parts.append("%.1f examples/sec" % meter.examples_per_sec())
    logging.info("%s, %s left", ", ".join(parts),
                 _format_left(secs_per_step * (max_steps - step)))
    meter.reset()

  def _write_summaries(self, meter, values, step, writer):
    if writer is None:
      meter.reset()
      return
    scalars = {"loss": meter.mean_loss(),
               "examples_per_sec": meter.examples_per_sec()}
    for key in ("learning_rate", "loss_scale"):
      if key in values:
        scalars[key] = values[key]
    with disk_space.writing(
        self.model_dir, "TensorBoard summaries %s" % os.path.basename(
            writer.path), size=lambda: writer.pending_bytes,
        partial=lambda entry: False, flag="--output_dir",
        then=self._resume_point):
      summaries.scalar_summary(scalars, step, writer)
    meter.reset()

  # -------------------------------------------------------------- evaluation

  def evaluate(self, input_fn, steps=None, checkpoint_path=None, name=None,
               *, num_batches=None):
    """Evaluates a checkpoint over the data (or `steps` batches).

    Without a checkpoint in model_dir (and no `checkpoint_path`) it evaluates
    the initial values, with a warning. A progress line (batches done of
    `steps` or `num_batches`, the number input_fn yields when known, rate,
    time left) is logged every 10 seconds.

    Returns:
      dict metric name -> value, plus "loss" (mean over batches, if the spec
      has a loss) and "global_step" (int) of the evaluated checkpoint.
    """
    logging.info("Evaluating %s ...", self._weights_name(checkpoint_path))
    graph, iterator, spec, scaffold = self._build_eval_or_predict_graph(
        input_fn, ModeKeys.EVAL, self._eval_batch_size)
    with graph.as_default():
      metric_ops = dict(spec.eval_metric_ops or {})
      if spec.loss is not None and "loss" not in metric_ops:
        metric_ops["loss"] = tf.compat.v1.metrics.mean(spec.loss)
      values = {key: value for key, (value, _) in metric_ops.items()}
      updates = [update for _, update in metric_ops.values()]
      with self._session(graph) as sess, self._out_of_memory(
          out_of_memory.EVALUATION):
        checkpoint = self._restore_or_initialize(
            sess, scaffold, checkpoint_path, "Estimator.evaluate")
        sess.run(iterator.initializer)
        with _damaged_records(graph):
          batches = self._run_updates(
              sess, updates, steps,
              progress.Progress("Evaluating", steps or num_batches,
                                "batches"))
        results = sess.run(values)
        global_step = int(sess.run(tf.compat.v1.train.get_global_step()))
    results = {key: np.asarray(value).item() if np.size(value) == 1
               else np.asarray(value) for key, value in results.items()}
    results["global_step"] = global_step
    logging.info("Evaluated %s on %d batches: %s", checkpoint, batches,
                 ", ".join("%s = %s" % kv for kv in sorted(results.items())))
    self._write_eval_summaries(results, global_step, name)
    return results

  def _run_updates(self, sess, updates, steps, counter):
    while steps is None or counter.done < steps:
      try:
        sess.run(updates)
      except tf.errors.OutOfRangeError:
        break
      counter.advance()
    counter.finish()
    return counter.done

  def _write_eval_summaries(self, results, global_step, name):
    if self._config.is_chief:
      summaries.write_metrics(self.model_dir,
                              "eval_" + name if name else "eval", results,
                              global_step)

  # -------------------------------------------------------------- prediction

  def predict(self, input_fn, checkpoint_path=None,
              yield_single_examples=True, *, num_batches=None,
              for_evaluation=False):
    """Yields predictions: per example (default) or per batch.

    With no checkpoint in model_dir (and no checkpoint_path), the variables
    are initialized as in a fresh training run (so `init_from_checkpoint` in
    the model_fn applies), as the original Estimator did. A progress line
    (batches done of `num_batches` when known, rate, time left) is logged
    every 10 seconds. `for_evaluation`: the predictions are what a task
    scores itself (NER's conlleval, say): the batches are eval_batch_size
    and running out of memory is an evaluation's.

    Yields:
      dicts of numpy values (or bare values if `predictions` is a tensor).
    """
    logging.info("Predicting with %s ...", self._weights_name(checkpoint_path))
    activity = (out_of_memory.EVALUATION if for_evaluation else
                out_of_memory.PREDICTION)
    graph, iterator, spec, scaffold = self._build_eval_or_predict_graph(
        input_fn, ModeKeys.PREDICT, self._eval_batch_size if for_evaluation
        else self._predict_batch_size)
    if spec.predictions is None:
      raise ValueError("model_fn must return predictions in PREDICT mode.")
    sess = self._session(graph)
    try:
      with self._out_of_memory(activity):
        with graph.as_default():
          self._restore_or_initialize(sess, scaffold, checkpoint_path,
                                      "Estimator.predict")
          sess.run(iterator.initializer)
        # The graph is not left as the default while yielding, so callers
        # can build or run other TensorFlow code between examples.
        counter = progress.Progress("Predicting", num_batches, "batches")
        while True:
          try:
            with _damaged_records(graph):
              batch = sess.run(spec.predictions)
          except tf.errors.OutOfRangeError:
            counter.finish()
            return
          counter.advance()
          if yield_single_examples:
            for example in _split_batch(batch):
              yield example
          else:
            yield batch
    finally:
      sess.close()

  # ------------------------------------------------------------------ export

  def export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                         checkpoint_path=None, assets=None):
    """Writes a SavedModel of the PREDICT graph; returns its directory.

    The model is `export_dir_base/<unix time>`, with the tag "serve" and a
    "serving_default" signature from the receiver's placeholders to the
    model_fn's predictions (less those that only pass on a feature the
    receiver makes up rather than takes from the request). It is written
    under a temporary name and renamed when complete, so no half-written
    model is ever found there.

    Args:
      export_dir_base: directory to create the model's directory in.
      serving_input_receiver_fn: callable () -> `ServingInputReceiver`,
        called in the export graph.
      checkpoint_path: weights to export; default the latest checkpoint of
        model_dir.
      assets: optional dict file name -> path of files the model needs
        beside its graph (config, vocabulary, labels), copied into the
        SavedModel's `assets.extra/`: the folder TensorFlow Serving keeps
        for files no graph op reads, so loading ignores them and a client
        finds them next to the model.

    Raises:
      ValueError: there is no checkpoint, or the predictions are not a dict.
    """
    checkpoint = checkpoint_path or self.latest_checkpoint()
    if not checkpoint:
      raise ValueError(
          "Nothing to export: no checkpoint in %s. Train first (--do_train) "
          "or point --output_dir at a finished run." % self.model_dir)
    logging.info("Exporting %s as a SavedModel into %s ...", checkpoint,
                 export_dir_base)
    graph = self._new_graph()
    with graph.as_default():
      tf.compat.v1.train.get_or_create_global_step()
      receiver = serving_input_receiver_fn()
      spec = self._call_model_fn(receiver.features, ModeKeys.PREDICT,
                                 self._params_with_batch_size(None))
      if not isinstance(spec.predictions, dict):
        raise ValueError("export_saved_model needs the model_fn's PREDICT "
                         "predictions as a dict of named Tensors.")
      signatures = {"serving_default": _predict_signature(
          receiver.receiver_tensors,
          _served_predictions(spec.predictions, receiver))}
      for name, (inputs, outputs_fn) in receiver.extra_signatures.items():
        signatures[name] = _predict_signature(
            inputs, outputs_fn(spec.predictions))
      # A registry the model's code keeps while building (dropout sites) is
      # a Python object: the MetaGraph cannot hold it, and serving does not
      # need it.
      graph.clear_collection(graph_keys.DROPOUT_SITES)
      export_dir = _new_export_dir(export_dir_base)
      temporary_dir = export_dir + ".incomplete"
      if tf.io.gfile.exists(temporary_dir):  # Left by an interrupted export.
        tf.io.gfile.rmtree(temporary_dir)
      with disk_space.writing(
          export_dir_base, "the SavedModel %s" % os.path.basename(export_dir),
          size=lambda: _saved_model_bytes(graph, assets),
          flag="--export_dir"):
        self._write_saved_model(graph, checkpoint, signatures,
                                temporary_dir, assets)
        file_systems.move_folder(temporary_dir, export_dir)
    logging.info("Exported %s as a SavedModel to %s", checkpoint, export_dir)
    return export_dir

  def _weights_name(self, checkpoint_path):
    """What `_restore_or_initialize` will load, for a progress line."""
    checkpoint = checkpoint_path or self.latest_checkpoint()
    if checkpoint:
      return checkpoint
    if self._config.init_checkpoint:
      return "the weights of %s" % self._config.init_checkpoint
    return "the initialized variables"

  def _write_saved_model(self, graph, checkpoint, signatures, folder,
                         assets):
    """Writes the SavedModel of `graph` with `checkpoint`'s weights, the
    SignatureDefs `signatures` by name and the files `assets` into
    `folder` (see export_saved_model)."""
    with self._session(graph) as sess:
      _restore(_saver(), sess, checkpoint)
      builder = tf.compat.v1.saved_model.Builder(folder)
      # The weight copies are filled when the SavedModel is loaded.
      builder.add_meta_graph_and_variables(
          sess, [tf.compat.v1.saved_model.SERVING],
          signature_def_map=signatures,
          strip_default_attrs=True, main_op=weight_casts.initializer(graph))
      builder.save()
    extra = os.path.join(folder, "assets.extra")
    for name, path in sorted((assets or {}).items()):
      tf.io.gfile.makedirs(extra)
      tf.io.gfile.copy(path, os.path.join(extra, name), overwrite=True)

  def _restore_or_initialize(self, sess, scaffold, checkpoint_path, what):
    """Restores the checkpoint, or else keeps the initialized variables.

    As TF1's Estimator did, evaluation and prediction without a checkpoint
    in model_dir run on the initial values, which include a pretrained
    --init_checkpoint when the model_fn applies one.

    Returns:
      The restored checkpoint's path, or a description of the initial values.
    """
    _run_initializers(sess)
    checkpoint = checkpoint_path or self.latest_checkpoint()
    if checkpoint:
      _restore(_saver(), sess, checkpoint)
    else:
      if self._config.init_checkpoint is None:
        logging.warning("%s: no checkpoint in %s and no init_checkpoint; "
                        "using the variables' initial values.", what,
                        self.model_dir)
      if scaffold is not None and scaffold.init_fn is not None:
        scaffold.init_fn(sess)
    _fill_weight_copies(sess)
    return checkpoint or self._weights_name(None)


def _predict_signature(inputs, outputs):
  """The "predict" SignatureDef from dicts name -> Tensor.

  What tf.compat.v1.saved_model.predict_signature_def makes, built without
  its deprecated helper, which logs a migration notice meant for
  TensorFlow 1 code.
  """
  def tensor_infos(tensors):
    return {name: tf.compat.v1.TensorInfo(
        name=tensor.name, dtype=tensor.dtype.as_datatype_enum,
        tensor_shape=tensor.shape.as_proto())
            for name, tensor in tensors.items()}

  return tf.compat.v1.saved_model.build_signature_def(
      inputs=tensor_infos(inputs), outputs=tensor_infos(outputs),
      method_name=tf.compat.v1.saved_model.PREDICT_METHOD_NAME)


def _served_predictions(predictions, receiver):
  """`predictions` less those that only pass on a feature no request feeds.

  A model_fn may return a feature among its predictions (run_squad's
  "unique_ids"); served, it would be the receiver's stand-in, not an answer.
  """
  stand_ins = [tensor for name, tensor in receiver.features.items()
               if name not in receiver.receiver_tensors]
  return {name: tensor for name, tensor in predictions.items()
          if not any(tensor is stand_in for stand_in in stand_ins)}


def _new_export_dir(export_dir_base):
  """export_dir_base/<unix time>, one second later if that exists."""
  seconds = int(time.time())
  while tf.io.gfile.exists(os.path.join(export_dir_base, str(seconds))):
    seconds += 1
  return os.path.join(export_dir_base, str(seconds))


def _split_batch(batch):
  """Splits a batch (array or dict of arrays) into per-example values."""
  if not isinstance(batch, dict):
    return list(batch)
  sizes = {key: np.shape(value)[0] if np.ndim(value) else None
           for key, value in batch.items()}
  if None in sizes.values() or len(set(sizes.values())) != 1:
    raise ValueError("Every prediction must have the same batch dimension "
                     "to yield single examples; got sizes %r. Pass "
                     "yield_single_examples=False." % (sizes,))
  size = next(iter(sizes.values()))
  return [{key: value[i] for key, value in batch.items()}
          for i in range(size)]
