# coding=utf-8
"""The checkpoints of a run's folder, and the checks before a run reads one.

Which checkpoints a folder holds (`checkpoints_in`, `latest_checkpoint`;
the runner saves them as `CHECKPOINT_BASENAME`-<step>), and whether the
checkpoint a run reads, --init_checkpoint or the one of --output_dir it
resumes from, is complete and the model's (`check_checkpoints`). A
truncated `.data` file fails only when the damaged variable is restored,
and a bert_config.json with more layers than the checkpoint leaves the
extra layers silently random; both are found here, before anything
expensive starts, by reading every variable once.
"""

import os
import re

from absl import logging
import tensorflow as tf

from userio import cli
from userio import file_systems
from userio import verbosity

# The runner's checkpoints in a run's folder: model.ckpt-<global step>.
CHECKPOINT_BASENAME = "model.ckpt"


# ------------------------------------------------------- a run's folder


def _checkpoint_step(prefix):
  """The step in a prefix like .../model.ckpt-120, or -1 if it has none."""
  match = re.search(r"-(\d+)$", prefix)
  return int(match.group(1)) if match else -1


def checkpoints_in(model_dir, include_unlisted=False):
  """Prefixes of the checkpoints stored in `model_dir`, oldest first.

  The folder's `checkpoint` file may name its checkpoints by absolute paths
  (written by an older run, or before the folder was copied or moved), and
  those paths may point at another folder. Only the base names are taken
  from it, and only checkpoints whose files are in `model_dir` count; when
  the file names none of them, the `model.ckpt-<step>` files found there do.

  With `include_unlisted`, every `model.ckpt-<step>` file there counts too,
  all ordered by step: a Saver keeping every checkpoint
  (keep_checkpoint_max=0) names only the newest in that file. The Saver's
  own bookkeeping must not use it, or a resumed run with a limit would
  delete checkpoints an earlier run chose to keep.
  """
  if not model_dir or not tf.io.gfile.isdir(model_dir):
    return []
  names = []
  state = tf.train.get_checkpoint_state(model_dir)
  if state is not None:
    names = [os.path.basename(path) for path in
             list(state.all_model_checkpoint_paths) +
             [state.model_checkpoint_path] if path]
  if include_unlisted or not names:
    files = [os.path.basename(path)[:-len(".index")] for path in
             tf.io.gfile.glob(os.path.join(
                 model_dir, CHECKPOINT_BASENAME + "-*.index"))]
    names = sorted(set(names + files) if include_unlisted else files,
                   key=_checkpoint_step)
  prefixes = []
  for name in names:
    prefix = os.path.join(model_dir, name)
    if prefix not in prefixes and tf.io.gfile.exists(prefix + ".index"):
      prefixes.append(prefix)
  return prefixes


def remove_unfinished_saves(model_dir):
  """Removes what a save that never finished left in local `model_dir`:
  TensorFlow writes a checkpoint's files under temporary names
  (`model.ckpt-<step>.data-...tempstate<digits>`) and the `checkpoint`
  state file as `checkpoint.tmp<hex>`, and a run killed while saving
  leaves them. The caller must hold the folder (no other run saves there).

  Returns:
    The names removed.
  """
  if (not model_dir or file_systems.is_remote(model_dir) or
      not os.path.isdir(model_dir)):
    return []
  removed = sorted(
      name for name in os.listdir(model_dir)
      if (name.startswith(CHECKPOINT_BASENAME + "-") and
          ".tempstate" in name) or re.fullmatch(r"checkpoint\.tmp\w+", name))
  for name in removed:
    os.remove(os.path.join(model_dir, name))
  return removed


def latest_checkpoint(model_dir):
  """The newest checkpoint stored in `model_dir` (see `checkpoints_in`), or
  None."""
  prefixes = checkpoints_in(model_dir)
  return prefixes[-1] if prefixes else None



# ------------------------------------------------------------- the model




def bert_variable_shapes(bert_config):
  """The variables BertModel makes under bert/, in model order.

  The names are those of Google's checkpoints (`modeling.BertModel` creates
  them; tests/test_checkpoint_checks.py compares the two).

  Returns:
    list of (name, shape) with shape a list of ints.
  """
  h = bert_config.hidden_size
  i = bert_config.intermediate_size
  layer_norm = [("LayerNorm/beta", [h]), ("LayerNorm/gamma", [h])]
  shapes = [("bert/embeddings/word_embeddings", [bert_config.vocab_size, h]),
            ("bert/embeddings/token_type_embeddings",
             [bert_config.type_vocab_size, h]),
            ("bert/embeddings/position_embeddings",
             [bert_config.max_position_embeddings, h])]
  shapes += [("bert/embeddings/" + name, shape) for name, shape in layer_norm]
  dense = lambda name, n_in, n_out: [(name + "/kernel", [n_in, n_out]),
                                     (name + "/bias", [n_out])]
  for layer in range(bert_config.num_hidden_layers):
    parts = []
    for projection in ("query", "key", "value"):
      parts += dense("attention/self/" + projection, h, h)
    parts += dense("attention/output/dense", h, h)
    parts += [("attention/output/" + n, s) for n, s in layer_norm]
    parts += dense("intermediate/dense", h, i)
    parts += dense("output/dense", i, h)
    parts += [("output/" + n, s) for n, s in layer_norm]
    shapes += [("bert/encoder/layer_%d/%s" % (layer, n), s) for n, s in parts]
  shapes += dense("bert/pooler/dense", h, h)
  return shapes


# A checkpoint may lack the pooler: only heads on the pooled output read it.
_POOLER_SCOPE = "bert/pooler/"


def pretraining_head_shapes(bert_config):
  """The variables of Google's pretraining heads (run_pretraining.py), which
  its released checkpoints hold beside bert/ and others (such as MiniLM's)
  lack.

  The masked-LM head's output projection is the word embedding table, so
  only its bias is a variable of its own.

  Returns:
    list of (name, shape) with shape a list of ints.
  """
  h = bert_config.hidden_size
  return [("cls/predictions/output_bias", [bert_config.vocab_size]),
          ("cls/predictions/transform/LayerNorm/beta", [h]),
          ("cls/predictions/transform/LayerNorm/gamma", [h]),
          ("cls/predictions/transform/dense/bias", [h]),
          ("cls/predictions/transform/dense/kernel", [h, h]),
          ("cls/seq_relationship/output_bias", [2]),
          ("cls/seq_relationship/output_weights", [2, h])]


def checkpoint_files(prefix):
  """The files of checkpoint `prefix` (index and data shards)."""
  return sorted(tf.io.gfile.glob(prefix + ".data-*")) + [
      prefix + ".index"]


def _damaged(prefix, flag, error):
  files = ", ".join(checkpoint_files(prefix))
  return cli.UserError(
      "%s=%s cannot be read (%s): %s is damaged or incomplete; download or "
      "copy the checkpoint again." % (
          flag, prefix, " ".join(str(error).split())[:200], files))


def reader_of(prefix):
  """A tf.train.CheckpointReader of the checkpoint at `prefix` itself.

  tf.train.load_checkpoint first asks whether its argument is a folder (to
  read that folder's newest checkpoint instead), and ram:// answers yes for
  a prefix, since the names of the checkpoint's files begin with it.
  """
  return tf.compat.v1.train.NewCheckpointReader(prefix)


def load_readable(prefix, flag="--init_checkpoint"):
  """Reads every variable of checkpoint `prefix` once; returns its shapes.

  Args:
    prefix: the checkpoint prefix (e.g. .../bert_model.ckpt).
    flag: how to name it in messages ("--init_checkpoint", or the
      --output_dir checkpoint a run resumes from).

  Returns:
    dict variable name -> shape (list of ints).

  Raises:
    cli.UserError naming the checkpoint's files when one is damaged.
  """
  try:
    reader = reader_of(prefix)
    shapes = reader.get_variable_to_shape_map()
    for name in shapes:
      reader.get_tensor(name)
  # A short .data file raises IndexError ("Read less bytes than requested").
  except (tf.errors.OpError, ValueError, IndexError) as e:
    raise _damaged(prefix, flag, e) from None
  return shapes


def check_matches_config(shapes, bert_config, prefix, bert_config_file,
                         flag="--init_checkpoint", heads=()):
  """Refuses a checkpoint that lacks a variable of the config, or whose
  shape differs; the first such variable is named. A missing pooler is only
  warned about.

  Args:
    shapes: the checkpoint's {name: shape}, as `load_readable` returns.
    bert_config: modeling.BertConfig of --bert_config_file.
    prefix, bert_config_file, flag: named in the message.
    heads: (name, shape) of the variables a script adds to BERT that a
      checkpoint may lack (e.g. `pretraining_head_shapes`): the missing ones
      start from their initializers; those present must have the shape.

  Returns:
    The names of `heads` that the checkpoint lacks.
  """
  pooler_missing = []
  for name, shape in bert_variable_shapes(bert_config):
    found = shapes.get(name)
    if found is None and name.startswith(_POOLER_SCOPE):
      pooler_missing.append(name)
      continue
    if found is None:
      raise cli.UserError(
          "%s=%s has no variable %s, which --bert_config_file=%s (%d layers, "
          "hidden size %d) needs; pass the bert_config.json that belongs to "
          "this checkpoint." % (flag, prefix, name, bert_config_file,
                                bert_config.num_hidden_layers,
                                bert_config.hidden_size))
    if list(found) != list(shape):
      raise cli.UserError(
          "%s=%s holds %s of shape %s, but --bert_config_file=%s makes it %s; "
          "pass the bert_config.json that belongs to this checkpoint." %
          (flag, prefix, name, list(found), bert_config_file, list(shape)))
  if pooler_missing:
    logging.warning("%s=%s has no pooler (%s; Hugging Face's masked-LM and "
                    "question answering models have none): it starts from "
                    "random values.", flag, prefix, _POOLER_SCOPE)
  extra = sorted(name for name in shapes if name.startswith(
      "bert/encoder/layer_%d/" % bert_config.num_hidden_layers))
  if extra:
    logging.warning("%s=%s has more layers than --bert_config_file=%s (%d); "
                    "the extra layers are not used.", flag, prefix,
                    bert_config_file, bert_config.num_hidden_layers)
  return _missing_heads(shapes, heads, prefix, flag)


def _missing_heads(shapes, heads, prefix, flag):
  """The names of `heads` absent from `shapes`; UserError for one of
  another shape."""
  missing = []
  for name, shape in heads:
    found = shapes.get(name)
    if found is None:
      missing.append(name)
    elif list(found) != list(shape):
      raise cli.UserError(
          "%s=%s holds %s of shape %s, but this model makes it %s; pass a "
          "checkpoint of this model (or one without that variable, which "
          "then starts fresh)." % (flag, prefix, name, list(found),
                                   list(shape)))
  return missing


# ----------------------------------------------------- what a run reads


def check_checkpoint_prefix(init_checkpoint):
  """--init_checkpoint names a checkpoint: its .index file exists."""
  if not tf.io.gfile.exists(init_checkpoint + ".index"):
    raise cli.UserError(
        "--init_checkpoint=%s: %s.index not found. Pass the checkpoint "
        "prefix (e.g. /path/to/bert_model.ckpt) or a Hugging Face model "
        "folder (config.json, model.safetensors), not one of the "
        "checkpoint's files (.index, .data-*)." %
        (init_checkpoint, init_checkpoint))


def check_init_checkpoint(init_checkpoint, bert_config, bert_config_file,
                          heads=()):
  """--init_checkpoint is a complete checkpoint with the config's shapes.

  Returns:
    The names of `heads` (see `check_matches_config`) it lacks: they start
    from their initializers.
  """
  check_checkpoint_prefix(init_checkpoint)
  shapes = load_readable(init_checkpoint)
  return check_matches_config(shapes, bert_config, init_checkpoint,
                              bert_config_file, heads=heads)


def _check_resume_checkpoint(resume, bert_config, bert_config_file, heads):
  """The checkpoint of --output_dir fits the config and holds every head
  (a run restores all of its variables from it)."""
  flag = "the checkpoint of --output_dir"
  shapes = load_readable(resume, flag)
  missing = check_matches_config(shapes, bert_config, resume,
                                 bert_config_file, flag, heads=heads)
  if missing:
    raise cli.UserError(
        "%s, %s, lacks %s, so it is not a checkpoint of this script's runs; "
        "pass a new --output_dir (and this checkpoint as --init_checkpoint "
        "to start from it)." % (flag, resume, ", ".join(missing)))


def check_checkpoints(output_dir, init_checkpoint, bert_config,
                      bert_config_file, *, do_train, heads=(),
                      heads_are_new=True):
  """The checkpoints a run reads are complete and fit the config.

  The checkpoint of `output_dir` a run resumes from, else `init_checkpoint`
  when given.

  Args:
    output_dir: --output_dir, the run's folder.
    init_checkpoint: --init_checkpoint (a prefix), or None / "".
    bert_config: modeling.BertConfig of `bert_config_file`.
    bert_config_file: --bert_config_file, named in messages.
    do_train: whether the run trains (starting from random weights is
      worth a warning then).
    heads: (name, shape) of the variables the script adds to BERT, which
      `init_checkpoint` may lack (`check_matches_config`).
    heads_are_new: whether a pre-trained checkpoint normally lacks `heads`
      (a fine-tuning task's own head, said only with -v 1); False: a
      checkpoint without them is worth a warning (pre-training's heads).

  Returns:
    The checkpoint of `output_dir` (or None).
  """
  resume = latest_checkpoint(output_dir)
  if resume:
    _check_resume_checkpoint(resume, bert_config, bert_config_file, heads)
  elif init_checkpoint:
    missing = check_init_checkpoint(init_checkpoint, bert_config,
                                    bert_config_file, heads)
    if missing and not heads_are_new:
      logging.warning("--init_checkpoint=%s has no %s: initialized fresh "
                      "(random weights, zero biases, LayerNorm at 1 and 0).",
                      init_checkpoint, ", ".join(missing))
    elif missing and verbosity.details():
      logging.info("--init_checkpoint=%s has no %s, the task's head: it "
                   "starts from its initializers.", init_checkpoint,
                   ", ".join(missing))
  if init_checkpoint and resume:
    logging.info("--output_dir holds %s: the run resumes from it, not from "
                 "--init_checkpoint.", resume)
  if do_train and not init_checkpoint and not resume:
    logging.warning("No --init_checkpoint: training starts from random "
                    "weights, not from a pre-trained model.")
  return resume
