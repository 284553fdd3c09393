# coding=utf-8
"""Extracts pre-computed feature vectors from BERT, as Google's script does.

Each line of --input_file is one example: "text_a" or "text_a ||| text_b".
For every example, one JSON line is written to --output_file:

  {"linex_index": 0, "features": [
     {"token": "[CLS]", "layers": [{"index": -1, "values": [...]}, ...]},
     ...]}

with the hidden states of the --layers (negative = counted from the top)
for each WordPiece token, rounded to 6 decimals. The key "linex_index" is
spelled as in the original, so existing readers keep working.

With --pooling=cls or mean, one vector per line (the [CLS] token's, or the
average over the line's tokens with [CLS] and [SEP]; the --layers
concatenated) goes to a NumPy .npz --output_file instead, with the lines'
indexes as ids; prediction/sentence_embeddings.py says what it holds.

The model runs in a plain `tf.compat.v1.Session`, batch by batch; the
output is written under a temporary name and renamed when complete.

    python extract_features.py --input_file=input.txt \
      --output_file=output.jsonl --vocab_file=$BERT/vocab.txt \
      --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --layers=-1,-2,-3,-4 \
      --max_seq_length=128 --batch_size=8
"""

import collections
import json
import os
import re

from absl import flags
from absl import logging

from userio import cli
from userio import utf8
from startup import shared_flags

FLAGS = flags.FLAGS

# Example lines logged in full, as the original does, to check the input.
_NUM_LOGGED_EXAMPLES = 5


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags (Google's names and defaults).

  Called from `__main__` rather than at import, so that importing this
  module next to run_classifier.py (which defines --vocab_file and the
  other model flags) does not define them twice.
  """
  fv = flag_values
  flags.DEFINE_string("input_file", None,
                      "Text file, one example per line: \"text_a\" or "
                      "\"text_a ||| text_b\".", flag_values=fv)
  flags.DEFINE_string("output_file", None,
                      "Where to write the JSON lines; with --pooling, a "
                      ".npz file.", flag_values=fv)
  flags.DEFINE_string("layers", "-1,-2,-3,-4",
                      "Comma-separated encoder layers to output; -1 is the "
                      "last. With --pooling, each layer's vector is "
                      "concatenated in this order.", flag_values=fv)
  flags.DEFINE_enum("pooling", "none", ["none", "cls", "mean"],
                    "none: every token's values as JSON lines (Google's "
                    "output); cls: the [CLS] token's vector; mean: the "
                    "average over the line's real tokens, [CLS] and [SEP] "
                    "included (sentence-transformers' mean pooling). cls "
                    "and mean write one float32 vector per line to a NumPy "
                    ".npz --output_file (arrays embeddings, ids = line "
                    "index, layers), read with numpy.load.", flag_values=fv)
  flags.DEFINE_string("bert_config_file", None,
                      "The bert_config.json of the pre-trained model.",
                      flag_values=fv)
  flags.DEFINE_integer("max_seq_length", 128,
                       "Longest input in WordPiece tokens (with [CLS] and "
                       "[SEP]); longer inputs are truncated.", flag_values=fv)
  flags.DEFINE_string("init_checkpoint", None,
                      "Checkpoint prefix of the pre-trained model, e.g. "
                      ".../bert_model.ckpt, or a Hugging Face model folder.",
                      flag_values=fv)
  flags.DEFINE_string("vocab_file", None,
                      "The vocab.txt the model was pre-trained with.",
                      flag_values=fv)
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input text; True for uncased models, "
                    "False for cased ones.", flag_values=fv)
  flags.DEFINE_integer("batch_size", 32, "Examples per batch.",
                       flag_values=fv)
  # Google's --use_tpu, --master and --num_tpu_cores (and the other TPU
  # flags of the training scripts), accepted as startup/checks.py says.
  shared_flags.define_tpu_flags(fv)
  flags.adopt_module_key_flags(shared_flags, flag_values=fv)
  flags.DEFINE_bool("use_one_hot_embeddings", False,
                    "Look up word embeddings with a one-hot matmul instead "
                    "of a gather (faster on TPUs, same values).",
                    flag_values=fv)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from checkpoints import checkpoint_checks
import modeling
from userio import output_files
from userio import progress
from startup import checks
from startup import run_setup
from prediction import sentence_embeddings
from tasks import text_pair
import tokenization
from userio import verbosity
from userio import disk_space
from userio import file_systems
# pylint: enable=g-import-not-at-top,wrong-import-position


class InputExample(object):
  """One line of the input file."""

  def __init__(self, unique_id, text_a, text_b):
    self.unique_id = unique_id
    self.text_a = text_a
    self.text_b = text_b


class InputFeatures(object):
  """The model inputs of one example, each a list of `seq_length` ints."""

  def __init__(self, unique_id, tokens, input_ids, input_mask,
               input_type_ids):
    self.unique_id = unique_id
    self.tokens = tokens
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.input_type_ids = input_type_ids


def read_examples(input_file):
  """Reads one `InputExample` per line of `input_file`.

  The id of an example is its line number counted from 0; a blank line is
  an example with empty text, so ids stay aligned with the lines.

  Raises:
    cli.UserError: `input_file` does not exist, is not UTF-8 or is empty.
  """
  if not input_file or not tf.io.gfile.exists(input_file):
    raise cli.UserError(
        "Input file %r not found; set --input_file to a text file with one "
        "example per line (\"text_a\" or \"text_a ||| text_b\")." %
        (input_file,))
  checks.check_not_folder("input_file", input_file)
  with tf.io.gfile.GFile(input_file, "rb") as reader:
    text = utf8.decode(reader.read(), input_file,
                       fix="Save the file as UTF-8 or repair that line.")
  if not text.strip():
    raise cli.UserError("--input_file=%s holds no text; write one example "
                        "per line (\"text_a\" or \"text_a ||| text_b\")."
                        % input_file)
  # Lines as reading the file line by line gives them: split at "\n" only.
  lines = text.split("\n")
  if not lines[-1]:
    lines.pop()
  examples = []
  for unique_id, line in enumerate(lines):
    line = line.strip()
    match = re.match(r"^(.*) \|\|\| (.*)$", line)
    if match is None:
      text_a, text_b = line, None
    else:
      text_a, text_b = match.group(1), match.group(2)
    examples.append(InputExample(unique_id, text_a, text_b))
  return examples


def convert_examples_to_features(examples, seq_length, tokenizer):
  """Tokenizes `examples` into `InputFeatures` padded to `seq_length`.

  Layout: [CLS] text_a [SEP] (type 0), then text_b [SEP] (type 1) if there
  is a text_b; the longer text loses tokens at its end until all fits.
  """
  features = []
  for example in examples:
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
    tokens, input_type_ids = text_pair.layout(tokens_a, tokens_b, seq_length)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (seq_length - len(input_ids))

    feature = InputFeatures(
        unique_id=example.unique_id,
        tokens=tokens,
        input_ids=input_ids + padding,
        input_mask=input_mask + padding,
        input_type_ids=input_type_ids + padding)
    if example.unique_id < _NUM_LOGGED_EXAMPLES and verbosity.details():
      _log_feature(feature)
    features.append(feature)
  return features


def _log_feature(feature):
  """Logs the inputs of one example, to check the input by eye."""
  logging.info("*** Example ***")
  logging.info("unique_id: %s", feature.unique_id)
  logging.info("tokens: %s", " ".join(
      tokenization.printable_text(t) for t in feature.tokens))
  logging.info("input_ids: %s", " ".join(map(str, feature.input_ids)))
  logging.info("input_mask: %s", " ".join(map(str, feature.input_mask)))
  logging.info("input_type_ids: %s",
               " ".join(map(str, feature.input_type_ids)))


def parse_layers(layers, num_hidden_layers):
  """Parses --layers ("-1,-2") into ints, each a valid encoder layer.

  Returns:
    list of ints in [-num_hidden_layers, num_hidden_layers - 1].
  Raises:
    cli.UserError: not a list of integers, or an index out of range.
  """
  try:
    indexes = [int(x) for x in layers.split(",")]
  except ValueError as e:
    raise cli.UserError(
        "--layers=%s: expected comma-separated integers such as "
        "-1,-2,-3,-4." % layers) from e
  for index in indexes:
    if not -num_hidden_layers <= index < num_hidden_layers:
      raise cli.UserError(
          "--layers=%s: layer %d is out of range; the model has %d layers, "
          "so use indexes from %d to %d (-1 is the last layer)." %
          (layers, index, num_hidden_layers, -num_hidden_layers,
           num_hidden_layers - 1))
  return indexes


def _build_model(bert_config, seq_length, layer_indexes, init_checkpoint,
                 use_one_hot_embeddings):
  """Builds the model in the current graph, initialized from the checkpoint.

  Returns:
    (inputs, outputs): inputs maps "input_ids", "input_mask" and
    "input_type_ids" to int32 placeholders [batch_size, seq_length];
    outputs is a list of float32 [batch_size, seq_length, hidden_size], one
    per entry of `layer_indexes`.
  Raises:
    cli.UserError: the checkpoint lacks some of the model's variables.
  """
  inputs = {
      name: tf.compat.v1.placeholder(tf.int32, [None, seq_length], name=name)
      for name in ("input_ids", "input_mask", "input_type_ids")
  }
  # Only the real tokens' values are written, and those skip_padding leaves
  # unchanged. Its plain Session compiles nothing with XLA.
  model = modeling.BertModel(
      config=bert_config,
      is_training=False,
      input_ids=inputs["input_ids"],
      input_mask=inputs["input_mask"],
      token_type_ids=inputs["input_type_ids"],
      use_one_hot_embeddings=use_one_hot_embeddings,
      skip_padding=run_setup.skip_padding(True, use_xla=False))
  tvars = tf.compat.v1.trainable_variables()
  assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
      tvars, init_checkpoint)
  # Features from randomly initialized weights would be meaningless.
  missing = [v.name for v in tvars if v.name not in initialized]
  if missing:
    raise cli.UserError(
        "--init_checkpoint=%s lacks %d of the model's variables (e.g. %s); "
        "check that --bert_config_file belongs to this checkpoint." %
        (init_checkpoint, len(missing), missing[0]))
  tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
  all_layers = model.get_all_encoder_layers()
  outputs = [tf.cast(all_layers[i], tf.float32) for i in layer_indexes]
  return inputs, outputs


def compute_layer_values(features, bert_config, init_checkpoint,
                         layer_indexes, batch_size,
                         use_one_hot_embeddings=False):
  """Runs the model over `features`, `batch_size` at a time.

  Yields:
    (feature, values) per feature, in order; values is a list (one per
    entry of `layer_indexes`) of float32 arrays [len(feature.tokens),
    hidden_size] (padding positions left out).
  """
  if not features:
    return
  seq_length = len(features[0].input_ids)
  with tf.Graph().as_default():
    inputs, outputs = _build_model(bert_config, seq_length, layer_indexes,
                                   init_checkpoint, use_one_hot_embeddings)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      for start in range(0, len(features), batch_size):
        batch = features[start:start + batch_size]
        feed = {inputs[name]: [getattr(f, name) for f in batch]
                for name in inputs}
        layer_values = session.run(outputs, feed_dict=feed)
        for b, feature in enumerate(batch):
          num_tokens = len(feature.tokens)
          yield feature, [v[b, :num_tokens] for v in layer_values]


def feature_to_json(feature, layer_indexes, values):
  """The output record of one example, in the original's layout."""
  tokens = []
  for i, token in enumerate(feature.tokens):
    layers = []
    for layer_index, layer_values in zip(layer_indexes, values):
      layers.append(collections.OrderedDict([
          ("index", layer_index),
          ("values", [round(float(x), 6) for x in layer_values[i]]),
      ]))
    tokens.append(collections.OrderedDict([
        ("token", token), ("layers", layers)]))
  return collections.OrderedDict([
      ("linex_index", feature.unique_id), ("features", tokens)])


def _check_flags(flag_obj, shared):
  """Refuses missing or unsupported flags before any slow work."""
  checks.check_tpu_flags(shared.use_tpu, shared.tpu_name,
                          shared.changed_compatibility_flags)
  _check_required(flag_obj, ("input_file", "output_file", "init_checkpoint"))
  sentence_embeddings.check_output(flag_obj.pooling, flag_obj.output_file)
  if flag_obj.batch_size < 1:
    raise cli.UserError("--batch_size=%d: must be at least 1." %
                        flag_obj.batch_size)
  tokenization.validate_case_matches_checkpoint(shared.do_lower_case,
                                                shared.init_checkpoint)


def _check_required(values, names):
  """Each flag of `names` has a value in `values` (the flags, or the
  SharedFlags after a Hugging Face --init_checkpoint supplied some)."""
  for name in names:
    if not getattr(values, name):
      raise cli.UserError("--%s is required." % name)


def _check_max_seq_length(max_seq_length, bert_config):
  """[CLS] x [SEP] needs its positions; the model has only so many."""
  shortest = text_pair.MIN_SEQ_LENGTH_ONE_TEXT
  if not shortest <= max_seq_length <= bert_config.max_position_embeddings:
    raise cli.UserError(
        "--max_seq_length=%d: must be between %d and the model's "
        "max_position_embeddings (%d in --bert_config_file)." %
        (max_seq_length, shortest, bert_config.max_position_embeddings))


def run(flag_obj):
  """Extracts the features the flags ask for and writes --output_file.

  Everything that can be checked is checked first: flags, config,
  vocabulary (size and casing), input file, checkpoint (complete and of
  the config's shapes) and the output file's folder.
  """
  shared = shared_flags.read(flag_obj)
  _check_flags(flag_obj, shared)
  output_folder = os.path.dirname(file_systems.absolute(flag_obj.output_file))
  shared = run_setup.use_hf_init_checkpoint(shared, output_folder)
  # A Hugging Face folder as --init_checkpoint supplies these two.
  _check_required(shared, ("vocab_file", "bert_config_file"))
  bert_config = checks.load_bert_config(shared.bert_config_file)
  _check_max_seq_length(shared.max_seq_length, bert_config)
  layer_indexes = parse_layers(flag_obj.layers,
                               bert_config.num_hidden_layers)
  tokenizer = checks.make_tokenizer(shared.vocab_file, shared.do_lower_case)
  checks.check_vocab(tokenizer, bert_config, vocab_file=shared.vocab_file,
                      spm_model_file=None, do_lower_case=shared.do_lower_case,
                      bert_config_file=shared.bert_config_file)
  examples = read_examples(flag_obj.input_file)
  checkpoint_checks.check_init_checkpoint(
      shared.init_checkpoint, bert_config, shared.bert_config_file)
  checks.prepare_output_dir(
      output_folder, "the folder of --output_file=%s" % flag_obj.output_file)
  features = convert_examples_to_features(
      examples, shared.max_seq_length, tokenizer)

  meter = progress.Progress("Writing features to %s" % flag_obj.output_file,
                            len(features))
  computed = compute_layer_values(
      features, bert_config, shared.init_checkpoint, layer_indexes,
      flag_obj.batch_size, flag_obj.use_one_hot_embeddings)
  if flag_obj.pooling == sentence_embeddings.NONE:
    _write_lines(flag_obj.output_file, (
        json.dumps(feature_to_json(feature, layer_indexes, values)) + "\n"
        for feature, values in computed), meter)
  else:
    _write_embeddings(flag_obj.output_file, flag_obj.pooling, layer_indexes,
                      computed, meter)
  meter.finish()


def _write_lines(path, lines, meter):
  """Writes the strings `lines` to --output_file `path`, one `meter` step
  each.

  Written under a temporary name, so a killed run leaves no partial file
  that looks complete; a full disk names about the size of the whole file
  (the lines written so far, extrapolated over `meter`'s total).
  """
  written = 0

  def estimate():
    return disk_space.extrapolated(written, meter.done, meter.total)

  with output_files.replacing(path, flag="--output_file",
                              size=estimate) as temporary:
    with tf.io.gfile.GFile(temporary, "w") as writer:
      for line in lines:
        writer.write(line)
        written += len(line.encode("utf-8"))
        meter.advance()


def _write_embeddings(path, pooling, layer_indexes, computed, meter):
  """Pools each (feature, values) of `computed` (as compute_layer_values
  yields them) by `pooling`, one `meter` step each, and writes the vectors
  with the features' ids to the .npz file `path`."""
  ids, embeddings = sentence_embeddings.pool_all(
      ((feature.unique_id, values) for feature, values in computed),
      pooling, meter.advance)
  sentence_embeddings.write_npz(path, ids, embeddings, layer_indexes,
                                flag="--output_file")


def main(_):
  verbosity.start_logging()
  run(FLAGS)


if __name__ == "__main__":
  define_flags()
  # --vocab_file and --bert_config_file are checked in `run`: a Hugging Face
  # folder as --init_checkpoint supplies them.
  for required in ("input_file", "output_file", "init_checkpoint"):
    flags.mark_flag_as_required(required)
  cli.run(main)
