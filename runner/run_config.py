# coding=utf-8
"""Where and how often a run checkpoints, logs and writes summaries.

`RunConfig` holds the settings every part of the runner reads (the model
folder, the checkpoint and log intervals, the session config, the
accumulation steps, the distribution strategy, XLA); `is_chief` says
whether this process is the one that writes a run's files. Nothing here
imports TensorFlow.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function


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
