# coding=utf-8
"""The training step around an optimizer: from the loss to applied updates.

`build` makes the train op: the gradients of the loss (scaled dynamically
for float16), their accumulation over micro-batches, their mean over the
replicas of a tf.distribute strategy, the global-norm clip and the
optimizer's update.

In graph mode TensorFlow runs ops in any order their data dependencies
allow. Every read that must see a variable's old value is therefore ordered
before the write with explicit control dependencies (Google's original read
and incremented `global_step` with no ordering, which races on TensorFlow
2): the gradients wait for the whole backward pass (gradients.of_loss),
micro_step advances after every read of it (accumulation), the optimizer
increments global_step after its updates.
"""

import tensorflow as tf

from engine import accumulation
from engine import gradients
from engine import host_memory
from engine import loss_scaling
from engine import replicas


def build(loss, opt, tvars, global_step, *, num_accumulation_steps=1,
          loss_scale=None, loss_scale_growth_interval=2000, clip_norm=1.0,
          release_host_memory=True):
  """The train op applying `opt`'s updates to `tvars`; one run, one batch.

  Args:
    loss: float scalar, the mean loss of the (micro-)batch.
    opt: an optimizer with `create_slots(var_list)` and
      `apply_gradients(grads_and_vars, global_step, grad_scale=None)`.
    tvars: the variables to train (those the loss does not depend on are
      left alone).
    global_step: the int64 variable the optimizer increments.
    (the rest as optimization.create_optimizer's arguments of these names)

  Returns:
    The train op, named "train_op".
  """
  scaler = None
  if loss_scale is not None:
    scaler = loss_scaling.DynamicLossScale(loss_scale_growth_interval)
  grads, tvars = gradients.of_loss(loss, tvars, scaler)
  # Variables cannot be created inside a tf.cond branch: make the slots now.
  opt.create_slots(tvars)

  def apply_update(grads_to_apply, half_squared_norms=None):
    return update(opt, grads_to_apply, tvars, global_step, clip_norm, scaler,
                  half_squared_norms)

  if num_accumulation_steps == 1:
    done = [apply_update(replicas.all_reduce_mean(grads, tvars)),
            accumulation.advance_micro_step(grads)]
  else:
    done = [accumulation.accumulate(grads, tvars, num_accumulation_steps,
                                    apply_update)]
  if (release_host_memory and not replicas.in_other_processes() and
      replicas.is_first_local()):
    done.append(_first_runs_release(done))
  return tf.group(done, name="train_op")


def update(opt, grads, tvars, global_step, clip_norm, scaler,
           half_squared_norms=None):
  """One optimizer update with `grads` (skipped if the scaler finds inf/nan).

  Args:
    opt, global_step: as in `build`.
    grads, tvars: equal-length lists; grads[i] is float32, of tvars[i].
    clip_norm: float global-norm clip, or None for no clip.
    scaler: a loss_scaling.DynamicLossScale, or None.
    half_squared_norms: the clip's ||g||^2 / 2 per gradient, if not those of
      `grads` themselves (accumulated sparse gradients).

  Returns:
    An op or tensor that has run once the update (or the skip) is complete.
  """
  def apply():
    scale = None
    if clip_norm is not None:
      scale = gradients.clip_scale(
          half_squared_norms or
          [gradients.half_squared_norm(g) for g in grads], clip_norm)
    return opt.apply_gradients(zip(grads, tvars), global_step=global_step,
                               grad_scale=scale)

  if scaler is None:
    return apply()
  return scaler.apply_if_finite(grads, apply)


def _first_runs_release(after):
  """An op telling a new host_memory.FirstRunsReleaser, once `after` ran,
  that a run ended. It runs in Python on the host, never in XLA.

  The heap memory freed by a graph's first runs (executors, XLA
  compilation) is then handed back to the system while they run, so that
  it does not add to the training steps' peak.
  """
  releaser = host_memory.FirstRunsReleaser()
  with tf.device("/device:CPU:0"), \
      tf.xla.experimental.jit_scope(compile_ops=False), \
      tf.control_dependencies(after):
    return tf.numpy_function(releaser.run_ended, [], tf.int64,
                             name="first_runs_release")
