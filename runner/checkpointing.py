# coding=utf-8
"""Checkpoints: saving, restoring, and stopping training at one.

`save` writes `model.ckpt-<step>` into the model folder. A full disk (or a
folder that cannot be written) while it writes ends in
disk_space.WriteFailed: one line naming the folder, what was written and
about how much space it needs; what the save left is removed, and the last
complete checkpoint stays the one a rerun resumes from (`resume_point`
says which, for messages).

`restore` and `restore_or_initialize` load a checkpoint into a session,
explaining one of another model; `checkpoint_counters` reads where a
checkpoint left training. `StopRequests` turns the first SIGINT or SIGTERM
into a request that the training loop answers with a checkpoint.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import contextlib
import os
import signal
import threading

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from engine import weight_casts
from userio import disk_space


def new_saver(**kwargs):
  """A Saver whose `checkpoint` file names checkpoints relative to their
  folder, so the folder can be moved or copied and still resume."""
  return tf.compat.v1.train.Saver(save_relative_paths=True, **kwargs)


def restore(saver, sess, checkpoint):
  """Restores `checkpoint`, explaining a checkpoint of a different model."""
  try:
    saver.restore(sess, checkpoint)
  except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
    raise ValueError(
        "Checkpoint %s does not match this model (another task, "
        "--bert_config_file or --max_seq_length?). Use a new --output_dir or "
        "the matching flags.\nTensorFlow said: %s" %
        (checkpoint, e.message.splitlines()[0])) from e


def recover_last_checkpoints(saver, checkpoints):
  """What Saver.recover_last_checkpoints does, without its deprecated
  helper (which logs a migration notice on every resume): the saver
  counts `checkpoints` (prefixes, oldest first) as its own, with the time
  each was written."""
  saver.set_last_checkpoints_with_time([
      (path, tf.io.gfile.stat(path + ".index").mtime_nsec / 1e9)
      for path in checkpoints if tf.io.gfile.exists(path + ".index")])


def run_initializers(sess):
  """Runs the global and local variables' and the tables' initializers."""
  sess.run([tf.compat.v1.global_variables_initializer(),
            tf.compat.v1.local_variables_initializer(),
            tf.compat.v1.tables_initializer()])


def _fill_weight_copies(sess):
  """Casts the final weights into their compute-dtype copies, if the graph
  keeps any (engine/weight_casts.py)."""
  initializer = weight_casts.initializer(sess.graph)
  if initializer is not None:
    sess.run(initializer)


def variables_bytes(graph):
  """The bytes of `graph`'s global variables: about what a checkpoint (or a
  SavedModel's variables) of them takes."""
  with graph.as_default():
    variables = tf.compat.v1.global_variables()
  return sum(v.shape.num_elements() * v.dtype.base_dtype.size
             for v in variables if v.shape.is_fully_defined())


def checkpoint_counters(checkpoint):
  """(global_step, micro_step) stored in `checkpoint` (0 if absent)."""
  reader = checkpoint_checks.reader_of(checkpoint)
  values = []
  for name in ("global_step", "micro_step"):
    values.append(int(reader.get_tensor(name))
                  if reader.has_tensor(name) else 0)
  return tuple(values)


def save(sess, saver, model_dir, step):
  """Saves `sess`'s variables with `saver` as checkpoint `step` of
  `model_dir`, or ends in disk_space.WriteFailed with what the save left
  removed."""
  name = "%s-%d" % (checkpoint_checks.CHECKPOINT_BASENAME, step)
  with disk_space.writing(
      model_dir, "checkpoint " + name,
      size=lambda: variables_bytes(sess.graph),
      partial=_unfinished_checkpoint(model_dir, name), flag="--output_dir",
      then=lambda: resume_point(model_dir)):
    # Graphs may embed in-memory features as constants; the code, not a
    # .meta file, rebuilds the graph, so the meta graph is not written.
    path = saver.save(
        sess, os.path.join(model_dir, checkpoint_checks.CHECKPOINT_BASENAME),
        global_step=step, write_meta_graph=False)
  logging.info("Saved checkpoint %s", path)


def _unfinished_checkpoint(model_dir, name):
  """callable(entry) -> whether an entry of model_dir that a failed save
  of checkpoint `name` created is to be removed: the temporary files of
  TensorFlow's save, and the checkpoint's own files unless the
  `checkpoint` file already lists it (then only its removal of older
  checkpoints failed)."""
  def unfinished(entry):
    if disk_space.is_partial(entry):
      return True
    latest = checkpoint_checks.latest_checkpoint(model_dir)
    return entry.startswith(name + ".") and not (
        latest and os.path.basename(latest) == name)
  return unfinished


def resume_point(model_dir):
  """What running the same command again does, for messages."""
  latest = checkpoint_checks.latest_checkpoint(model_dir)
  if latest:
    return "it resumes from %s" % os.path.basename(latest)
  return "it starts over (no checkpoint was saved yet)"


def weights_name(config, checkpoint_path):
  """What `restore_or_initialize` will load under RunConfig `config`, for a
  progress line."""
  checkpoint = (checkpoint_path or
                checkpoint_checks.latest_checkpoint(config.model_dir))
  if checkpoint:
    return checkpoint
  if config.init_checkpoint:
    return "the weights of %s" % config.init_checkpoint
  return "the initialized variables"


def restore_or_initialize(config, sess, scaffold, checkpoint_path, what):
  """Restores the checkpoint, or else keeps the initialized variables.

  As TF1's Estimator did, evaluation and prediction without a checkpoint
  in model_dir run on the initial values, which include a pretrained
  --init_checkpoint when the model_fn applies one.

  Args:
    config: the RunConfig.
    sess: a session of the graph, whose variables are set here.
    scaffold: None or the graph's Scaffold; its init_fn runs when there is
      no checkpoint.
    checkpoint_path: the checkpoint to load; None: the latest of model_dir.
    what: who asks ("Estimator.evaluate"), for the warning.

  Returns:
    The restored checkpoint's path, or a description of the initial values.
  """
  run_initializers(sess)
  checkpoint = (checkpoint_path or
                checkpoint_checks.latest_checkpoint(config.model_dir))
  if checkpoint:
    restore(new_saver(), sess, checkpoint)
  else:
    if config.init_checkpoint is None:
      logging.warning("%s: no checkpoint in %s and no init_checkpoint; "
                      "using the variables' initial values.", what,
                      config.model_dir)
    if scaffold is not None and scaffold.init_fn is not None:
      scaffold.init_fn(sess)
  _fill_weight_copies(sess)
  return checkpoint or weights_name(config, None)


class StopRequests(object):
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
    self._error_now = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for signum in self._SIGNALS:
        self._previous[signum] = signal.signal(signum, self._request)
    return self

  @contextlib.contextmanager
  def at_once(self, make_error):
    """Within it, the first signal raises make_error(signum) where the
    program is, instead of waiting for the end of the update: for work
    after a checkpoint was saved (an evaluation), which a rerun does
    again and which may take minutes."""
    self._error_now = make_error
    try:
      yield
    finally:
      self._error_now = None

  def _request(self, signum, frame):
    del frame  # Unused.
    self.signum = signum
    for other, handler in self._previous.items():
      signal.signal(other, handler)
    if self._error_now is not None:
      raise self._error_now(signum)
    logging.warning("%s received: training stops at the end of this update "
                    "and saves a checkpoint (send it again to stop at once).",
                    signal.Signals(signum).name)

  def __exit__(self, *unused_exc_info):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    return False
