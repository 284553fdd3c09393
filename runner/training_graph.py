# coding=utf-8
"""The `model_fn` of every training task, written once.

Google's scripts each write a `model_fn` that builds BertModel and a head,
loads the pre-trained weights, and returns the train op, the evaluation
metrics or the predictions. Here `model_fn_builder` does all of that around
a task's `head`, which alone differs: it builds the encoder and its layers
from the features and says what the mode needs (`ModelOutputs`).
`ModelSettings` carries what every head and train op is built with.
"""

import collections

from absl import logging
import tensorflow as tf

from engine import weight_casts
import modeling
import optimization
from runner import model_spec
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
      (model_spec.ACCUMULATION_STEPS_KEY), so the op applies an update
      after exactly as many micro-batches as the runner feeds per update.
      A caller of the model_fn that leaves them out gets an update per run.
    tvars: the variables to train (None: every trainable variable); the
      others get no gradient and no optimizer slots.
  """
  return optimization.create_optimizer(
      total_loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
      num_accumulation_steps=params.get(model_spec.ACCUMULATION_STEPS_KEY, 1),
      optimizer=optimizer,
      loss_scale="dynamic" if compute_dtype == tf.float16 else None,
      tvars=tvars)


class ModelSettings(collections.namedtuple("ModelSettings", [
    "bert_config", "init_checkpoint", "learning_rate", "num_train_steps",
    "num_warmup_steps", "use_tpu", "use_one_hot_embeddings", "optimizer",
    "gradient_checkpointing", "compute_dtype", "skip_padding"],
    defaults=("adamw", False, tf.float32, False))):
  """What a task's model is built and trained with: Google's arguments of
  `model_fn_builder` (the config, --init_checkpoint, the learning rate and
  its schedule's steps, the TPU switches), then --optimizer and the memory
  settings (gradient checkpointing, the compute dtype, skipping padding
  tokens; see modeling.BertModel). num_train_steps and num_warmup_steps
  are None for a run that does not train."""

  def encoder_options(self):
    """The keyword arguments of modeling.BertModel these settings give."""
    return dict(use_one_hot_embeddings=self.use_one_hot_embeddings,
                gradient_checkpointing=self.gradient_checkpointing,
                compute_dtype=self.compute_dtype,
                skip_padding=self.skip_padding)


ModelOutputs = collections.namedtuple(
    "ModelOutputs",
    ["loss", "predictions", "eval_metric_ops", "train_variables"],
    defaults=(None, None, None))
ModelOutputs.__doc__ = """What a head builds for one mode.

  loss: the scalar training loss (TRAIN and EVAL).
  predictions: dict of name -> [batch, ...] Tensor (PREDICT).
  eval_metric_ops: dict of name -> (value, update op) (EVAL).
  train_variables: the variables to train, or None for every trainable
    one (a frozen encoder trains its head only).
"""


def log_features(features):
  """With -v 1, the features' names and shapes, as Google's scripts log
  them."""
  if verbosity.details():
    logging.info("*** Features ***")
    for name in sorted(features.keys()):
      logging.info("  name = %s, shape = %s", name, features[name].shape)


def model_fn_builder(head, settings):
  """The model_fn(features, labels, mode, params) the runner calls.

  Args:
    head: callable(features, mode, settings) -> ModelOutputs: the task's
      encoder and head on a batch of features (labels travel inside
      `features`, as in Google's scripts).
    settings: ModelSettings.

  Returns:
    The model_fn: the pre-trained weights of --init_checkpoint are loaded
    onto the variables it holds; TRAIN returns the loss and
    `train_op` (the accumulation steps come in `params`), EVAL the loss and
    the head's metrics, PREDICT the head's predictions.
  """

  def model_fn(features, labels, mode, params):
    del labels  # The runner's signature; labels travel in `features`.
    log_features(features)
    if mode == model_spec.ModeKeys.PREDICT:
      # Predicting never changes the weights: cast them once.
      with weight_casts.cast_once():
        outputs = head(features, mode, settings)
    else:
      outputs = head(features, mode, settings)
    init_from_checkpoint(settings.init_checkpoint)
    if mode == model_spec.ModeKeys.TRAIN:
      return model_spec.EstimatorSpec(mode=mode, loss=outputs.loss,
                                      train_op=train_op(
          outputs.loss, settings.learning_rate, settings.num_train_steps,
          settings.num_warmup_steps, settings.use_tpu, params=params,
          optimizer=settings.optimizer, compute_dtype=settings.compute_dtype,
          tvars=outputs.train_variables))
    if mode == model_spec.ModeKeys.EVAL:
      return model_spec.EstimatorSpec(
          mode=mode, loss=outputs.loss,
          eval_metric_ops=outputs.eval_metric_ops)
    return model_spec.EstimatorSpec(mode=mode,
                                    predictions=outputs.predictions)

  return model_fn
