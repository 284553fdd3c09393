# coding=utf-8
"""extract_features.py on a corpus: a corpus job (corpus/shard_files.py)
whose shards are whole batches of input lines.

    shard k of n --work--> <output_prefix>-0000k-of-0000n.npz   (pooled)
                       or  <output_prefix>-0000k-of-0000n.jsonl (per token)

The input files are cut by prediction/input_records.py (format
feature_lines: "text_a" or "text_a ||| text_b" per line) into shards of
--batch_size * --batches_per_shard lines of one file, each remembering the
byte where it starts and the index of its first line among all lines of
all files, which becomes the first id of its output. Each worker process
builds the model once (`shared_model`) and runs a shard batch by batch
from the shard's start. A shard's batches are thus the batches the
one-process command makes of the same file, and every runner and worker
count writes the same bytes.

A pooled shard is a .npz file as prediction/sentence_embeddings.py
describes (embeddings, ids, layers); a per-token shard holds Google's JSON
lines, "linex_index" being the id.
"""

import collections
import os

from corpus import shard_files
from prediction import feature_extraction
from prediction import input_records
from prediction import sentence_embeddings
from startup import checks
from userio import output_files

JSONL_EXTENSION = ".jsonl"
# How every input file is read.
INPUT_SETTINGS = input_records.InputSettings(
    None, input_records.FEATURE_LINES, None, None, (None, None, None))

EmbeddingSettings = collections.namedtuple(
    "EmbeddingSettings",
    ["bert_config_file", "init_checkpoint", "vocab_file", "do_lower_case",
     "max_seq_length", "layer_indexes", "use_one_hot_embeddings", "batch_size",
     "pooling"])
EmbeddingSettings.__doc__ = """What a worker needs: the model's files
(config, checkpoint prefix, vocabulary and its casing), the positions per
example, the layer indexes (a tuple, in output order), the one-hot
embedding lookup, the examples per model call, and the pooling
(sentence_embeddings.NONE: Google's per-token JSON lines)."""

def output_prefix(pooling, output_file):
  """The prefix of the shard files: `output_file` (--output_file) without
  a final .npz or .jsonl, which must suit `pooling` (--pooling).

  Raises:
    cli.UserError: a .npz without a pooling, a .jsonl with one.
  """
  if output_file.endswith((sentence_embeddings.NPZ_SUFFIX, JSONL_EXTENSION)):
    sentence_embeddings.check_output(pooling, output_file)
    return os.path.splitext(output_file)[0]
  return output_file


# The models and tokenizers this process has built, by the settings they
# depend on: a worker builds them once for all its shards.
_MODELS = {}
_TOKENIZERS = {}


def shared_model(settings):
  """The feature_extraction.FeatureModel of `settings`, built once per
  process."""
  key = (settings.bert_config_file, settings.init_checkpoint,
         settings.max_seq_length, settings.layer_indexes,
         settings.use_one_hot_embeddings)
  if key not in _MODELS:
    _MODELS[key] = feature_extraction.FeatureModel(
        checks.load_bert_config(settings.bert_config_file),
        settings.init_checkpoint, settings.max_seq_length,
        list(settings.layer_indexes), settings.use_one_hot_embeddings)
  return _MODELS[key]


def shared_tokenizer(settings):
  """The tokenizer of `settings`' vocabulary and casing, made once per
  process."""
  key = (settings.vocab_file, settings.do_lower_case)
  if key not in _TOKENIZERS:
    _TOKENIZERS[key] = checks.make_tokenizer(*key)
  return _TOKENIZERS[key]


def shard_examples(shard):
  """The feature_extraction.InputExample of each line of `shard` (an
  input_records.Shard), ids counted from its first_record."""
  records = input_records.read_shard(shard, INPUT_SETTINGS)
  return [feature_extraction.InputExample(shard.first_record + i,
                                          *record.values)
          for i, record in enumerate(records)]


class EmbeddingJob(shard_files.ShardFilesJob):
  """Shard k's lines become <output_prefix>-0000k-of-0000n.npz (a pooling)
  or .jsonl (none), as corpus/shard_files.py writes and renames them."""

  name = "Extracting features"
  size_flag = "--batches_per_shard"

  def __init__(self, settings, output_prefix, num_shards):
    super().__init__(output_prefix, num_shards)
    self.settings = settings
    if settings.pooling == sentence_embeddings.NONE:
      self.extension, self.noun = JSONL_EXTENSION, "examples' features"
    else:
      self.extension = sentence_embeddings.NPZ_SUFFIX
      self.noun = "embeddings"

  def write_shard(self, spec, path):
    """Computes one shard's features and writes them to `path`."""
    settings = self.settings
    features = feature_extraction.convert_examples_to_features(
        shard_examples(spec), settings.max_seq_length,
        shared_tokenizer(settings))
    computed = shared_model(settings).layer_values(features,
                                                   settings.batch_size)
    if settings.pooling == sentence_embeddings.NONE:
      output_files.write_text(path, "".join(
          feature_extraction.json_line(feature, settings.layer_indexes,
                                       values)
          for feature, values in computed), flag="--output_file")
    else:
      ids, embeddings = sentence_embeddings.pool_all(
          ((feature.unique_id, values) for feature, values in computed),
          settings.pooling)
      sentence_embeddings.write_npz(path, ids, embeddings,
                                    settings.layer_indexes,
                                    flag="--output_file")
    return len(features)

