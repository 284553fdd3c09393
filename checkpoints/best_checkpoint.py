# coding=utf-8
"""The best checkpoint of a run, kept apart, and which checkpoint a run
that evaluates, predicts or exports uses.

When evaluations choose a checkpoint (driver/evaluation_during_training.py,
driver/checkpoint_scoring.py), its files are kept in `<output_dir>/best/`
under their own name (hard links on a local disk, so the copy costs no
space; copies elsewhere), where the Saver's rotation
(--keep_checkpoint_max) never reaches them, and run_info.json records it:

    "best_checkpoint": {"checkpoint": "best/model.ckpt-230",
                        "global_step": 230, "metric": "eval_f1",
                        "value": 0.887}

A later --do_eval, --do_predict or --export_dir in that folder, and
convert_checkpoint.py on it, then take that checkpoint unless
--use_checkpoint says otherwise (`resolve`).
"""

import os
import re

import tensorflow as tf

from checkpoints import checkpoint_checks
from checkpoints import run_info
from userio import cli
from userio import output_files

BEST_DIR = "best"
RECORD_FIELD = "best_checkpoint"
# --use_checkpoint's words.
BEST, LATEST = "best", "latest"


def recorded(output_dir):
  """The run_info.json record of the folder's best checkpoint, or None."""
  return (run_info.read(output_dir) or {}).get(RECORD_FIELD)


def has_files(prefix):
  """Whether checkpoint `prefix` is on disk (its index, written last)."""
  return tf.io.gfile.exists(prefix + ".index")


def recorded_path(output_dir):
  """The prefix of the folder's recorded best checkpoint, or None when none
  is recorded or its files are gone."""
  record = recorded(output_dir)
  if not record:
    return None
  prefix = os.path.join(output_dir, record["checkpoint"])
  return prefix if has_files(prefix) else None


def keep(output_dir, prefix, *, metric, value, global_step):
  """Makes checkpoint `prefix` the folder's best: its files into best/,
  the record into run_info.json, the previous best's files removed.

  The files are complete before the record names them (the index last, as
  the Saver writes it), and the old ones go only after: a run stopped at
  any point leaves a best checkpoint that loads.

  Returns:
    The prefix of the kept copy.
  """
  folder = os.path.join(output_dir, BEST_DIR)
  name = os.path.basename(prefix)
  tf.io.gfile.makedirs(folder)
  for source in checkpoint_checks.checkpoint_files(prefix):
    output_files.link_or_copy(
        source, os.path.join(folder, os.path.basename(source)),
        flag="--output_dir")
  run_info.add_fields(output_dir, **{RECORD_FIELD: {
      "checkpoint": "%s/%s" % (BEST_DIR, name), "global_step": global_step,
      "metric": metric, "value": value}})
  for entry in tf.io.gfile.listdir(folder):
    if not entry.startswith(name + "."):
      tf.io.gfile.remove(os.path.join(folder, entry))
  return os.path.join(folder, name)


def check_use_checkpoint(value, output_dir, *, given):
  """Refuses a --use_checkpoint that names no checkpoint, before anything
  slow; see `resolve` for the values.

  Raises:
    cli.UserError naming the flag, the folder's checkpoints and the fix.
  """
  resolve(value, output_dir, given=given)


def resolve(value, output_dir, *, given=True):
  """The checkpoint --use_checkpoint=`value` names in `output_dir`.

  Args:
    value: "best" (the recorded best; without one, None), "latest" (None),
      a step number (model.ckpt-<step> of the folder, or of best/), or a
      checkpoint prefix.
    output_dir: the run's folder.
    given: whether the command line set the flag; "best" given where no
      best is recorded is refused rather than read as the newest.

  Returns:
    A checkpoint prefix, or None for the folder's newest checkpoint.

  Raises:
    cli.UserError when `value` names no checkpoint.
  """
  if value in (None, "", LATEST):
    return None
  if value == BEST:
    best = recorded_path(output_dir)
    if best is None and given and recorded(output_dir):
      raise cli.UserError(
          "--use_checkpoint=best: %s records %s as the best checkpoint, "
          "but its files are gone. Pass --use_checkpoint=latest or a "
          "step." % (output_dir, recorded(output_dir)["checkpoint"]))
    if best is None and given:
      raise cli.UserError(
          "--use_checkpoint=best: --output_dir=%s records no best "
          "checkpoint (only training that evaluates on a schedule, or "
          "--eval_all_checkpoints, chooses one). Pass "
          "--use_checkpoint=latest or a step." % output_dir)
    return best
  candidates = [value]
  if re.fullmatch(r"\d+", value):
    name = "%s-%s" % (checkpoint_checks.CHECKPOINT_BASENAME, value)
    candidates = [os.path.join(output_dir, name),
                  os.path.join(output_dir, BEST_DIR, name)]
  for prefix in candidates:
    if has_files(prefix):
      return prefix
  steps = [os.path.basename(p) for p in checkpoint_checks.checkpoints_in(
      output_dir, include_unlisted=True)]
  raise cli.UserError(
      "--use_checkpoint=%s names no checkpoint; --output_dir=%s holds %s. "
      "Pass best, latest, a step or a checkpoint prefix." % (
          value, output_dir, ", ".join(steps) if steps else "none"))


def describe(output_dir):
  """The folder's best checkpoint in a few words, or None."""
  record = recorded(output_dir)
  if not record:
    return None
  return "%s = %s at step %d" % (record["metric"], _short(record["value"]),
                                 record["global_step"])


def _short(value):
  return "%.4f" % value if isinstance(value, float) else str(value)
