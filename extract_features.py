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

Any of --runner, --num_workers or --batches_per_shard makes the run a
corpus job: --input_file then names files (comma-separated paths or globs,
local or remote), cut into shards of --batches_per_shard batches of one
file, and --output_file is the prefix of one file per shard,
<output_file>-0000k-of-0000n.npz with a pooling (else .jsonl; a final .npz
or .jsonl of --output_file is dropped from the prefix). The ids continue
from file to file and shard to shard. --runner=local (the default) runs the
shards in --num_workers processes here, each building the model once; any
other --runner is an Apache Beam runner, which takes the flags this script
does not define as Beam's options:

    python extract_features.py ... --pooling=mean --input_file='text/*.txt' \
      --output_file=/tmp/vectors/corpus --num_workers=2
    python extract_features.py ... --runner=DirectRunner \
      --direct_running_mode=multi_processing --direct_num_workers=2

The files are the same bytes on every runner and with any number of
workers, and hold what the one-process command writes for the same file
(docs/api.md).

The examples, the model and Google's JSON record live in
prediction/feature_extraction.py, the corpus job in
prediction/embedding_jobs.py; this file is the command's flags and main.

    python extract_features.py --input_file=input.txt \
      --output_file=output.jsonl --vocab_file=$BERT/vocab.txt \
      --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --layers=-1,-2,-3,-4 \
      --max_seq_length=128 --batch_size=8
"""

import os

from absl import flags
from absl import logging

from corpus import shard_job
from userio import cli
from userio import utf8
from startup import shared_flags

FLAGS = flags.FLAGS

# The flags that make the run a corpus job.
CORPUS_FLAGS = ("runner", "num_workers", "batches_per_shard")


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags (Google's names and defaults).

  Called from `__main__` rather than at import, so that importing this
  module next to run_classifier.py (which defines --vocab_file and the
  other model flags) does not define them twice.
  """
  fv = flag_values
  flags.DEFINE_string("input_file", None,
                      "Text file, one example per line: \"text_a\" or "
                      "\"text_a ||| text_b\". In a corpus job (--runner, "
                      "--num_workers or --batches_per_shard given): "
                      "comma-separated paths or globs.", flag_values=fv)
  flags.DEFINE_string("output_file", None,
                      "Where to write the JSON lines; with --pooling, a "
                      ".npz file. In a corpus job, the prefix of the shard "
                      "files <output_file>-0000k-of-0000n.npz (.jsonl "
                      "without a pooling).", flag_values=fv)
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
  flags.DEFINE_integer(
      "batches_per_shard", 100,
      "Corpus job: batches of --batch_size lines per shard, the unit of "
      "work of a worker and of an output file. Giving it makes the run a "
      "corpus job.", flag_values=fv)
  flags.DEFINE_integer(
      "num_workers", None,
      "Corpus job: processes computing shards with --runner=local "
      "(default: one per CPU core; each builds the model); with a Beam "
      "--runner, Beam's option of that name. Giving it makes the run a "
      "corpus job.", flag_values=fv)
  # --runner: local processes or an Apache Beam runner; giving it makes
  # the run a corpus job.
  shard_job.define_runner_flag(fv)
  flags.adopt_module_key_flags(shard_job, flag_values=fv)
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
from userio import output_files
from userio import progress
from startup import checks
from startup import run_setup
from corpus import beam_pipeline
from corpus import shard_files
from corpus import workers
from prediction import embedding_jobs
from prediction import feature_extraction
from prediction import input_lines
from prediction import input_records
from prediction import sentence_embeddings
from tasks import text_pair
import tokenization
from userio import verbosity
from userio import disk_space
from userio import file_systems
# pylint: enable=g-import-not-at-top,wrong-import-position


def read_examples(input_file):
  """Reads one feature_extraction.InputExample per line of `input_file`.

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
  return [feature_extraction.InputExample(
      unique_id, *input_lines.parse_feature_line(line))
          for unique_id, line in enumerate(lines)]


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


def is_corpus_job(flag_obj):
  """Whether the command line gives a flag of CORPUS_FLAGS."""
  return any(flag_obj[name].present for name in CORPUS_FLAGS)


def _check_flags(flag_obj, shared):
  """Refuses missing or unsupported flags before any slow work."""
  checks.check_tpu_flags(shared.use_tpu, shared.tpu_name,
                          shared.changed_compatibility_flags)
  _check_required(flag_obj, ("input_file", "output_file", "init_checkpoint"))
  if is_corpus_job(flag_obj):
    embedding_jobs.output_prefix(flag_obj.pooling, flag_obj.output_file)
  else:
    sentence_embeddings.check_output(flag_obj.pooling, flag_obj.output_file)
  for name in ("batch_size", "batches_per_shard", "num_workers"):
    value = flag_obj[name].value
    if value is not None and value < 1:
      raise cli.UserError("--%s=%d: must be at least 1." % (name, value))
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


def run(flag_obj, beam_args=()):
  """Extracts the features the flags ask for and writes --output_file (in
  a corpus job, its shard files).

  Everything that can be checked is checked first: flags (and, with a Beam
  --runner, `beam_args`, the command line's flags absl did not know),
  config, vocabulary (size and casing), input files, checkpoint (complete
  and of the config's shapes) and the output file's folder.
  """
  beam_pipeline.check_local_args(flag_obj.runner, beam_args)
  shared = shared_flags.read(flag_obj)
  _check_flags(flag_obj, shared)
  beam_options = None
  if not shard_job.is_local(flag_obj.runner):
    beam_options = beam_pipeline.pipeline_options(
        flag_obj.runner, beam_args, flag_obj.num_workers)
  output_folder = os.path.dirname(file_systems.absolute(flag_obj.output_file))
  if is_corpus_job(flag_obj):
    # The conversion of a Hugging Face folder runs TensorFlow, after which
    # the local runner's forked workers would hang: it runs in a child.
    shared = workers.run_in_child(run_setup.use_hf_init_checkpoint, shared,
                                  output_folder)
  else:
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
  if is_corpus_job(flag_obj):
    _run_corpus_job(flag_obj, shared, bert_config, layer_indexes,
                    beam_options)
  else:
    _run_one_process(flag_obj, shared, bert_config, layer_indexes,
                     tokenizer)


def _run_one_process(flag_obj, shared, bert_config, layer_indexes,
                     tokenizer):
  """Google's command: --input_file's lines in this process, batch after
  batch, into the one --output_file."""
  examples = read_examples(flag_obj.input_file)
  checkpoint_checks.check_init_checkpoint(
      shared.init_checkpoint, bert_config, shared.bert_config_file)
  _prepare_output_folder(flag_obj.output_file)
  features = feature_extraction.convert_examples_to_features(
      examples, shared.max_seq_length, tokenizer)

  meter = progress.Progress("Writing features to %s" % flag_obj.output_file,
                            len(features))
  computed = feature_extraction.compute_layer_values(
      features, bert_config, shared.init_checkpoint, layer_indexes,
      flag_obj.batch_size, flag_obj.use_one_hot_embeddings)
  if flag_obj.pooling == sentence_embeddings.NONE:
    _write_lines(flag_obj.output_file, (
        feature_extraction.json_line(feature, layer_indexes, values)
        for feature, values in computed), meter)
  else:
    _write_embeddings(flag_obj.output_file, flag_obj.pooling, layer_indexes,
                      computed, meter)
  meter.finish()


def _prepare_output_folder(output_file):
  checks.prepare_output_dir(
      os.path.dirname(file_systems.absolute(output_file)),
      "the folder of --output_file=%s" % output_file)


def _run_corpus_job(flag_obj, shared, bert_config, layer_indexes,
                    beam_options):
  """The corpus job: --input_file's files cut into shards of
  --batches_per_shard batches, computed on --runner into the shard files
  of the --output_file prefix."""
  prefix = embedding_jobs.output_prefix(flag_obj.pooling,
                                        flag_obj.output_file)
  paths = input_records.resolve_inputs(flag_obj.input_file,
                                       flag="--input_file")
  shards, total = input_records.plan(
      paths, embedding_jobs.INPUT_SETTINGS,
      flag_obj.batch_size * flag_obj.batches_per_shard)
  if not total:
    raise cli.UserError("--input_file=%s holds no text; write one example "
                        "per line (\"text_a\" or \"text_a ||| text_b\")."
                        % flag_obj.input_file)
  checkpoint_checks.check_init_checkpoint(
      shared.init_checkpoint, bert_config, shared.bert_config_file)
  _prepare_output_folder(flag_obj.output_file)
  settings = embedding_jobs.EmbeddingSettings(
      shared.bert_config_file, shared.init_checkpoint, shared.vocab_file,
      shared.do_lower_case, shared.max_seq_length, tuple(layer_indexes),
      flag_obj.use_one_hot_embeddings, flag_obj.batch_size, flag_obj.pooling)
  job = embedding_jobs.EmbeddingJob(settings, prefix, len(shards))
  num_workers = flag_obj.num_workers or len(os.sched_getaffinity(0))
  with output_files.claim([("--output_file", prefix)], paths):
    logging.info("Extracting features of %d lines in %d shards on %s.",
                 total, len(shards),
                 "%d local workers" % num_workers
                 if shard_job.is_local(flag_obj.runner) else flag_obj.runner)
    shard_files.run(job, shards, flag_obj.runner, num_workers, beam_options)


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


def main(argv):
  verbosity.start_logging()
  run(FLAGS, argv[1:])


if __name__ == "__main__":
  define_flags()
  # --vocab_file and --bert_config_file are checked in `run`: a Hugging Face
  # folder as --init_checkpoint supplies them.
  for required in ("input_file", "output_file", "init_checkpoint"):
    flags.mark_flag_as_required(required)
  # Flags this script does not define are Apache Beam's options.
  cli.run(main, known_only=True)
