# coding=utf-8
"""What every training script's `model_fn` does the same way.

Google's scripts repeat these steps in each `model_fn`; here they are written
once: loading the pre-trained weights onto the graph's variables, and the
train op with the precision's loss scaling.
"""

from absl import logging
import tensorflow as tf

import modeling
import optimization
from runner import estimator
from userio import verbosity


def init_from_checkpoint(init_checkpoint):
  """Initializes the trainable variables `init_checkpoint` holds from it.

  Variables the checkpoint lacks (a fine-tuning head, say) keep their
  initializers. With -v 1 (userio/verbosity.py) every trainable variable
  is logged, the loaded ones marked *INIT_FROM_CKPT*, as Google's scripts
  log them.

  Args:
    init_checkpoint: a checkpoint prefix, or None/"" to load nothing.

  Returns:
    The set of variable names (with ":0") that came from the checkpoint.
  """
  tvars = tf.compat.v1.trainable_variables()
  initialized = {}
  if init_checkpoint:
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        tvars, init_checkpoint)
    tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
  if not verbosity.details():
    return set(initialized)
  logging.info("**** Trainable Variables ****")
  for var in tvars:
    logging.info("  name = %s, shape = %s%s", var.name, var.shape,
                 ", *INIT_FROM_CKPT*" if var.name in initialized else "")
  return set(initialized)


def train_op(total_loss, learning_rate, num_train_steps, num_warmup_steps,
             use_tpu, *, params, optimizer, compute_dtype, tvars=None):
  """optimization.create_optimizer's train op; float16 activations get
  dynamic loss scaling (their gradients would underflow without it).

  Args:
    params: the model_fn's params in TRAIN mode; the runner puts the
      accumulation steps of its RunConfig there
      (estimator.ACCUMULATION_STEPS_KEY), so the op applies an update
      after exactly as many micro-batches as the runner feeds per update.
      A caller of the model_fn that leaves them out gets an update per run.
    tvars: the variables to train (None: every trainable variable); the
      others get no gradient and no optimizer slots.
  """
  return optimization.create_optimizer(
      total_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
      num_accumulation_steps=params.get(estimator.ACCUMULATION_STEPS_KEY, 1),
      optimizer=optimizer,
      loss_scale="dynamic" if compute_dtype == tf.float16 else None,
      tvars=tvars)
