# coding=utf-8
"""Optimizers and the training op used to fine-tune BERT.

`create_optimizer` builds Google's training op: AdamWeightDecay (or LAMB) with
a linear warmup and a linear decay of the learning rate, and gradients clipped
to a global norm of 1.0. Beyond the original it can accumulate the gradients of
several micro-batches into one update and scale the loss dynamically for fp16.

Under a `tf.distribute` strategy with several replicas (the runner calls the
model_fn once per replica), each replica computes the gradients of its shard,
the gradients are averaged over the replicas once per update, and every
replica applies that same update to its own copy of the variables.

In graph mode TensorFlow runs ops in any order their data dependencies allow.
Every read that must see a variable's old value is therefore ordered before
the write with explicit control dependencies. The original read and
incremented `global_step` with no ordering, which races on TensorFlow 2.
"""

import math
import re

import tensorflow as tf

from engine import graph_keys
from engine import graph_order
from engine import host_memory

# Reads and writes of resource variables follow control dependencies; the
# ordering guarantees below rely on that.
tf.compat.v1.enable_resource_variables()

OPTIMIZERS = ("adamw", "lamb")
EXCLUDE_FROM_WEIGHT_DECAY = ["LayerNorm", "layer_norm", "bias"]
INITIAL_LOSS_SCALE = 2.0**15


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps,
                     use_tpu=False, *, num_accumulation_steps=1,
                     optimizer="adamw", loss_scale=None, weight_decay_rate=0.01,
                     clip_norm=1.0, tvars=None,
                     loss_scale_growth_interval=2000,
                     release_host_memory=True):
  """Creates the training op; each session.run of it consumes one batch.

  The update that takes `global_step` from i to i+1 uses the learning rate of
  step i: `init_lr * i / num_warmup_steps` while i < num_warmup_steps, else
  `init_lr * (1 - min(i, num_train_steps) / num_train_steps)`.

  Args:
    loss: float scalar, the mean loss of the (micro-)batch.
    init_lr: float, the peak learning rate.
    num_train_steps: int, number of updates after which the rate reaches 0.
    num_warmup_steps: int, number of updates of the linear warmup (0: none).
    use_tpu: accepted for the original's call sites and ignored (no TPU path).
    num_accumulation_steps: int k; every run adds the gradients of its
      micro-batch to accumulators and every k-th run applies their mean as one
      update. 1 applies every run (no accumulators are created). Across
      processes (multi_worker) the returned op always applies, and the op to
      run on the other k - 1 runs is in the graph collection
      "accumulate_only_train_op" (the runner does this).
    optimizer: "adamw" (Google's AdamWeightDecayOptimizer) or "lamb".
    loss_scale: None, or "dynamic" for fp16 training: the loss is multiplied
      by a scale before differentiation; an update whose gradients are not
      finite is skipped and halves the scale; `loss_scale_growth_interval`
      consecutive good updates double it.
    weight_decay_rate: float, decoupled weight decay (not applied to variables
      whose name contains LayerNorm, layer_norm or bias).
    clip_norm: float global-norm clip of the gradients, or None for no clip.
    tvars: variables to train; default all trainable variables.
    loss_scale_growth_interval: int, good updates before the scale doubles.
    release_host_memory: hand the heap memory freed by the graph's first
      runs (executors, XLA compilation) back to the system while they run
      (host_memory.FirstRunsReleaser), so that it does not add to the
      training steps' peak. The train op then calls into Python once per
      run; it is off under a strategy whose replicas span processes.

  Returns:
    The train op. Its learning-rate tensor is in the graph collection
    "learning_rate", the loss-scale variable in the collection "loss_scale".
  """
  del use_tpu  # There is no TPU path; CPU and GPU share the code below.
  _check_arguments(num_train_steps, num_warmup_steps, num_accumulation_steps,
                   optimizer, loss_scale, loss_scale_growth_interval)
  global_step = graph_keys.get_or_create_global_step()
  learning_rate = _learning_rate(global_step, init_lr, num_train_steps,
                                 num_warmup_steps)
  tf.compat.v1.add_to_collection(graph_keys.LEARNING_RATE, learning_rate)
  opt = _make_optimizer(optimizer, learning_rate, weight_decay_rate)
  if tvars is None:
    tvars = tf.compat.v1.trainable_variables()
  scaler = None
  if loss_scale is not None:
    scaler = _DynamicLossScale(loss_scale_growth_interval)
  grads, tvars = _gradients(loss, tvars, scaler)
  # Variables cannot be created inside a tf.cond branch: make the slots now.
  opt.create_slots(tvars)

  def update(grads_to_apply, half_squared_norms=None):
    return _update(opt, grads_to_apply, tvars, global_step, clip_norm, scaler,
                   half_squared_norms)

  if num_accumulation_steps == 1:
    done = [update(_all_reduce_mean(grads, tvars)), _advance_micro_step(grads)]
  else:
    done = [_accumulate(grads, tvars, num_accumulation_steps, update)]
  if release_host_memory and not _replicas_in_other_processes() and (
      _num_replicas() == 1 or _local_replica_index() == 0):
    done.append(_first_runs_release(done))
  return tf.group(done, name="train_op")


def _first_runs_release(after):
  """An op telling a new host_memory.FirstRunsReleaser, once `after` ran,
  that a run ended. It runs in Python on the host, never in XLA."""
  releaser = host_memory.FirstRunsReleaser()
  with tf.device("/device:CPU:0"), \
      tf.xla.experimental.jit_scope(compile_ops=False), \
      tf.control_dependencies(after):
    return tf.numpy_function(releaser.run_ended, [], tf.int64,
                             name="first_runs_release")


def _advance_micro_step(after):
  """Op adding 1 to this replica's micro_step once `after` (tensors or
  ops) exist, i.e. after every read of it in the forward and backward
  passes (dropout masks). Recorded in graph_keys.MICRO_STEP_ADVANCES, so the
  runner does not count the run a second time."""
  micro_step = graph_keys.get_or_create_micro_step()
  with tf.control_dependencies([_values(dep) for dep in after]):
    advanced = _local(micro_step).assign_add(1, read_value=False)
  tf.compat.v1.add_to_collection(graph_keys.MICRO_STEP_ADVANCES, advanced)
  return advanced


def _check_arguments(num_train_steps, num_warmup_steps, num_accumulation_steps,
                     optimizer, loss_scale, loss_scale_growth_interval):
  """Raises ValueError naming the flag to fix for impossible settings."""
  if num_train_steps < 1:
    raise ValueError(
        "num_train_steps must be at least 1, got %r: the training examples "
        "times --num_train_epochs / --train_batch_size round to zero updates; "
        "raise --num_train_epochs or lower --train_batch_size." %
        (num_train_steps,))
  if num_warmup_steps < 0:
    raise ValueError("num_warmup_steps must be >= 0, got %r; check "
                     "--warmup_proportion." % (num_warmup_steps,))
  if int(num_accumulation_steps) != num_accumulation_steps or (
      num_accumulation_steps < 1):
    raise ValueError("--num_accumulation_steps must be an integer >= 1, got "
                     "%r." % (num_accumulation_steps,))
  if optimizer not in OPTIMIZERS:
    raise ValueError("--optimizer=%r is not supported; choose one of: %s." %
                     (optimizer, ", ".join(OPTIMIZERS)))
  if loss_scale not in (None, "dynamic"):
    raise ValueError("loss_scale must be None or \"dynamic\", got %r." %
                     (loss_scale,))
  if loss_scale_growth_interval < 1:
    raise ValueError("loss_scale_growth_interval must be >= 1, got %r." %
                     (loss_scale_growth_interval,))


def _learning_rate(global_step, init_lr, num_train_steps, num_warmup_steps):
  """Google's schedule at the current value of `global_step`.

  Returns:
    float32 scalar. Every update of this run consumes it, so the read of
    global_step happens before the increment.
  """
  step = global_step.read_value()
  step_float = tf.cast(step, tf.float32)
  decay_done = tf.minimum(step_float, float(num_train_steps)) / float(
      num_train_steps)
  learning_rate = init_lr * (1.0 - decay_done)
  if num_warmup_steps:
    warmup_rate = init_lr * step_float / float(num_warmup_steps)
    learning_rate = tf.where(step < num_warmup_steps, warmup_rate,
                             learning_rate)
  return tf.identity(learning_rate, name="learning_rate")


def _make_optimizer(name, learning_rate, weight_decay_rate):
  """The optimizer called `name` with Google's hyperparameters."""
  if name == "lamb":
    return LAMBOptimizer(learning_rate, weight_decay_rate=weight_decay_rate,
                         exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY)
  return AdamWeightDecayOptimizer(
      learning_rate, weight_decay_rate=weight_decay_rate,
      exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY)


def _gradients(loss, tvars, scaler):
  """float32 gradients of `loss` for the variables it depends on.

  A table looked up with tf.gather (the word embeddings) keeps its gradient
  as tf.IndexedSlices, one row per looked-up id, as in Google's code: the
  global-norm clip then counts each row once, duplicate ids unsummed
  (tf.clip_by_global_norm reads an IndexedSlices' values), and the dense
  [vocab, width] gradient never exists during the backward pass.

  Returns:
    (grads, vars): equal-length lists; variables without a gradient dropped.
  """
  target = loss if scaler is None else scaler.scale_loss(loss)
  pairs = [(g, v) for g, v in zip(tf.gradients(target, tvars), tvars)
           if g is not None]
  if not pairs:
    raise ValueError("The loss depends on none of the %d variables to train; "
                     "check the model_fn's loss." % len(tvars))
  grads = [_map_values(lambda values: tf.cast(values, tf.float32), g)
           for g, _ in pairs]
  if scaler is not None:
    grads = scaler.unscale(grads)
  # No variable may change before the whole backward pass and the fetched
  # loss have read it (a recomputed layer reads its weights again).
  grads = graph_order.after(grads + [loss], grads)
  return grads, [v for _, v in pairs]


def _values(grad):
  """The tensor holding `grad`'s numbers: an IndexedSlices' rows, else grad."""
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _map_values(fn, grad):
  """`fn` applied to `grad`'s numbers, keeping an IndexedSlices' indices."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
  return fn(grad)


def _half_squared_norm(grad):
  """float32 scalar ||grad||^2 / 2 as tf.clip_by_global_norm counts it.

  An IndexedSlices counts each of its rows, not the sum of duplicate rows.
  """
  return tf.nn.l2_loss(_values(grad))


def _update(opt, grads, tvars, global_step, clip_norm, scaler,
            half_squared_norms=None):
  """One optimizer update with `grads` (skipped if the scaler finds inf/nan).

  Args:
    half_squared_norms: the clip's ||g||^2 / 2 per gradient, if not those of
      `grads` themselves (accumulated sparse gradients, see _accumulate).

  Returns:
    An op or tensor that has run once the update (or the skip) is complete.
  """
  def apply():
    scale = None
    if clip_norm is not None:
      scale = _clip_scale(half_squared_norms or
                          [_half_squared_norm(g) for g in grads], clip_norm)
    return opt.apply_gradients(zip(grads, tvars), global_step=global_step,
                               grad_scale=scale)

  if scaler is None:
    return apply()
  return scaler.apply_if_finite(grads, apply)


def _clip_scale(half_squared_norms, clip_norm):
  """float32 scalar: tf.clip_by_global_norm's factor for the gradients.

  clip_norm / max(global_norm, clip_norm) with global_norm =
  sqrt(2 * sum(half_squared_norms)), computed as that function does (NaN if
  the norm is not finite), so that `g * scale` is its clipped g; the
  optimizer applies it within its update instead of in a pass of its own.
  """
  norm = tf.sqrt(2.0 * tf.reduce_sum(tf.stack(half_squared_norms)))
  scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0) / clip_norm)
  return scale + (norm - norm)


def _accumulate(grads, tvars, num_accumulation_steps, update):
  """Adds `grads` to accumulators; every k-th run applies their mean.

  Under a strategy the accumulators are per replica (ON_READ) and are
  averaged over the replicas only on the runs that apply. Across processes
  (MultiWorkerMirroredStrategy), TF 2.21 graph-mode sessions abort a
  collective inside a tf.cond ("Delete called on non-empty BufRendezvous"):
  there the returned op always all-reduces and applies, and the op that only
  accumulates goes to the graph collection graph_keys.ACCUMULATE_ONLY, which
  the runner (runner/estimator.py) runs on the k - 1 runs of an update that do not
  apply.

  Returns:
    bool scalar tensor, True on the runs that applied (or skipped) an update.
  """
  across_processes = _replicas_in_other_processes()
  # A checkpoint reads the accumulators outside the replicas. Reading a SUM
  # variable there all-reduces it, which across processes would wait forever
  # for the workers that do not save; so there checkpoints hold the first
  # replica's sums (the runner saves after whole updates, when all are 0).
  aggregation = (tf.VariableAggregation.ONLY_FIRST_REPLICA
                 if across_processes else tf.VariableAggregation.SUM)
  def accumulator(name, shape):
    return tf.compat.v1.get_variable(
        name, shape=shape, dtype=tf.float32, trainable=False,
        initializer=_zeros_initializer,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=aggregation)

  accumulators = [accumulator(_variable_name(v) + "/accum_grad",
                              v.shape.as_list()) for v in tvars]
  # One big batch's clip counts every row of a sparse gradient (see
  # _gradients), which a dense sum no longer shows: such variables also
  # accumulate their rows' ||g||^2 / 2.
  sparse = [i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
  row_norms = [accumulator(_variable_name(tvars[i]) +
                           "/accum_half_squared_norm", []) for i in sparse]
  adds = [_add_to(_local(a), g) for a, g in zip(accumulators, grads)]
  adds += [_local(a).assign_add(_half_squared_norm(grads[i]), read_value=False)
           for a, i in zip(row_norms, sparse)]
  # micro_step is checkpointed: a run that stops between updates saves the
  # partial sums together with the count they belong to.
  counted = _advance_micro_step(adds)
  with tf.control_dependencies([counted]):
    count = graph_keys.get_micro_step().read_value()
    sums = [a.read_value() for a in accumulators + row_norms]

  def apply_mean(totals):
    means = [total / float(num_accumulation_steps)
             for total in totals[:len(tvars)]]
    half_squared_norms = [_half_squared_norm(mean) for mean in means]
    # Each row of the big batch is a micro-batch's row / (k * replicas);
    # the all-reduce averaged the replicas' sums of squares once.
    rows_per_update = float(num_accumulation_steps**2 * _num_replicas())
    for i, total in zip(sparse, totals[len(tvars):]):
      half_squared_norms[i] = total / rows_per_update
    done = update(means, half_squared_norms)
    with tf.control_dependencies([done]):
      zeroed = [_local(a).assign(tf.zeros_like(a), read_value=False)
                for a in accumulators + row_norms]
    return graph_order.after(zeroed, True)

  destinations = tvars + row_norms
  if across_processes:
    tf.compat.v1.add_to_collection(graph_keys.ACCUMULATE_ONLY, counted)
    return apply_mean(_all_reduce_mean(sums, destinations))
  applies = tf.equal(count % num_accumulation_steps, 0)
  # The all-reduce (a no-op with one replica) runs only on applying runs.
  totals = _all_reduce_mean(sums, destinations, applies)
  return tf.cond(applies, lambda: apply_mean(totals),
                 lambda: tf.constant(False))


def _add_to(accumulator, grad):
  """Op adding `grad` (a tensor or IndexedSlices) to the float32 variable."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.raw_ops.ResourceScatterAdd(
        resource=accumulator.handle, indices=grad.indices,
        updates=grad.values)
  return accumulator.assign_add(grad, read_value=False)


def _replicas_in_other_processes():
  """Whether some replicas in sync run in other processes (multi-worker)."""
  if _num_replicas() == 1:
    return False
  context = tf.distribute.get_replica_context()
  local = len(context.strategy.extended.worker_devices)
  return context.num_replicas_in_sync > local


def _num_replicas():
  """Replicas in sync: 1 outside a tf.distribute strategy's replica context."""
  context = tf.distribute.get_replica_context()
  return 1 if context is None else context.num_replicas_in_sync


def _local_replica_index():
  """This replica's index among the replicas of this process (0, 1, ...).

  `replica_id_in_sync_group` counts over all workers; each worker holds
  `len(worker_devices)` of them, in order.
  """
  context = tf.distribute.get_replica_context()
  replica_id = tf.get_static_value(context.replica_id_in_sync_group)
  return replica_id % len(context.strategy.extended.worker_devices)


def _local(variable):
  """The copy of `variable` that this replica writes.

  Every replica applies the same all-reduced update to its own copy, so the
  copies stay equal without a cross-replica assignment (which a tf.cond
  branch could not contain). Without a strategy: `variable` itself.
  """
  if _num_replicas() == 1:
    return variable
  strategy = tf.distribute.get_replica_context().strategy
  return strategy.experimental_local_results(variable)[_local_replica_index()]


def _all_reduce_mean(values, tvars, when=None):
  """Means over the replicas of per-replica tensors (one per variable).

  Args:
    values: float32 tensors, values[i] shaped like tvars[i].
    tvars: the variables the values belong to (where the means are needed).
    when: None (reduce on every run) or a bool scalar tensor, equal on all
      replicas; when False, nothing is communicated and `values` come back.

  Returns:
    This replica's list of means (`values` itself with one replica).

  The reduction is built in cross-replica context (merge_call), and so is
  the tf.cond on `when` around it: a merge_call cannot sit inside a
  replica's own tf.cond branch.
  """
  if _num_replicas() == 1:
    return values

  def reduce_in_cross_replica_context(strategy, per_replica, condition):
    def reduce():
      means = strategy.extended.batch_reduce_to(
          tf.distribute.ReduceOp.MEAN, list(zip(per_replica, tvars)))
      return _flatten_local(strategy, means)

    if condition is None:
      return reduce()
    condition = strategy.experimental_local_results(condition)[0]
    return tf.cond(condition, reduce,
                   lambda: _flatten_local(strategy, per_replica))

  flat = tf.distribute.get_replica_context().merge_call(
      reduce_in_cross_replica_context, args=(values, when))
  # `flat` holds the values of every local replica, replica-major.
  start = _local_replica_index() * len(values)
  return flat[start:start + len(values)]


def _flatten_local(strategy, distributed_values):
  """Tensors of each local replica in turn: [r0 v0, r0 v1, ..., r1 v0, ...]."""
  per_value = [strategy.experimental_local_results(v)
               for v in distributed_values]
  return [tf.identity(local[r]) for r in range(len(per_value[0]))
          for local in per_value]


def _zeros_initializer(shape, dtype=tf.float32, partition_info=None):
  """Zeros of `shape` that the session's constant folding leaves alone.

  The classic graph optimizer (OptimizerOptions L1, the session default)
  folds `tf.zeros(shape)` into a Const node that holds the whole tensor for
  the session's life, and the variable gets a copy of it: every
  zero-initialized slot and accumulator would be resident twice. `Empty` is
  stateful, so it is never folded; `init=True` fills it with zeros.
  """
  del partition_info  # Unused; part of the initializer signature.
  return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def _one_minus_power(beta, step):
  """1 - beta**step (float32 scalar) for a Python float beta.

  Computed as -expm1(step * log(beta)) with log(beta) in float64: in float32,
  1 - 0.999 alone is off by 1.3e-5 (relative), which LAMB's bias correction
  would carry into every update.
  """
  return -tf.math.expm1(step * math.log(beta))


def _layer_groups(pairs):
  """(gradient, variable) pairs grouped by encoder layer, in order.

  Variables under "layer_<i>/" form one group per i, the rest one group:
  a kernel per group amortizes its launch over a layer's 16 variables, and
  the layers' groups have the same shapes, so one compiled kernel serves all.
  """
  groups = {}
  for grad, param in pairs:
    match = re.search(r"(^|/)layer_\d+/", _variable_name(param))
    groups.setdefault(match.group(0) if match else None, []).append(
        (grad, param))
  return list(groups.values())


def _has_sparse_gradient(pairs):
  """Whether a gradient of the (gradient, variable) `pairs` is IndexedSlices."""
  return any(isinstance(grad, tf.IndexedSlices) for grad, _ in pairs)


def _variable_name(param):
  """The variable's name without the ":0" output suffix."""
  match = re.match("^(.*):\\d+$", param.name)
  return match.group(1) if match else param.name


class _DynamicLossScale(object):
  """Dynamic loss scaling for fp16 gradients.

  Variables (saved in checkpoints): float32 `loss_scale` (starts at 2**15,
  never below 1) and int64 `loss_scale_good_steps` (consecutive good updates).
  """

  def __init__(self, growth_interval):
    self._growth_interval = growth_interval
    self.scale = tf.compat.v1.get_variable(
        "loss_scale", shape=[], dtype=tf.float32, trainable=False,
        initializer=tf.compat.v1.constant_initializer(INITIAL_LOSS_SCALE))
    self.good_steps = tf.compat.v1.get_variable(
        "loss_scale_good_steps", shape=[], dtype=tf.int64, trainable=False,
        initializer=tf.compat.v1.zeros_initializer())
    tf.compat.v1.add_to_collection(graph_keys.LOSS_SCALE, self.scale)
    # One read per run, used to scale and unscale: both see the same value.
    self._value = self.scale.read_value()

  def scale_loss(self, loss):
    """float32 scalar: loss * scale."""
    return tf.cast(loss, tf.float32) * self._value

  def unscale(self, grads):
    """Gradients of the scaled loss divided by the scale (float32)."""
    return [_map_values(lambda values: values / self._value, g)
            for g in grads]

  def apply_if_finite(self, grads, apply_fn):
    """Runs `apply_fn` and maybe grows the scale if every gradient is finite,
    else changes nothing but halves the scale and resets the good steps.

    Returns:
      bool scalar tensor, True if the update was applied.
    """
    finite = tf.reduce_all(
        tf.stack([tf.reduce_all(tf.math.is_finite(_values(g)))
                  for g in grads]))
    return tf.cond(finite, lambda: self._applied(apply_fn), self._skipped)

  def _applied(self, apply_fn):
    done = apply_fn()
    with tf.control_dependencies([done]):
      good = self.good_steps.read_value() + 1
    grow = good >= self._growth_interval
    changes = [
        _local(self.scale).assign(
            tf.where(grow, 2.0 * self._value, self._value), read_value=False),
        _local(self.good_steps).assign(
            tf.where(grow, tf.zeros_like(good), good), read_value=False)]
    return graph_order.after(changes, True)

  def _skipped(self):
    changes = [
        _local(self.scale).assign(tf.maximum(self._value / 2.0, 1.0),
                                  read_value=False),
        _local(self.good_steps).assign(tf.constant(0, tf.int64),
                                       read_value=False)]
    return graph_order.after(changes, False)


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
  """Adam with decoupled weight decay and no bias correction (Google's BERT).

  Per variable p with gradient g, learning rate lr and weight decay wd:
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    update = m / (sqrt(v) + epsilon) [+ wd * p unless p's name matches an
             exclude_from_weight_decay pattern (re.search)]
    p = p - lr * update
  Slots are the variables `<variable name>/adam_m` and `<variable name>/adam_v`.
  """

  SLOT_NAMES = ("adam_m", "adam_v")

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               name="AdamWeightDecayOptimizer"):
    super().__init__(False, name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay
    self._moments = {}
    # One compiled kernel per group shape: layers share it.
    self._update_group = tf.function(self._update_variables, jit_compile=True,
                                     autograph=False)

  def create_slots(self, var_list):
    """Creates the two slot variables of each variable in `var_list` now.

    Call it before building `apply_gradients` inside a tf.cond branch, where
    variables cannot be created.
    """
    for param in var_list:
      self._slot_pair(param)

  def apply_gradients(self, grads_and_vars, global_step=None, name=None, *,
                      grad_scale=None):
    """Updates each variable that has a gradient.

    Args:
      grads_and_vars: (gradient, variable) pairs; None gradients are skipped.
      global_step: optional int64 variable, incremented after all updates.
      name: name of the returned op.
      grad_scale: optional float32 scalar every gradient is multiplied by
        first (the factor of a global-norm clip), in the same pass.

    Returns:
      The op that runs all updates.
    """
    step = self._bias_correction_step(global_step)
    pairs = [(grad if isinstance(grad, tf.IndexedSlices)
              else tf.convert_to_tensor(grad), param)
             for grad, param in grads_and_vars
             if grad is not None and param is not None]
    groups = _layer_groups(pairs)
    dense = [group for group in groups if not _has_sparse_gradient(group)]
    sparse = [group for group in groups if _has_sparse_gradient(group)]
    updated = [self._apply_group(group, grad_scale, step) for group in dense]
    # A sparse gradient becomes a dense [vocab, width] tensor in its update:
    # after the other updates, which free their gradients, the step's peak
    # memory does not hold both.
    with tf.control_dependencies(updated):
      updated += [self._apply_group(group, grad_scale, step)
                  for group in sparse]
    if global_step is not None:
      with tf.control_dependencies(updated):
        updated.append(_local(global_step).assign_add(1, read_value=False))
    return tf.group(*updated, name=name)

  def _apply_group(self, pairs, grad_scale, step):
    """Updates the variables of `pairs` and their slots in one XLA kernel.

    Unfused, each line of the class docstring is a TensorFlow op that reads
    and writes whole variable-sized tensors, a dozen passes over memory per
    variable and a new tensor for each. The compiled kernel reads g, m, v
    and p once and writes m, v and p in place, with no temporaries
    (bench/optimizer_update.py times both). The formulas are those of the
    class docstring, in float32; XLA may fuse a multiply and an add into one
    rounding, so a result can differ from the op-by-op value in its last
    bit.

    Returns:
      A scalar tensor that exists once the updates are done.
    """
    params = [_local(param) for _, param in pairs]
    slots = [[_local(slot) for slot in self._slot_pair(param)]
             for _, param in pairs]
    decays = tuple(self._do_use_weight_decay(_variable_name(param))
                   for _, param in pairs)
    return self._update_group([grad for grad, _ in pairs], params, slots,
                              self.learning_rate, grad_scale, step, decays)

  def _update_variables(self, grads, params, slots, learning_rate,
                        grad_scale, step, decays):
    """The body of `_update_group` (compiled); returns True when done.

    `grad_scale` and `step` may be None (no scaling; AdamW has no step).
    """
    for grad, param, (m, v), decay in zip(grads, params, slots, decays):
      if grad_scale is not None:
        grad = _map_values(lambda values: values * grad_scale, grad)
      if isinstance(grad, tf.IndexedSlices):
        # Duplicate ids' rows add up, as tf.convert_to_tensor does.
        grad = tf.math.unsorted_segment_sum(grad.values, grad.indices,
                                            param.shape[0])
      next_m = self.beta_1 * m.read_value() + (1.0 - self.beta_1) * grad
      next_v = (self.beta_2 * v.read_value() +
                (1.0 - self.beta_2) * tf.square(grad))
      update = self._update_direction(next_m, next_v, param.read_value(),
                                      decay, step)
      param.assign(param.read_value() - learning_rate * update,
                   read_value=False)
      m.assign(next_m, read_value=False)
      v.assign(next_v, read_value=False)
    return tf.constant(True)

  def _bias_correction_step(self, global_step):
    """Adam here has no bias correction, hence no step."""
    del global_step
    return None

  def _update_direction(self, next_m, next_v, value, decay, step):
    """m / (sqrt(v) + eps) plus the weight decay term if `decay`."""
    del step
    update = next_m / (tf.sqrt(next_v) + self.epsilon)
    if decay:
      update += self.weight_decay_rate * value
    return update

  def _do_use_weight_decay(self, param_name):
    """Whether to apply weight decay to the variable called `param_name`."""
    if not self.weight_decay_rate:
      return False
    return not any(re.search(pattern, param_name)
                   for pattern in self.exclude_from_weight_decay or [])

  def _slot_pair(self, param):
    """The (m, v) slot variables of `param`, created on first use."""
    param_name = _variable_name(param)
    if param_name not in self._moments:
      self._moments[param_name] = tuple(
          tf.compat.v1.get_variable(
              name=param_name + "/" + slot, shape=param.shape.as_list(),
              dtype=tf.float32, trainable=False,
              initializer=_zeros_initializer)
          for slot in self.SLOT_NAMES)
    return self._moments[param_name]


class LAMBOptimizer(AdamWeightDecayOptimizer):
  """LAMB (You et al., 2019): Adam moments with a layer-wise trust ratio.

  Per variable p with gradient g, t = global_step + 1 (the update number):
    m = beta_1 * m + (1 - beta_1) * g;  v = beta_2 * v + (1 - beta_2) * g^2
    m_hat = m / (1 - beta_1^t);  v_hat = v / (1 - beta_2^t)
    r = m_hat / (sqrt(v_hat) + epsilon) [+ wd * p unless p's name matches an
        exclude_from_weight_decay pattern]
    trust_ratio = ||p|| / ||r|| if both norms are > 0, else 1.0
    p = p - lr * trust_ratio * r
  Slots are `<variable name>/lamb_m` and `<variable name>/lamb_v`. The step t
  comes from the `global_step` given to apply_gradients, else from the
  graph's global step.
  """

  SLOT_NAMES = ("lamb_m", "lamb_v")

  def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, exclude_from_weight_decay=None,
               name="LAMBOptimizer"):
    super().__init__(learning_rate, weight_decay_rate=weight_decay_rate,
                     beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                     exclude_from_weight_decay=exclude_from_weight_decay,
                     name=name)

  def _bias_correction_step(self, global_step):
    """float32 t = global_step + 1, read before global_step is incremented."""
    if global_step is None:
      global_step = tf.compat.v1.train.get_global_step()
    if global_step is None:
      raise ValueError(
          "LAMBOptimizer needs a global step for its bias correction: pass "
          "global_step to apply_gradients or create one with "
          "tf.compat.v1.train.get_or_create_global_step().")
    return tf.cast(global_step, tf.float32) + 1.0

  def _update_direction(self, next_m, next_v, value, decay, step):
    """trust_ratio * r (r as in the class docstring), shape of value."""
    m_hat = next_m / _one_minus_power(self.beta_1, step)
    v_hat = next_v / _one_minus_power(self.beta_2, step)
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    if decay:
      update += self.weight_decay_rate * value
    param_norm = tf.norm(value)
    update_norm = tf.norm(update)
    trust_ratio = tf.where(
        tf.logical_and(param_norm > 0.0, update_norm > 0.0),
        tf.math.divide_no_nan(param_norm, update_norm), 1.0)
    return trust_ratio * update
