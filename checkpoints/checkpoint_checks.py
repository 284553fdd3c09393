# coding=utf-8
"""Checks a checkpoint before a run depends on it: complete, and the model's.

A truncated `.data` file fails only when the damaged variable is restored,
and a bert_config.json with more layers than the checkpoint leaves the
extra layers silently random; both are found here, before anything
expensive starts, by reading every variable once.
"""

import glob

from absl import logging
import tensorflow as tf

from userio import cli


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


def _files_of(prefix):
  """The files of checkpoint `prefix` (index and data shards)."""
  return sorted(glob.glob(glob.escape(prefix) + ".data-*")) + [
      prefix + ".index"]


def _damaged(prefix, flag, error):
  files = ", ".join(_files_of(prefix))
  return cli.UserError(
      "%s=%s cannot be read (%s): %s is damaged or incomplete; download or "
      "copy the checkpoint again." % (
          flag, prefix, " ".join(str(error).split())[:200], files))


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
    reader = tf.train.load_checkpoint(prefix)
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
      start from their initializers, which is logged; those present must
      have the shape.

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
  """The names of `heads` absent from `shapes`, logged; UserError for one of
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
  if missing:
    logging.warning("%s=%s has no %s: initialized fresh (random weights, "
                    "zero biases, LayerNorm at 1 and 0).", flag, prefix,
                    ", ".join(missing))
  return missing
