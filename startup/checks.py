# coding=utf-8
"""Checks of a training command's flags and files that cost nothing.

Each function raises cli.UserError naming the flag or file and the fix;
none reads more than a config or a vocabulary. Flags a script does not
define are None in its SharedFlags and are skipped.
"""

import math
import os
import tempfile

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from checkpoints import run_info
from memory import memory_settings
import modeling
from runner import distribution as distribution_lib
from startup import precision
import tokenization
from userio import cli
from userio import file_systems

# ------------------------------------------------------------------ flags


def check_tpu_flags(use_tpu, tpu_name, changed_compatibility_flags=()):
  """Refuses --use_tpu / --tpu_name; says once that the other TPU flags,
  when set (`changed_compatibility_flags`, "--name=value" each), do
  nothing."""
  if use_tpu or tpu_name:
    raise cli.UserError("--use_tpu/--tpu_name: no TPU support in this build; "
                        "run on CPU/GPU without them")
  if changed_compatibility_flags:
    logging.info("%s: accepted for compatibility with Google's commands; "
                 "without effect on CPU/GPU.",
                 ", ".join(changed_compatibility_flags))


def _check_at_least(name, value, minimum):
  """--name=value, unless None (not defined), is at least `minimum`."""
  if value is not None and value < minimum:
    raise cli.UserError("--%s=%s must be at least %d." % (name, value,
                                                         minimum))


def _check_positive_float(name, value, fix):
  if value is not None and not (math.isfinite(value) and value > 0):
    raise cli.UserError("--%s=%s must be a positive number; %s" % (
        name, value, fix))


def _check_training_values(shared):
  """The values that matter only when the run trains."""
  _check_positive_float("learning_rate", shared.learning_rate,
                        "BERT fine-tunes with 1e-5 to 5e-5 and pre-trains "
                        "with about 1e-4.")
  _check_positive_float("num_train_epochs", shared.num_train_epochs,
                        "e.g. --num_train_epochs=3.")
  warmup = shared.warmup_proportion
  if warmup is not None and not 0 <= warmup <= 1:
    raise cli.UserError(
        "--warmup_proportion=%s must be between 0 and 1 (the fraction of "
        "the training steps that warm up, e.g. 0.1)." % warmup)
  _check_at_least("save_checkpoints_steps", shared.save_checkpoints_steps, 1)
  secs = shared.save_checkpoints_secs
  if secs is not None and not (math.isfinite(secs) and secs >= 0):
    raise cli.UserError("--save_checkpoints_secs=%s must be 0 (off) or a "
                        "positive number of seconds, e.g. 300." % secs)
  _check_at_least("keep_checkpoint_max", shared.keep_checkpoint_max, 0)
  _check_at_least("log_step_count_steps", shared.log_step_count_steps, 1)
  _check_at_least("save_summary_steps", shared.save_summary_steps, 1)



def _check_output_dir_flag(output_dir):
  """--output_dir (None: not defined) is given and not a file."""
  if output_dir is None:
    return
  if not output_dir:
    raise cli.UserError("--output_dir is required: the folder for "
                        "checkpoints and results.")
  if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
    raise cli.UserError("--output_dir=%s is a file, not a directory; pass a "
                        "directory (it is created if missing)." % output_dir)


def _check_memory_flags(shared, do_train):
  """--device_memory_gb, --micro_batch_size and the accumulation steps."""
  if shared.device_memory_gb is not None:
    memory_settings.device_memory(shared.device_memory_gb)
  micro = memory_settings.parse_micro_batch_size(shared.micro_batch_size)
  if do_train and shared.train_batch_size is not None:
    memory_settings.accumulation_steps(
        shared.train_batch_size, micro if isinstance(micro, int) else None,
        shared.explicit_accumulation_steps)


def check_flags(shared, *, do_train, min_seq_length):
  """Checks the shared flags' values and combinations; reads no file.

  Args:
    shared: shared_flags.SharedFlags.
    do_train: whether the run trains.
    min_seq_length: the shortest --max_seq_length that leaves room for the
      script's input (tasks/text_pair.py: one text or a pair).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  check_tpu_flags(shared.use_tpu, shared.tpu_name,
                  shared.changed_compatibility_flags)
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    _check_at_least(name, getattr(shared, name), 1)
  max_seq_length = shared.max_seq_length
  if max_seq_length is not None and max_seq_length < min_seq_length:
    raise cli.UserError(
        "--max_seq_length=%d leaves no room for the text: [CLS], [SEP] and "
        "at least one token of each text need %d; use e.g. 128." %
        (max_seq_length, min_seq_length))
  if do_train:
    _check_training_values(shared)
  _check_output_dir_flag(shared.output_dir)
  if shared.do_lower_case is not None:
    tokenization.validate_case_matches_checkpoint(shared.do_lower_case,
                                                  shared.init_checkpoint)
  _check_memory_flags(shared, do_train)
  precision.check_precision(shared.precision)
  if shared.distribution is not None:
    distribution_lib.check_flags(shared.distribution, shared.devices)
  if shared.distribution == "multi_worker":
    _check_at_least("worker_wait_secs", shared.worker_wait_secs, 1)


# ------------------------------------------------------------------ files


# The file a flag's folder usually holds, suggested when a folder is given.
_FILE_IN_FOLDER = {"vocab_file": run_info.WORDPIECE_VOCAB_FILE,
                   "bert_config_file": run_info.CONFIG_FILE}


def check_not_folder(flag_name, path, expected_name=None):
  """Refuses a folder as the file --flag_name names; points at the file
  `expected_name` in it when there is one (e.g. vocab.txt)."""
  if not path or not tf.io.gfile.isdir(path):
    return
  inside = os.path.join(path, expected_name) if expected_name else None
  hint = (" (e.g. --%s=%s)" % (flag_name, inside)
          if inside and tf.io.gfile.exists(inside) else "")
  raise cli.UserError("--%s=%s is a folder; pass the file itself%s." % (
      flag_name, path, hint))


def _check_file(flag_name, path):
  if not path:
    raise cli.UserError("--%s is required." % flag_name)
  if not tf.io.gfile.exists(path):
    raise cli.UserError("--%s=%s: file not found." % (flag_name, path))
  check_not_folder(flag_name, path, _FILE_IN_FOLDER.get(flag_name))


def check_required_files(shared, do_train, vocab_required=True):
  """The files a run needs exist, before anything reads them.

  --vocab_file (or --spm_model_file, which replaces it; unless
  `vocab_required` is False, when only a given one must exist) and
  --bert_config_file must exist; --init_checkpoint, when given, must be a
  checkpoint prefix (its `.index` file must exist). Without training,
  something must supply the weights: a checkpoint in --output_dir or
  --init_checkpoint (a run scoring the folder's checkpoints checks for
  them itself: driver/checkpoint_scoring.py).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  if shared.spm_model_file:
    _check_file("spm_model_file", shared.spm_model_file)
  elif "vocab_file" in shared.defined and (shared.vocab_file or
                                           vocab_required):
    if not shared.vocab_file:
      raise cli.UserError("--vocab_file is required (or --spm_model_file "
                          "for a SentencePiece vocabulary).")
    _check_file("vocab_file", shared.vocab_file)
  _check_file("bert_config_file", shared.bert_config_file)
  if shared.init_checkpoint:
    checkpoint_checks.check_checkpoint_prefix(shared.init_checkpoint)
  if (do_train or shared.init_checkpoint or shared.eval_all_checkpoints or
      checkpoint_checks.latest_checkpoint(shared.output_dir)):
    return
  raise cli.UserError(
      "Nothing to evaluate or predict with: --output_dir=%s holds no "
      "checkpoint and --init_checkpoint is not set. Add --do_train, point "
      "--output_dir at a trained run, or set --init_checkpoint." %
      shared.output_dir)



def load_bert_config(bert_config_file):
  """modeling.BertConfig of --bert_config_file; UserError naming the file."""
  _check_file("bert_config_file", bert_config_file)
  try:
    return modeling.BertConfig.from_json_file(bert_config_file)
  except ValueError as e:
    # BertConfig's messages name the file and the key.
    raise cli.UserError(str(e)) from None


def _vocabulary_flag(vocab_file, spm_model_file):
  """How messages name the vocabulary: its flag and path."""
  return ("--spm_model_file=%s" % spm_model_file if spm_model_file else
          "--vocab_file=%s" % vocab_file)


def make_tokenizer(vocab_file, do_lower_case, spm_model_file=None):
  """The FullTokenizer of --vocab_file (or --spm_model_file, which replaces
  it) and --do_lower_case; None when neither file is given."""
  if not (spm_model_file or vocab_file):
    return None
  flag = _vocabulary_flag(vocab_file, spm_model_file)
  if spm_model_file:
    check_not_folder("spm_model_file", spm_model_file)
  else:
    check_not_folder("vocab_file", vocab_file,
                     _FILE_IN_FOLDER["vocab_file"])
  try:
    return tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case,
        spm_model_file=spm_model_file)
  except UnicodeDecodeError as e:
    raise cli.UserError("%s is not UTF-8 text (%s); pass the vocab.txt of "
                        "the checkpoint." % (flag, e)) from None
  except (RuntimeError, OSError) as e:
    raise cli.UserError("%s is not a SentencePiece model (%s); pass the "
                        ".model file of the checkpoint." % (flag, e)
                        ) from None


def check_vocab(tokenizer, bert_config, *, vocab_file, spm_model_file,
                do_lower_case, bert_config_file):
  """The vocabulary fits the config's embeddings and --do_lower_case.

  Args:
    tokenizer: the FullTokenizer of `make_tokenizer`.
    bert_config: modeling.BertConfig of `bert_config_file`.
    vocab_file, spm_model_file, do_lower_case, bert_config_file: the
      flags' values, named in messages; do_lower_case None for a script
      that reads token ids, not text (no casing to check).
  """
  flag = _vocabulary_flag(vocab_file, spm_model_file)
  if len(tokenizer.vocab) > bert_config.vocab_size:
    raise cli.UserError(
        "%s has %d tokens, more than the vocab_size=%d of "
        "--bert_config_file=%s, so its last ids have no embedding; pass the "
        "vocabulary that belongs to the model." % (
            flag, len(tokenizer.vocab), bert_config.vocab_size,
            bert_config_file))
  if do_lower_case is not None:
    tokenization.validate_case_matches_vocab(do_lower_case, tokenizer.vocab,
                                             flag)


def check_max_seq_length(max_seq_length, bert_config, bert_config_file):
  """Refuses a --max_seq_length beyond the model's position embeddings."""
  if max_seq_length > bert_config.max_position_embeddings:
    raise cli.UserError(
        "--max_seq_length=%d is longer than the model's position "
        "embeddings (max_position_embeddings=%d in --bert_config_file=%s); "
        "lower --max_seq_length to at most %d."
        % (max_seq_length, bert_config.max_position_embeddings,
           bert_config_file, bert_config.max_position_embeddings))


def prepare_output_dir(output_dir, flag="--output_dir"):
  """Creates the folder and makes sure this process can write there.

  Args:
    output_dir: the folder.
    flag: how messages name it (e.g. "the folder of --output_file=...").
  """
  try:
    tf.io.gfile.makedirs(output_dir)
  except (tf.errors.OpError, OSError) as e:
    raise cli.UserError("%s=%s cannot be created (%s); pass a folder you can "
                        "write to." % (flag, output_dir,
                                       " ".join(str(e).split()))) from None
  if file_systems.is_remote(output_dir):
    return  # Remote file systems report their own errors on writing.
  try:
    with tempfile.TemporaryFile(dir=output_dir):
      pass
  except OSError as e:
    raise cli.UserError("%s=%s is not writable (%s); pass a folder you can "
                        "write to." % (flag, output_dir, e.strerror)
                        ) from None

