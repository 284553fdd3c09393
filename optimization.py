# coding=utf-8
"""Optimizers and the training op used to fine-tune BERT.

`create_optimizer` builds Google's training op: AdamWeightDecay (or LAMB)
with a linear warmup and a linear decay of the learning rate, and gradients
clipped to a global norm of 1.0. Beyond the original it can accumulate the
gradients of several micro-batches into one update, scale the loss
dynamically for float16, and average the gradients over the replicas of a
tf.distribute strategy; engine/training_step.py builds that step around the
optimizer. Each optimizer applies its formulas to the variables of an
encoder layer in one XLA-compiled kernel.
"""

import math
import re

import tensorflow as tf

from engine import gradients
from engine import graph_keys
from engine import optimizer_names
from engine import replicas
from engine import slot_variables
from engine import training_step

# Reads and writes of resource variables follow control dependencies; the
# training step's ordering relies on that.
tf.compat.v1.enable_resource_variables()

OPTIMIZERS = optimizer_names.OPTIMIZERS
EXCLUDE_FROM_WEIGHT_DECAY = ["LayerNorm", "layer_norm", "bias"]


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
  return training_step.build(
      loss, opt, tvars, global_step,
      num_accumulation_steps=num_accumulation_steps, loss_scale=loss_scale,
      loss_scale_growth_interval=loss_scale_growth_interval,
      clip_norm=clip_norm, release_host_memory=release_host_memory)


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
        updated.append(replicas.local(global_step).assign_add(
            1, read_value=False))
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
    params = [replicas.local(param) for _, param in pairs]
    slots = [[replicas.local(slot) for slot in self._slot_pair(param)]
             for _, param in pairs]
    decays = tuple(
        self._do_use_weight_decay(slot_variables.variable_name(param))
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
        grad = gradients.map_values(lambda values: values * grad_scale, grad)
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
    param_name = slot_variables.variable_name(param)
    if param_name not in self._moments:
      self._moments[param_name] = tuple(
          slot_variables.zeros(param_name + "/" + slot,
                               param.shape.as_list())
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
    match = re.search(r"(^|/)layer_\d+/", slot_variables.variable_name(param))
    groups.setdefault(match.group(0) if match else None, []).append(
        (grad, param))
  return list(groups.values())


def _has_sparse_gradient(pairs):
  """Whether a gradient of the (gradient, variable) `pairs` is IndexedSlices."""
  return any(isinstance(grad, tf.IndexedSlices) for grad, _ in pairs)
