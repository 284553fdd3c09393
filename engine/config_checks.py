# coding=utf-8
"""Checks the keys and values of a BERT config before a model is built.

A misspelt key or a value of the wrong type would otherwise surface as a
shape error deep inside graph construction; here it is one ValueError that
names the file (or dict), the key and what the key accepts.
"""

import difflib

INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
              "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "type_vocab_size")
FLOAT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob",
                "initializer_range")
FIELDS = INT_FIELDS + FLOAT_FIELDS + ("hidden_act",)
# Keys of Google's multilingual configs that the model does not read.
IGNORED_FIELDS = ("directionality", "pooler_fc_size",
                  "pooler_num_attention_heads", "pooler_num_fc_layers",
                  "pooler_size_per_head", "pooler_type")


def check_complete(json_object, where):
  """Raises ValueError naming `where` if the parsed bert_config.json lacks
  a key (Google's files hold every one)."""
  missing = (sorted(set(FIELDS) - set(json_object))
             if isinstance(json_object, dict) else [])
  if missing:
    raise ValueError("%s lacks %s; Google's bert_config.json files have "
                     "every key (see modeling.BertConfig)." %
                     (where, ", ".join(missing)))


def check_values(values, where, defaults, check_activation):
  """Raises ValueError naming `where` and the key for a bad config dict.

  Args:
    values: the dict to check; absent keys are checked at their defaults.
    where: how the message names the dict's origin (e.g. the flag).
    defaults: dict of every field's default (BertConfig's).
    check_activation: raises ValueError for an unknown hidden_act
      (modeling.get_activation).
  """
  if not isinstance(values, dict):
    raise ValueError("%s must be a JSON object like Google's "
                     "bert_config.json." % where)
  for key in sorted(values):
    if key not in FIELDS and key not in IGNORED_FIELDS:
      close = difflib.get_close_matches(key, sorted(FIELDS), n=1)
      raise ValueError("%s has the unknown key %r; %s" % (
          where, key, "did you mean %r?" % close[0] if close else
          "BERT configs have: %s." % ", ".join(sorted(FIELDS))))
  merged = dict(defaults)
  merged.update(values)
  for key in INT_FIELDS + FLOAT_FIELDS:
    value = merged[key]
    if key in INT_FIELDS:
      valid, kind = isinstance(value, int) and value >= 1, "positive integer"
    else:
      valid, kind = isinstance(value, (int, float)), "number"
    if isinstance(value, bool) or not valid:
      raise ValueError("%s: %s must be a %s, got %r." % (where, key, kind,
                                                          value))
  for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    if not 0.0 <= merged[key] < 1.0:
      raise ValueError("%s: %s must be in [0, 1), got %r." %
                       (where, key, merged[key]))
  if merged["hidden_size"] % merged["num_attention_heads"]:
    raise ValueError("%s: hidden_size %d is not a multiple of "
                     "num_attention_heads %d." % (
                         where, merged["hidden_size"],
                         merged["num_attention_heads"]))
  try:
    check_activation(merged["hidden_act"])
  except ValueError as e:
    raise ValueError("%s: %s" % (where, e)) from None
