# coding=utf-8
"""What Google's BERT checkpoints are called in Hugging Face's layout.

Pure mappings, no files: the one table of tensor names (`_MODULES`, read
in both directions), the heads and the architectures they make, the
shapes a config makes, the activations, and the config fields of both
sides. convert_checkpoint.py reads and writes the files.

Hugging Face stores a dense layer's weight as [out, in] where Google
stores its kernel as [in, out]; LayerNorm's gamma / beta are its weight /
bias; task models (BertFor...) put "bert." before the encoder's names.
"""

import collections
import re

from absl import logging
import numpy as np

from checkpoints import checkpoint_checks
from checkpoints import problem_types
from userio import cli
import modeling

# How the tensors of one module are stored.
_DENSE = "dense"            # Google kernel [in, out], bias; HF weight [out, in]
_LAYER_NORM = "layer_norm"  # Google gamma, beta; HF weight, bias
_TABLE = "table"            # an embedding table; HF appends ".weight"
_AS_IS = "as_is"            # one tensor, same shape on both sides

# (Google name, Hugging Face name, storage): the one table of names, read in
# both directions. "{layer}" stands for an encoder layer's number. Hugging
# Face names of the encoder ("bert/..." on Google's side) get the prefix
# "bert." in task models (BertFor...) and none in a plain BertModel. The
# classifier's and the span head's matrices are [outputs, hidden] on both
# sides (Google's scripts multiply by their transpose), so they are as is.
_LAYER = "bert/encoder/layer_{layer}/"
_HF_LAYER = "encoder.layer.{layer}."
_MODULES = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings", _TABLE),
    ("bert/embeddings/token_type_embeddings",
     "embeddings.token_type_embeddings", _TABLE),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings",
     _TABLE),
    ("bert/embeddings/LayerNorm", "embeddings.LayerNorm", _LAYER_NORM),
    (_LAYER + "attention/self/query", _HF_LAYER + "attention.self.query",
     _DENSE),
    (_LAYER + "attention/self/key", _HF_LAYER + "attention.self.key", _DENSE),
    (_LAYER + "attention/self/value", _HF_LAYER + "attention.self.value",
     _DENSE),
    (_LAYER + "attention/output/dense", _HF_LAYER + "attention.output.dense",
     _DENSE),
    (_LAYER + "attention/output/LayerNorm",
     _HF_LAYER + "attention.output.LayerNorm", _LAYER_NORM),
    (_LAYER + "intermediate/dense", _HF_LAYER + "intermediate.dense", _DENSE),
    (_LAYER + "output/dense", _HF_LAYER + "output.dense", _DENSE),
    (_LAYER + "output/LayerNorm", _HF_LAYER + "output.LayerNorm",
     _LAYER_NORM),
    ("bert/pooler/dense", "pooler.dense", _DENSE),
    ("cls/predictions/transform/dense", "cls.predictions.transform.dense",
     _DENSE),
    ("cls/predictions/transform/LayerNorm",
     "cls.predictions.transform.LayerNorm", _LAYER_NORM),
    ("cls/predictions/output_bias", "cls.predictions.bias", _AS_IS),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight",
     _AS_IS),
    ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", _AS_IS),
    ("output_weights", "classifier.weight", _AS_IS),
    ("output_bias", "classifier.bias", _AS_IS),
    ("cls/squad/output_weights", "qa_outputs.weight", _AS_IS),
    ("cls/squad/output_bias", "qa_outputs.bias", _AS_IS),
    # After the classifier's rows: Hugging Face's names are the same, and
    # only a config declaring BertForMultipleChoice (run_swag.py's head) or
    # BertForTokenClassification (run_ner.py's) reads them as these
    # (`declared_head_from_hf`).
    ("cls/multiple_choice/output_weights", "classifier.weight", _AS_IS),
    ("cls/multiple_choice/output_bias", "classifier.bias", _AS_IS),
    ("cls/ner/output_weights", "classifier.weight", _AS_IS),
    ("cls/ner/output_bias", "classifier.bias", _AS_IS),
)
_HF_ENCODER_PREFIX = "bert."

# The heads a Google checkpoint may hold beside the encoder: (name, its
# tensors). Each is there completely or not at all.
_HEADS = (
    ("masked LM", ("cls/predictions/transform/dense/kernel",
                   "cls/predictions/transform/dense/bias",
                   "cls/predictions/transform/LayerNorm/gamma",
                   "cls/predictions/transform/LayerNorm/beta",
                   "cls/predictions/output_bias")),
    ("next sentence", ("cls/seq_relationship/output_weights",
                       "cls/seq_relationship/output_bias")),
    ("classifier", ("output_weights", "output_bias")),
    ("SQuAD", ("cls/squad/output_weights", "cls/squad/output_bias")),
    ("multiple choice", ("cls/multiple_choice/output_weights",
                         "cls/multiple_choice/output_bias")),
    ("token classifier", ("cls/ner/output_weights", "cls/ner/output_bias")),
)
# Hugging Face's architecture of each combination of heads.
_ARCHITECTURES = (
    ("BertForPreTraining", ("masked LM", "next sentence")),
    ("BertForMaskedLM", ("masked LM",)),
    ("BertForNextSentencePrediction", ("next sentence",)),
    ("BertForSequenceClassification", ("classifier",)),
    ("BertForQuestionAnswering", ("SQuAD",)),
    ("BertForMultipleChoice", ("multiple choice",)),
    ("BertForTokenClassification", ("token classifier",)),
    ("BertModel", ()),
)
# Architectures whose weights are a fine-tuned task's; config.json must
# name the one its weights make (pretraining ones are often named loosely,
# e.g. BertForMaskedLM for weights with both pretraining heads).
_TASK_ARCHITECTURES = ("BertForSequenceClassification",
                       "BertForQuestionAnswering", "BertForMultipleChoice",
                       "BertForTokenClassification")
TOKEN_CLASSIFICATION = "BertForTokenClassification"
# Architectures whose head Hugging Face names "classifier" as it names the
# sequence classifier's, with their heads in `_HEADS`: only config.json's
# architectures tell them apart.
_HEADS_NAMED_CLASSIFIER = (("BertForMultipleChoice", "multiple choice"),
                           (TOKEN_CLASSIFICATION, "token classifier"))
PLAIN_ENCODER = "BertModel"

# Hugging Face tensors that are not weights: buffers of positions and
# segments that older versions of transformers saved. Each must hold the
# value the model would use anyway, checked by `_check_buffer`.
_HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Hugging Face's copy of the masked LM's output projection, tied to the
# word embeddings, and of its bias (the same parameter in transformers).
_HF_DECODER_WEIGHT = "cls.predictions.decoder.weight"
_HF_DECODER_BIAS = "cls.predictions.decoder.bias"

# (Google hidden_act, Hugging Face hidden_act). Google's code computes
# "gelu" with the tanh approximation, Hugging Face's "gelu" is the exact
# erf form, which bert_config.json calls "gelu_exact". The first row of a
# Google name is what it becomes; every Hugging Face name is read.
_ACTIVATIONS = (
    ("gelu_exact", "gelu"),
    ("gelu", "gelu_new"),
    ("gelu", "gelu_pytorch_tanh"),
    ("relu", "relu"),
    ("tanh", "tanh"),
    ("linear", "linear"),
)

# Training state in Google checkpoints: not part of the model.
_TRAINING_STATE_NAMES = ("global_step", "micro_step", "loss_scale",
                         "loss_scale_good_steps")
_TRAINING_STATE_SUFFIXES = ("/adam_m", "/adam_v", "/accum_grad",
                            "/accum_half_squared_norm")

# Fields the two configs share, with Hugging Face's defaults (what
# transformers assumes for a field config.json leaves out).
_SHARED_CONFIG_FIELDS = (
    ("vocab_size", 30522), ("hidden_size", 768), ("num_hidden_layers", 12),
    ("num_attention_heads", 12), ("intermediate_size", 3072),
    ("hidden_dropout_prob", 0.1), ("attention_probs_dropout_prob", 0.1),
    ("max_position_embeddings", 512), ("type_vocab_size", 2),
    ("initializer_range", 0.02))
# Hugging Face config values that only Google's architecture can hold:
# (field, required value, default when absent).
_FIXED_HF_FIELDS = (("layer_norm_eps", 1e-12, 1e-12),
                    ("position_embedding_type", "absolute", "absolute"),
                    ("is_decoder", False, False),
                    ("add_cross_attention", False, False))
_OTHER_MODEL_TYPES = {
    "roberta": "RoBERTa numbers positions from padding id + 1 and has one "
               "token type",
    "albert": "ALBERT shares one layer's weights and factorizes embeddings",
    "distilbert": "DistilBERT has no token types and no pooler",
    "electra": "ELECTRA may project narrower embeddings up to its layers",
}


# ------------------------------------------------------------------ names


class _Rule(collections.namedtuple(
    "_Rule", "google hf transpose legacy google_re hf_re")):
  """One tensor's names on both sides; `legacy` rules are only read."""


def _name_pattern(template):
  """A regex of a name template, "{layer}" matching a layer number."""
  return re.compile("^" + re.escape(template).replace(
      re.escape("{layer}"), r"(?P<layer>\d+)") + "$")


def _tensor_rules():
  """`_MODULES` expanded to one `_Rule` per tensor."""
  pairs = []
  for google, hf, storage in _MODULES:
    if storage == _DENSE:
      pairs += [(google + "/kernel", hf + ".weight", True, False),
                (google + "/bias", hf + ".bias", False, False)]
    elif storage == _LAYER_NORM:
      pairs += [(google + "/gamma", hf + ".weight", False, False),
                (google + "/beta", hf + ".bias", False, False),
                # Names of transformers before version 4.
                (google + "/gamma", hf + ".gamma", False, True),
                (google + "/beta", hf + ".beta", False, True)]
    elif storage == _TABLE:
      pairs.append((google, hf + ".weight", False, False))
    else:
      pairs.append((google, hf, False, False))
  return tuple(_Rule(g, h, t, legacy, _name_pattern(g), _name_pattern(h))
               for g, h, t, legacy in pairs)


_RULES = _tensor_rules()


def _translate(name, to_hf):
  """The rule and other side's name of tensor `name`, or (None, None).

  Args:
    name: a Google name (to_hf) or a Hugging Face name without the "bert."
      prefix (not to_hf).
    to_hf: whether to name it on Hugging Face's side.
  """
  for rule in _RULES:
    if to_hf and rule.legacy:
      continue
    match = (rule.google_re if to_hf else rule.hf_re).match(name)
    if match:
      target = rule.hf if to_hf else rule.google
      return rule, target.format(**match.groupdict())
  return None, None


def google_to_hf_name(name, architecture=PLAIN_ENCODER):
  """The Hugging Face name of Google tensor `name` in `architecture`
  (None for a name outside the table)."""
  _, hf = _translate(name, True)
  if hf is not None and name.startswith("bert/") and (
      architecture != PLAIN_ENCODER):
    hf = _HF_ENCODER_PREFIX + hf
  return hf


def _strip_encoder_prefix(name):
  if name.startswith(_HF_ENCODER_PREFIX):
    return name[len(_HF_ENCODER_PREFIX):]
  return name


def is_training_state(name):
  """Whether Google tensor `name` is optimizer or step state."""
  return name in _TRAINING_STATE_NAMES or name.endswith(
      _TRAINING_STATE_SUFFIXES)


# ------------------------------------------------------------ activations


def hf_activation(google_act, where):
  """Hugging Face's hidden_act for bert_config.json's `google_act`."""
  for google, hf in _ACTIVATIONS:
    if google == str(google_act).lower():
      return hf
  raise cli.UserError(
      "%s: hidden_act %r has no Hugging Face counterpart; convertible: %s."
      % (where, google_act, ", ".join(sorted({g for g, _ in _ACTIVATIONS}))))


def google_activation(hf_act, where):
  """bert_config.json's hidden_act for Hugging Face's `hf_act`."""
  for google, hf in _ACTIVATIONS:
    if hf == hf_act:
      return google
  raise cli.UserError(
      "%s: hidden_act %r is not one this project computes; convertible: %s."
      % (where, hf_act, ", ".join(hf for _, hf in _ACTIVATIONS)))


# ---------------------------------------------------------------- configs


def _check_model_type(hf_config, where):
  model_type = hf_config.get("model_type", "bert")
  if model_type == "bert":
    return
  reason = _OTHER_MODEL_TYPES.get(model_type, "its architecture differs")
  raise cli.UserError(
      "%s: model_type %r is not supported (%s); only BERT models "
      '(model_type "bert") convert to Google\'s layout.' %
      (where, model_type, reason))


def bert_config_dict_from_hf(hf_config, where):
  """bert_config.json's fields for Hugging Face config `hf_config`.

  Raises:
    cli.UserError naming the field whose value Google's BERT cannot
    represent (another model_type, LayerNorm epsilon, position embeddings,
    a decoder, an activation it does not compute).
  """
  _check_model_type(hf_config, where)
  for field, required, default in _FIXED_HF_FIELDS:
    value = hf_config.get(field, default)
    if value != required:
      raise cli.UserError(
          "%s: %s is %r; Google's BERT has %r only, so this model cannot be "
          "converted." % (where, field, value, required))
  values = {field: hf_config.get(field, default)
            for field, default in _SHARED_CONFIG_FIELDS}
  values["hidden_act"] = google_activation(hf_config.get("hidden_act", "gelu"),
                                           where)
  try:
    modeling.BertConfig.from_dict(values)
  except ValueError as e:
    raise cli.UserError("%s: %s" % (where, e)) from None
  return dict(sorted(values.items()))


def hf_config_dict(bert_config, architecture, labels, task, pad_token_id,
                   problem_type=None):
  """Hugging Face's config.json for `bert_config` (a dict of
  bert_config.json) and the model's head.

  Args:
    architecture: one of `_ARCHITECTURES`' names.
    labels: the classifier's label list (strings; [None] for regression),
      or None.
    task: the fine-tuning task's name or None.
    pad_token_id: the id of [PAD].
    problem_type: a classifier's checkpoints/problem_types name; None:
      regression for [None], else single-label.
  """
  config = {"architectures": [architecture], "model_type": "bert"}
  config.update({field: bert_config[field]
                 for field, _ in _SHARED_CONFIG_FIELDS})
  config["hidden_act"] = hf_activation(bert_config.get("hidden_act", "gelu"),
                                       "bert_config.json")
  config.update({field: value for field, value, _ in _FIXED_HF_FIELDS})
  config["pad_token_id"] = pad_token_id
  if labels is not None:
    regression = list(labels) == [None]
    names = ["LABEL_0"] if regression else [str(label) for label in labels]
    config["id2label"] = {str(i): name for i, name in enumerate(names)}
    config["label2id"] = {name: i for i, name in enumerate(names)}
    if problem_type is None:
      problem_type = (problem_types.REGRESSION if regression else
                      problem_types.SINGLE_LABEL)
    config["problem_type"] = problem_types.HF_NAMES[problem_type]
  if task:
    config["finetuning_task"] = task
  return config


def hf_labels(hf_config, where):
  """The label list of a Hugging Face classifier config ([None] for a
  regression, which is what one label means there), or None when it names
  no labels."""
  id2label = hf_config.get("id2label")
  if not id2label:
    count = hf_config.get("num_labels")
    labels = None if count is None else ["LABEL_%d" % i for i in range(count)]
  else:
    try:
      ids = sorted(int(i) for i in id2label)
    except (TypeError, ValueError):
      ids = None
    if ids != list(range(len(id2label))):
      raise cli.UserError("%s: id2label's keys must be the ids 0 to %d, got "
                          "%s." % (where, len(id2label) - 1, sorted(id2label)))
    labels = [id2label[str(i)] for i in ids]
  if hf_config.get("problem_type") == "regression" or (
      labels is not None and len(labels) == 1):
    return [None]
  return labels


def hf_problem_type(hf_config, labels):
  """The checkpoints/problem_types name of a classifier's Hugging Face
  config: its "problem_type", else regression for one output ([None]
  labels) and single-label for more, as transformers decides."""
  by_hf_name = {hf: ours for ours, hf in problem_types.HF_NAMES.items()}
  if hf_config.get("problem_type") in by_hf_name:
    return by_hf_name[hf_config["problem_type"]]
  return (problem_types.REGRESSION if list(labels) == [None] else
          problem_types.SINGLE_LABEL)


def hf_tokenizer_config(do_lower_case, max_length):
  """tokenizer_config.json of BERT's WordPiece tokenizer."""
  return {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
          "do_basic_tokenize": True, "tokenize_chinese_chars": True,
          "strip_accents": None, "model_max_length": max_length,
          "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
          "cls_token": "[CLS]", "mask_token": "[MASK]"}


def check_declared_architecture(hf_config, architecture, config_path):
  """config.json's `architectures` must be convertible, and a task model's
  must be the one its weights make."""
  declared = hf_config.get("architectures") or []
  known = [name for name, _ in _ARCHITECTURES]
  for name in declared:
    if name not in known:
      raise cli.UserError(
          "%s: architectures names %s, which is not supported; convertible "
          "are %s." % (config_path, name, ", ".join(known)))
  tasks = set(_TASK_ARCHITECTURES)
  if declared and (tasks & set(declared) or architecture in tasks) and (
      architecture not in declared):
    raise cli.UserError(
        "%s names architectures %s, but the weights make a %s; pass the "
        "config.json saved with these weights." % (
            config_path, declared, architecture))


# -------------------------------------------------------- tensors and heads


def architecture_of(google_names, where):
  """The Hugging Face architecture of a Google checkpoint's tensor names.

  Raises:
    cli.UserError: a head is incomplete, or the heads make no architecture
      (e.g. a classifier beside a SQuAD head).
  """
  names = set(google_names)
  present = []
  for head, head_names in _HEADS:
    found = [name for name in head_names if name in names]
    if found and len(found) < len(head_names):
      missing = sorted(set(head_names) - names)[0]
      raise cli.UserError("%s has %s but not %s; its %s head is incomplete."
                          % (where, found[0], missing, head))
    if found:
      present.append(head)
  for architecture, heads in _ARCHITECTURES:
    if set(heads) == set(present):
      return architecture
  raise cli.UserError("%s holds the %s heads together; convert a checkpoint "
                      "of one task." % (where, " and ".join(present)))


def head_tensor_names(architecture):
  """The Google names of `architecture`'s head tensors."""
  heads = dict(_HEADS)
  return [name for head in dict(_ARCHITECTURES)[architecture]
          for name in heads[head]]


def expected_shapes(bert_config, architecture, num_labels=None):
  """{Google name: shape} of a model with `architecture`'s head."""
  h = bert_config.hidden_size
  shapes = dict(checkpoint_checks.bert_variable_shapes(bert_config))
  heads = dict(checkpoint_checks.pretraining_head_shapes(bert_config))
  heads.update({
      "output_weights": [num_labels, h],
      "output_bias": [num_labels],
      "cls/squad/output_weights": [2, h],
      "cls/squad/output_bias": [2],
      "cls/multiple_choice/output_weights": [1, h],
      "cls/multiple_choice/output_bias": [1],
      "cls/ner/output_weights": [num_labels, h],
      "cls/ner/output_bias": [num_labels],
  })
  shapes.update({name: heads[name]
                 for name in head_tensor_names(architecture)})
  return shapes


_POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


def check_tensors(tensors, bert_config, architecture, where, config_where,
                  num_labels=None, display=str):
  """Refuses a missing or extra tensor, or a shape the config does not make.

  The pooler may be missing (Hugging Face's masked-LM and question
  answering models have none); a warning says so.

  Args:
    tensors: {Google name: np.ndarray}.
    where, config_where: how to name the weights and the config.
    display: a Google name -> the name to show (the input's own).

  Raises:
    cli.UserError naming the first tensor that is missing, extra or
    misshapen.
  """
  expected = expected_shapes(bert_config, architecture, num_labels)
  sizes = "%s (%d layers, hidden size %d, %s)" % (
      config_where, bert_config.num_hidden_layers, bert_config.hidden_size,
      architecture)
  for name in sorted(tensors):
    if name not in expected:
      raise cli.UserError(
          "%s holds tensor %s, which is not part of the model of %s; pass "
          "the weights and the config of one BERT model." % (
              where, display(name), sizes))
  for name, shape in expected.items():
    if name not in tensors:
      if name in _POOLER:
        continue
      raise cli.UserError("%s lacks %s, which %s needs; pass the weights and "
                          "the config of one model." % (
                              where, display(name), sizes))
    if list(tensors[name].shape) != list(shape):
      raise cli.UserError(
          "%s holds %s of shape %s, but %s makes it %s; pass the weights and "
          "the config of one model." % (
              where, display(name), list(tensors[name].shape), config_where,
              list(shape)))
  if not all(name in tensors for name in _POOLER):
    logging.warning("%s has no pooler (bert/pooler/dense); a model that reads "
                    "the pooled output starts it from random values.", where)


def declared_head_from_hf(tensors, origins, hf_config):
  """Hugging Face's `classifier` read as the head of the architecture
  config.json declares, when that is one of `_HEADS_NAMED_CLASSIFIER`
  (BertForMultipleChoice, BertForTokenClassification).

  BertForSequenceClassification names its head alike; `hf_to_google_tensors`
  reads the names as the sequence classifier's, and the declared
  architecture tells the others apart.

  Args:
    tensors, origins: what `hf_to_google_tensors` returned.
    hf_config: the model's config.json.

  Returns:
    (tensors, origins), the classifier's renamed when the config declares
    one of those architectures, else as given.
  """
  declared = hf_config.get("architectures") or []
  for architecture, head in _HEADS_NAMED_CLASSIFIER:
    if architecture in declared:
      renames = dict(zip(dict(_HEADS)["classifier"], dict(_HEADS)[head]))
      return ({renames.get(name, name): value
               for name, value in tensors.items()},
              {renames.get(name, name): origin
               for name, origin in origins.items()})
  return tensors, origins


def classifier_outputs(tensors):
  """The classifier's output count (rows of output_weights, or of the token
  classifier's), or None."""
  weights = tensors.get("output_weights",
                        tensors.get(dict(_HEADS)["token classifier"][0]))
  return None if weights is None else int(weights.shape[0])


def google_to_hf_tensors(tensors, architecture):
  """Google tensors (training state already removed) renamed and laid out
  as Hugging Face's {name: C-contiguous np.ndarray}.

  Raises:
    cli.UserError naming a tensor outside the table.
  """
  out = {}
  for name, value in tensors.items():
    rule, _ = _translate(name, True)
    if rule is None:
      raise cli.UserError(
          "tensor %s is not part of a BERT model this converter knows "
          "(encoder, pooler, pretraining, classifier or SQuAD head)." % name)
    out[google_to_hf_name(name, architecture)] = np.ascontiguousarray(
        value.T if rule.transpose else value)
  return out


def hf_to_google_tensors(tensors, where):
  """Hugging Face tensors renamed and laid out as Google's; buffers and the
  tied copies of the masked LM's output layer are checked and dropped.

  Returns:
    ({Google name: float32 np.ndarray}, {Google name: Hugging Face name}).

  Raises:
    cli.UserError naming a tensor outside the table, a buffer or tied copy
    with an unexpected value, or a name given twice.
  """
  plain = {}
  for name, value in tensors.items():
    short = _strip_encoder_prefix(name)
    if short in plain:
      raise cli.UserError("%s holds %s both with and without the prefix "
                          "'bert.'." % (where, short))
    plain[short] = value
  _check_tied_copies(plain, where)
  out, origins = {}, {}
  prefixed = {_strip_encoder_prefix(name): name for name in tensors}
  for name, value in plain.items():
    if name in _HF_BUFFERS:
      _check_buffer(name, value, where)
      continue
    if name in (_HF_DECODER_WEIGHT, _HF_DECODER_BIAS):
      continue
    rule, google = _translate(name, False)
    if rule is None:
      raise cli.UserError(
          "%s holds tensor %s, which is not part of a BERT model this "
          "converter knows (encoder, pooler, pretraining, classifier or "
          "question answering head)." % (where, prefixed.get(name, name)))
    if google in out:
      raise cli.UserError("%s holds %s twice (new and legacy LayerNorm "
                          "names)." % (where, google))
    out[google] = _float32(value.T if rule.transpose else value, name, where)
    origins[google] = prefixed.get(name, name)
  return out, origins


def _float32(value, name, where):
  """`value` as C-contiguous float32; half precision widens exactly."""
  if value.dtype not in (np.float32, np.float16):
    raise cli.UserError("%s holds %s as %s; BERT's weights are floating "
                        "point (float32 or float16)." % (where, name,
                                                         value.dtype))
  return np.ascontiguousarray(value, dtype=np.float32)


def _check_buffer(name, value, where):
  """Position ids must be 0, 1, ... and token type ids 0."""
  flat = np.asarray(value).reshape(-1)
  want = (np.arange(flat.size) if name.endswith("position_ids") else
          np.zeros(flat.size))
  if not np.array_equal(flat, want):
    raise cli.UserError(
        "%s holds %s with values other than %s; this model numbers its "
        "inputs differently from BERT and cannot be converted." %
        (where, name, "0, 1, 2, ..." if name.endswith("position_ids") else
         "0"))


def _check_tied_copies(plain, where):
  """The masked LM's decoder must be the word embeddings and its bias the
  head's bias: Google's model has one tensor for each pair. A file with
  only the decoder's bias gets it as the head's bias."""
  decoder = plain.get(_HF_DECODER_WEIGHT)
  embeddings = plain.get("embeddings.word_embeddings.weight")
  if decoder is not None and (embeddings is None or
                              not np.array_equal(decoder, embeddings)):
    raise cli.UserError(
        "%s: %s differs from the word embeddings; Google's BERT ties the two, "
        "so this model cannot be converted." % (where, _HF_DECODER_WEIGHT))
  bias = plain.get(_HF_DECODER_BIAS)
  if bias is None:
    return
  if "cls.predictions.bias" not in plain:
    plain["cls.predictions.bias"] = bias
  elif not np.array_equal(bias, plain["cls.predictions.bias"]):
    raise cli.UserError("%s: %s differs from cls.predictions.bias; Google's "
                        "BERT has one output bias." % (where,
                                                       _HF_DECODER_BIAS))
