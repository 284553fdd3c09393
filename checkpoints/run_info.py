# coding=utf-8
"""What made an output_dir: its run_info.json, and copies of config and vocab.

A training run writes, before its first checkpoint:

  run_info.json     {"task", "labels", "do_lower_case", "max_seq_length",
                     "bert_config_sha256", "vocab_sha256", "vocab_file",
                     "precision", ...}
  bert_config.json  the model's config
  vocab.txt         the vocabulary (or the SentencePiece .model)

so the folder stands on its own: prediction and export need nothing else,
and Hugging Face converters read "task", "labels" and "do_lower_case"
(run_pretraining.py reads token ids, not text: its record has neither
casing nor vocabulary, and adds "max_predictions_per_seq"; run_squad.py
adds "doc_stride" and "max_query_length", which its export and predictor.py
reuse, as run_classifier.py's "long_text" and "doc_stride" with
--long_text=windows). A
later run in the same folder that differs in one of these (a resume with
another --max_seq_length, another task's run) is refused, naming the field
and the fix. A folder whose run stopped before its first checkpoint holds
nothing to resume, so a new run there simply replaces its record.
"""

import hashlib
import json
import os

from absl import logging
import tensorflow as tf

from userio import cli
from userio import output_files
from userio import sidecars

RECORD_FILE = "run_info.json"
# The precision the folder's latest training computed in (fp32, fp16, bf16).
PRECISION_FIELD = "precision"
CONFIG_FILE = "bert_config.json"
WORDPIECE_VOCAB_FILE = "vocab.txt"

# How a difference in a field is worded, in the order fields are compared;
# other fields of a record are compared after these ("another <field>").
_WHAT = (
    ("task", "another task"),
    ("labels", "another label list"),
    ("do_lower_case", "another --do_lower_case"),
    ("bert_config_sha256", "another BERT config"),
    ("vocab_sha256", "another vocabulary"),
    ("max_seq_length", "another --max_seq_length"),
)
# A run may evaluate or predict at another length (or SQuAD version or
# windows, or number of masked-LM predictions) than it trained with, but not
# continue training with another.
_TRAINING_ONLY = ("max_seq_length", "version_2_with_negative",
                  "max_predictions_per_seq", "doc_stride", "max_query_length",
                  "long_text")
# What evaluations learn of a run's checkpoints after it started: a tuned
# multi-label threshold, the best checkpoint (checkpoints/best_checkpoint.py).
LEARNED_FIELDS = ("threshold", "best_checkpoint")
# Names of copies and of data columns, what evaluations learn, the
# precision and the training's length (a resume may change them): not
# properties of the model.
_NOT_COMPARED = ("vocab_file", "text_columns", PRECISION_FIELD,
                 "num_train_steps", "steps_per_epoch") + LEARNED_FIELDS


def file_sha256(path):
  """Hex sha256 of a file's bytes."""
  return sidecars.describe_file(path)["sha256"]


def config_sha256(bert_config_file):
  """sha256 of a JSON config's content, independent of key order and
  spacing."""
  with tf.io.gfile.GFile(bert_config_file, "r") as reader:
    config = json.load(reader)
  return hashlib.sha256(
      json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def vocab_copy_name(vocab_file, spm_model_file=None):
  """The name of the vocabulary's copy in output_dir."""
  if spm_model_file:
    return os.path.basename(spm_model_file)
  return WORDPIECE_VOCAB_FILE


def make_record(task, labels, do_lower_case, max_seq_length,
                bert_config_file, vocab_file, spm_model_file=None, **extra):
  """The run_info.json of a training run.

  Args:
    task: task name (lower case), e.g. "mrpc", "squad" or "pretraining".
    labels: the label list in label-id order (None for SQuAD and
      pretraining; [None] for a regression task).
    do_lower_case, max_seq_length: the flags; do_lower_case None for a
      script that reads no text (pretraining), which records no casing.
    bert_config_file, vocab_file, spm_model_file: the model's files; with
      neither vocabulary (pretraining reads token ids) the record names no
      vocabulary and none is copied.
    **extra: further fields to record and compare (JSON values).
  """
  vocabulary = spm_model_file or vocab_file
  record = {
      "task": task,
      "labels": None if labels is None else list(labels),
      "max_seq_length": int(max_seq_length),
      "bert_config_sha256": config_sha256(bert_config_file),
  }
  if do_lower_case is not None:
    record["do_lower_case"] = bool(do_lower_case)
  if vocabulary:
    record["vocab_sha256"] = file_sha256(vocabulary)
    record["vocab_file"] = vocab_copy_name(vocab_file, spm_model_file)
  record.update(extra)
  return record


def read(output_dir):
  """The stored record of `output_dir`, or None if it has none."""
  path = os.path.join(output_dir, RECORD_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "r") as reader:
    try:
      return json.load(reader)
    except ValueError as e:
      raise cli.UserError(
          "%s is not valid JSON (%s); it records what made --output_dir=%s. "
          "Pass a new --output_dir, or delete that directory to start over."
          % (path, e, output_dir)) from None


def check(output_dir, record, *, has_checkpoint, do_train):
  """Refuses to continue a run in `output_dir` that `record` contradicts.

  Args:
    output_dir: the run's --output_dir.
    record: this run's record (`make_record`).
    has_checkpoint: whether output_dir holds a checkpoint.
    do_train: whether this run trains (max_seq_length must then match).

  Raises:
    cli.UserError naming the field, both values and the fix.
  """
  stored = read(output_dir)
  if stored is None:
    return
  path = os.path.join(output_dir, RECORD_FILE)
  what = dict(_WHAT)
  keys = [key for key, _ in _WHAT] + sorted(set(record) - set(what))
  for key in keys:
    if (key in _NOT_COMPARED or (key in _TRAINING_ONLY and not do_train) or
        key not in stored or key not in record or
        stored[key] == record[key]):
      continue
    if not has_checkpoint:
      logging.info("%s records a run that stopped before its first "
                   "checkpoint (%s=%r); this run replaces it.", path, key,
                   stored[key])
      return
    raise cli.UserError(
        "--output_dir=%s holds checkpoints of %s (%s says %s=%r, this run "
        "has %r). Pass a new --output_dir, or delete that directory to "
        "start over." % (output_dir, what.get(key, "another " + key), path,
                         key, stored[key], record[key]))


def write(output_dir, record, bert_config_file, vocab_file,
          spm_model_file=None):
  """Writes run_info.json and copies of the config and the vocabulary (if
  the record names one)."""
  output_files.copy(bert_config_file, os.path.join(output_dir, CONFIG_FILE),
                    flag="--output_dir")
  if "vocab_file" in record:
    output_files.copy(spm_model_file or vocab_file,
                      os.path.join(output_dir, record["vocab_file"]),
                      flag="--output_dir")
  _write_record(output_dir, record)


def learned_fields(output_dir):
  """The LEARNED_FIELDS that output_dir's run_info.json holds."""
  stored = read(output_dir) or {}
  return {key: stored[key] for key in LEARNED_FIELDS if key in stored}


def add_fields(output_dir, **fields):
  """Adds (or replaces) `fields` in output_dir's run_info.json: what an
  evaluation learns about the trained model (a multi-label threshold)."""
  _write_record(output_dir, dict(read(output_dir) or {}, **fields))


def _write_record(output_dir, record):
  output_files.write_text(os.path.join(output_dir, RECORD_FILE),
                          json.dumps(record, indent=2, sort_keys=True) + "\n",
                          flag="--output_dir")


def assets(output_dir):
  """{name: path} of the files that make output_dir stand on its own (what
  a SavedModel export carries beside the weights); only those present."""
  stored = read(output_dir) or {}
  names = [RECORD_FILE, CONFIG_FILE, stored.get("vocab_file")]
  return {name: os.path.join(output_dir, name) for name in names
          if name and tf.io.gfile.exists(os.path.join(output_dir, name))}
