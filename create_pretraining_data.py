# coding=utf-8
"""Writes BERT's pre-training data (masked LM and next sentence) as TFRecords.
The default --mode=faithful writes exactly the records of Google's
create_pretraining_data.py; --mode=scalable builds different (equally
valid) records shard by shard in parallel, with memory bounded by
--shard_size_mb instead of by the corpus.

The input is plain text, one sentence per line, with an empty line between
two documents. Each output record is one tf.train.Example holding a pair of
text segments A and B as Google's script builds them:

  input_ids, input_mask, segment_ids        int64 [max_seq_length]
  masked_lm_positions, masked_lm_ids        int64 [max_predictions_per_seq]
  masked_lm_weights                         float [max_predictions_per_seq]
  next_sentence_labels                      int64 [1]  (1: B is random text)

The two modes:

  --mode=faithful (the default) is Google's algorithm with Google's random
    draws: for the same text, vocabulary, flags and seed it writes the very
    records Google's script writes under Python 3. Like Google's script it
    holds the whole corpus and all its instances in memory, so for big
    corpora split the text into several files and run once per file, or use
    the scalable mode.

  --mode=scalable cuts each input file into shards of about
    --shard_size_mb of text (byte ranges moved to the next document's end,
    decided from the files' sizes alone: corpus/text_files.py) and builds
    each shard on its own, so memory stays bounded by the shard size. Each
    shard is Google's algorithm on the shard's documents alone: the random
    next segments come from the same shard, each shard is shuffled on its
    own, and its seed comes from --random_seed and its number. Shard k of n
    is written to <output_file>-0000k-of-0000n; the records depend on the
    text, the flags, the seed and the shard size, never on what runs the
    shards: --runner=local (the default) forks --num_workers processes
    here; any other --runner is an Apache Beam runner, and the flags this
    script does not define are Beam's pipeline options
    (corpus/beam_pipeline.py; pip install -r requirements-beam.txt):

    python create_pretraining_data.py --input_file=corpus.txt \\
      --output_file=/tmp/tf_examples.tfrecord --vocab_file=$BERT/vocab.txt \\
      --do_lower_case=True --max_seq_length=128 \\
      --max_predictions_per_seq=20 --masked_lm_prob=0.15 \\
      --random_seed=12345 --dupe_factor=5

    python create_pretraining_data.py --mode=scalable ... \\
      --runner=DirectRunner --direct_num_workers=4 \\
      --direct_running_mode=multi_processing

  The faithful mode refuses --runner: it needs the whole corpus in one
  process.

Outputs are written under temporary names and renamed once complete.
Beside each, its sidecar <file>.meta.json records the vocabulary the text
was tokenized with (sha256 and size), the casing and the settings above
(corpus/record_sidecars.py); run_pretraining.py refuses records whose
vocabulary does not fit its model. A --do_lower_case that contradicts the
vocabulary's casing is refused before anything is read.
"""

import collections
import contextlib
import os
import random

from absl import flags
from absl import logging

from corpus import shard_job
from userio import cli
from startup import shared_flags

FLAGS = flags.FLAGS

MODES = ("faithful", "scalable")

# Instances logged in full at the start of writing, to check the input.
_NUM_LOGGED_INSTANCES = 5

# Seconds between two progress lines.
_PROGRESS_INTERVAL = 30.0
_MB = 1e6


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: Google's names and defaults, then ours.

  Called from `__main__` rather than at import, so that tests can parse
  their own flag sets.
  """
  fv = flag_values
  flags.DEFINE_string(
      "input_file", None,
      "Text file(s) to read: a comma-separated list of paths or glob "
      "patterns. One sentence per line, an empty line between documents.",
      flag_values=fv)
  flags.DEFINE_string(
      "output_file", None,
      "TFRecord file(s) to write: a comma-separated list; the records are "
      "dealt out to the files in turn. In --mode=scalable a single name, "
      "the prefix of the shard files.", flag_values=fv)
  # --vocab_file, --spm_model_file and --do_lower_case, as the other
  # scripts have them.
  shared_flags.define_vocab_flags(fv)
  flags.adopt_module_key_flags(shared_flags, flag_values=fv)
  flags.DEFINE_bool(
      "do_whole_word_mask", False,
      "Mask all pieces of a word together instead of each piece on its "
      "own (pieces after the first start with ## in WordPiece, and lack "
      "the word-start mark in SentencePiece).", flag_values=fv)
  flags.DEFINE_integer(
      "max_seq_length", 128,
      "Length of every record in tokens, [CLS] and two [SEP] included; "
      "shorter pairs are padded with 0.", flag_values=fv)
  flags.DEFINE_integer(
      "max_predictions_per_seq", 20,
      "Most masked tokens per record (the masked_lm_* features have this "
      "length). About max_seq_length * masked_lm_prob; pass the same value "
      "to run_pretraining.py.", flag_values=fv)
  flags.DEFINE_integer("random_seed", 12345,
                       "Seed of all random choices.", flag_values=fv)
  flags.DEFINE_integer(
      "dupe_factor", 10,
      "Passes over the corpus, each with new pairs and masks.",
      flag_values=fv)
  flags.DEFINE_float(
      "masked_lm_prob", 0.15,
      "Fraction of each record's tokens to mask (at least one, at most "
      "--max_predictions_per_seq).", flag_values=fv)
  flags.DEFINE_float(
      "short_seq_prob", 0.1,
      "Chance that a record aims at a random length shorter than "
      "max_seq_length, so the model also sees short inputs.",
      flag_values=fv)
  flags.DEFINE_enum(
      "mode", "faithful", MODES,
      "faithful: Google's exact records, the whole corpus in memory. "
      "scalable: different (equally valid) records built shard by shard "
      "in --num_workers processes with memory bounded by --shard_size_mb; "
      "random next segments come from the same shard.", flag_values=fv)
  flags.DEFINE_integer(
      "num_workers", None,
      "Processes building shards in --mode=scalable with --runner=local "
      "(default: one per CPU core); with a Beam --runner, Beam's option of "
      "that name (Dataflow's worker machines). The records do not depend "
      "on it.", flag_values=fv)
  flags.DEFINE_float(
      "shard_size_mb", 4.0,
      "Megabytes of input text per shard in --mode=scalable; each worker "
      "holds one shard, its token ids and its records (roughly 10 + 3 x "
      "dupe_factor times the shard's size). Changing it changes the "
      "records. A corpus of only a few shards per worker leaves workers "
      "idle at its end; a smaller value spreads it.",
      flag_values=fv)
  # --runner: local processes or an Apache Beam runner (--mode=scalable).
  shard_job.define_runner_flag(fv)
  flags.adopt_module_key_flags(shard_job, flag_values=fv)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from corpus import record_sidecars
from corpus import text_files
from corpus import beam_pipeline
from corpus import pretraining_instances
from corpus import shard_files
from engine import host_memory
from userio import output_files
from userio import progress
from startup import checks
import tokenization
from userio import verbosity
from userio import disk_space
from userio import sidecars
from runner import tfrecord_input
# pylint: enable=g-import-not-at-top,wrong-import-position

# Google's names of the algorithm's parts, reachable from this script as
# they were in Google's.
TrainingInstance = pretraining_instances.TrainingInstance
create_training_instances = pretraining_instances.create_training_instances
create_instances_from_document = (
    pretraining_instances.create_instances_from_document)
create_masked_lm_predictions = pretraining_instances.create_masked_lm_predictions
truncate_seq_pair = pretraining_instances.truncate_seq_pair


# ---------------------------------------------------------------------------
# Records.
# ---------------------------------------------------------------------------


def create_int_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def create_float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_example(instance, max_seq_length, max_predictions_per_seq):
  """The tf.train.Example of a TrainingInstance, padded with zeros."""
  num_tokens = len(instance.tokens)
  pad = [0] * (max_seq_length - num_tokens)
  num_masked = len(instance.masked_lm_positions)
  pad_masked = [0] * (max_predictions_per_seq - num_masked)
  features = collections.OrderedDict()
  features["input_ids"] = create_int_feature(instance.tokens + pad)
  features["input_mask"] = create_int_feature([1] * num_tokens + pad)
  features["segment_ids"] = create_int_feature(instance.segment_ids + pad)
  features["masked_lm_positions"] = create_int_feature(
      instance.masked_lm_positions + pad_masked)
  features["masked_lm_ids"] = create_int_feature(
      instance.masked_lm_labels + pad_masked)
  features["masked_lm_weights"] = create_float_feature(
      [1.0] * num_masked + [0.0] * len(pad_masked))
  features["next_sentence_labels"] = create_int_feature(
      [1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


def serialize_instance(instance, options):
  """The serialized tf.train.Example of an instance. Deterministic (the
  features sorted by name), so equal runs write equal bytes."""
  return instance_to_example(
      instance, options.max_seq_length,
      options.max_predictions_per_seq).SerializeToString(deterministic=True)


def _logging_serializer(options, tokenizer):
  """serialize_instance that also logs the first few instances' tokens
  (with -v 1, userio/verbosity.py)."""
  logged = []

  def make_record(instance):
    if len(logged) < _NUM_LOGGED_INSTANCES and verbosity.details():
      logged.append(instance)
      logging.info("Instance %d: %s | masked %s | random next: %s",
                   len(logged), " ".join(tokenizer.convert_ids_to_tokens(
                       instance.tokens)),
                   " ".join("%d:%s" % (p, t) for p, t in zip(
                       instance.masked_lm_positions,
                       tokenizer.convert_ids_to_tokens(
                           instance.masked_lm_labels))),
                   instance.is_random_next)
    return serialize_instance(instance, options)

  return make_record


def _records_bytes(records):
  """The bytes TFRecord files of the serialized `records` take."""
  return sum(len(record) + tfrecord_input.RECORD_FRAMING_BYTES for record in records)


def _writing_records(folder, what, size):
  """The disk_space.writing context of records written into `folder`."""
  return disk_space.writing(folder or ".", "pre-training records %s" % what,
                            size=size, flag="--output_file")


def write_example_files(records, paths, meter=None):
  """Deals the serialized records out to the files `paths` in turn (record
  i to file i mod n), each written under a temporary name and renamed once
  all are complete; a full disk ends in one line (disk_space.WriteFailed)
  and leaves none of them."""
  names = ", ".join(os.path.basename(path) for path in paths)
  with _writing_records(os.path.dirname(paths[0]), names,
                        _records_bytes(records)), (
                            contextlib.ExitStack()) as stack:
    writers = [stack.enter_context(tf.io.TFRecordWriter(
        stack.enter_context(output_files.replacing(path)))) for path in paths]
    for index, record in enumerate(records):
      writers[index % len(writers)].write(record)
      if meter is not None:
        meter.advance()


def _total_size(paths):
  return sum(tf.io.gfile.stat(p).length for p in paths)


def _reading_meter(what, input_files):
  """A progress meter of the input read, in MB."""
  return progress.Progress(what, _total_size(input_files), unit="MB",
                           interval=_PROGRESS_INTERVAL, scale=_MB)


# ---------------------------------------------------------------------------
# The faithful mode.
# ---------------------------------------------------------------------------


def run_faithful(settings, tokenizer, input_files, paths, description=None):
  """Google's pipeline on the whole corpus in memory; writes `paths`, then
  (with a `description`, record_sidecars.describe) their sidecars."""
  vocab = pretraining_instances.masking_vocab(tokenizer)
  meter = _reading_meter("Reading", input_files)
  all_documents = []
  bytes_done = 0
  for lines, bytes_read in text_files.read_documents(input_files):
    document = pretraining_instances.tokenize_document(lines, tokenizer)
    if document:
      all_documents.append(document)
    meter.advance(bytes_read - bytes_done, documents=len(all_documents))
    bytes_done = bytes_read
  meter.finish()
  _check_has_pairs(sum(len(d) >= 2 for d in all_documents), input_files)

  meter = progress.Progress(
      "Making instances (%d passes over %d documents)" % (
          settings.options.dupe_factor, len(all_documents)),
      settings.options.dupe_factor * len(all_documents), unit="documents",
      interval=_PROGRESS_INTERVAL)
  records = pretraining_instances.create_training_instances(
      all_documents, settings.options, vocab,
      random.Random(settings.random_seed),
      _logging_serializer(settings.options, tokenizer), meter)
  meter.finish()
  del all_documents
  meter = progress.Progress("Writing %s" % ", ".join(paths), len(records),
                            unit="records", interval=_PROGRESS_INTERVAL)
  for path in paths:
    sidecars.remove(path)
  write_example_files(records, paths, meter)
  meter.finish()
  if description is not None:
    for index, path in enumerate(paths):
      record_sidecars.write(path, description,
                                len(records[index::len(paths)]))
  logging.info("Wrote %d total instances", len(records))


def _check_has_pairs(num_multi_sentence_documents, input_files):
  if not num_multi_sentence_documents:
    raise cli.UserError(
        "No document in %s has two sentences, so there is no sentence pair "
        "to learn from; put one sentence per line and an empty line "
        "between documents." % ", ".join(input_files))


# ---------------------------------------------------------------------------
# The scalable mode.
# ---------------------------------------------------------------------------


class Settings(collections.namedtuple(
    "Settings", ["vocab_file", "spm_model_file", "do_lower_case",
                 "random_seed", "options"])):
  """What a run needs besides its files; picklable for the workers."""

  def tokenizer(self):
    return tokenization.FullTokenizer(
        vocab_file=self.vocab_file, do_lower_case=self.do_lower_case,
        spm_model_file=self.spm_model_file)


def shard_rng(random_seed, shard_index):
  """The random.Random of a shard: shard 0 draws as the faithful mode does,
  so a corpus that fits in one shard gets the faithful mode's records."""
  if shard_index == 0:
    return random.Random(random_seed)
  return random.Random("%d/%d" % (random_seed, shard_index))


def build_shard(spec, settings, temp_file):
  """Reads one shard (a corpus.text_files.ShardSpec), builds its instances
  with the shard's own random draws and writes them to `temp_file`
  (atomically, so a retried shard leaves the same file). Runs in a worker.

  Returns:
    dict of index (the shard's), documents, multi_sentence_documents,
    instances and bytes (of input): plain values, which every Beam runner
    passes between workers (a class of the script's __main__ could not be
    unpickled there).
  """
  tokenizer = settings.tokenizer()
  vocab = pretraining_instances.masking_vocab(tokenizer)
  documents_lines, num_bytes = text_files.read_shard(spec)
  all_documents = []
  for lines in documents_lines:
    document = pretraining_instances.tokenize_document(lines, tokenizer)
    if document:
      all_documents.append(document)
  del documents_lines
  records = pretraining_instances.create_training_instances(
      all_documents, settings.options, vocab,
      shard_rng(settings.random_seed, spec.index),
      lambda instance: serialize_instance(instance, settings.options))
  with output_files.replacing(temp_file, size=_records_bytes(records),
                              flag="--output_file") as temporary:
    with tf.io.TFRecordWriter(temporary) as writer:
      for record in records:
        writer.write(record)
  result = {"index": spec.index, "documents": len(all_documents),
            "multi_sentence_documents": sum(len(d) >= 2
                                            for d in all_documents),
            "instances": len(records), shard_job.BYTES: num_bytes}
  del all_documents, records
  # The next shard reuses little of this one's heap; give it back so a
  # worker's memory stays that of one shard.
  host_memory.release_freed_heap()
  return result


class PretrainingJob(shard_files.ShardFilesJob):
  """The scalable mode as a corpus job of one file per shard
  (corpus/shard_files.py): shard k is built into
  <output_prefix>-0000k-of-0000n.tmp; `finish` renames them all into place
  and writes their sidecars once every shard is built."""

  name = "Building shards"
  extension = ""
  noun = "total instances"

  def __init__(self, settings, input_files, output_prefix, num_shards,
               description=None):
    super().__init__(output_prefix, num_shards)
    self.settings = settings
    self.input_files = input_files
    self.description = description

  def work(self, spec):
    return build_shard(spec, self.settings, self.temp_path(spec.index))

  def tally(self, result):
    return {name: result[name]
            for name in ("documents", "instances", shard_job.BYTES)}

  def finish(self, accumulator):
    """Renames the shards into place and writes their sidecars.

    Raises:
      cli.UserError: no document has two sentences.
    """
    results = sorted(accumulator, key=lambda result: result["index"])
    _check_has_pairs(sum(r["multi_sentence_documents"] for r in results),
                     self.input_files)
    for result in results:
      path = self.final_path(result["index"])
      sidecars.remove(path)
      tf.io.gfile.rename(self.temp_path(result["index"]), path,
                         overwrite=True)
      if self.description is not None:
        record_sidecars.write(path, self.description, result["instances"])
    logging.info("Wrote %s", self.outputs(
        {"instances": sum(r["instances"] for r in results)}))
    _warn_of_other_shards(self.output_prefix, self.num_shards)

  def outputs(self, totals):
    return super().outputs({shard_files.INPUTS: totals["instances"]})


def run_scalable(settings, input_files, output_prefix, shard_bytes, runner,
                 num_workers=None, beam_options=None, description=None):
  """Builds the shards on `runner` (shard_job.LOCAL_RUNNER: `num_workers`
  forked processes; otherwise Beam with `beam_options`) and renames them to
  <output_prefix>-0000k-of-0000n once all are built, then (with a
  `description`, record_sidecars.describe) writes their sidecars. A shard
  file left by a failed run is removed."""
  specs = text_files.plan_shards(input_files, shard_bytes)
  logging.info(
      "Scalable mode: %d shards of %g MB on %s. The records differ from "
      "Google's script (random next segments come from the same shard); "
      "use --mode=faithful for Google's exact records.", len(specs),
      shard_bytes / _MB, runner if not shard_job.is_local(runner) else
      "%d local workers" % num_workers)
  job = PretrainingJob(settings, input_files, output_prefix, len(specs),
                       description)
  try:
    if shard_job.is_local(runner):
      shard_job.run_local(job, specs, num_workers, _total_size(input_files))
    else:
      beam_pipeline.run(job, specs, runner, beam_options,
                        _total_size(input_files))
  finally:
    job.remove_temporary_files(spec.index for spec in specs)


def _warn_of_other_shards(output_prefix, num_shards):
  """Warns of shard files of an earlier run with another shard count, which
  a pattern like <output_file>-* would also match."""
  others = [p for p in tf.io.gfile.glob(output_prefix + "-?????-of-?????")
            if not p.endswith("-of-%05d" % num_shards)]
  if others:
    logging.warning(
        "%d other files match %s-*-of-*, e.g. %s, from an earlier run with "
        "another shard count; delete them before pre-training on %s-*.",
        len(others), output_prefix, others[0], output_prefix)


# ---------------------------------------------------------------------------
# Flags and main.
# ---------------------------------------------------------------------------


def check_flags(flag_obj):
  """Refuses flag values that cannot work, before any slow step.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  for name in ("input_file", "output_file"):
    if not flag_obj[name].value:
      raise cli.UserError("--%s is required." % name)
  if not (flag_obj.vocab_file or flag_obj.spm_model_file):
    raise cli.UserError("--vocab_file is required (or --spm_model_file for "
                        "a SentencePiece vocabulary).")
  for name in ("vocab_file", "spm_model_file"):
    path = flag_obj[name].value
    if path and not tf.io.gfile.exists(path):
      raise cli.UserError("--%s=%s: file not found." % (name, path))
  if flag_obj.max_seq_length < 5:
    raise cli.UserError("--max_seq_length=%d: must be at least 5 ([CLS], "
                        "[SEP], [SEP] and a token of each segment)." %
                        flag_obj.max_seq_length)
  maskable = flag_obj.max_seq_length - 3
  if not 1 <= flag_obj.max_predictions_per_seq <= maskable:
    raise cli.UserError(
        "--max_predictions_per_seq=%d: must be between 1 and %d, the "
        "tokens a record of --max_seq_length=%d holds besides [CLS] and "
        "[SEP] (about max_seq_length * masked_lm_prob is usual)." %
        (flag_obj.max_predictions_per_seq, maskable, flag_obj.max_seq_length))
  if flag_obj.dupe_factor < 1:
    raise cli.UserError("--dupe_factor=%d: must be at least 1." %
                        flag_obj.dupe_factor)
  if not 0.0 < flag_obj.masked_lm_prob < 1.0:
    raise cli.UserError("--masked_lm_prob=%g: must be between 0 and 1 "
                        "(0.15 is BERT's)." % flag_obj.masked_lm_prob)
  if not 0.0 <= flag_obj.short_seq_prob <= 1.0:
    raise cli.UserError("--short_seq_prob=%g: must be between 0 and 1." %
                        flag_obj.short_seq_prob)
  _check_mode_flags(flag_obj)


def _check_mode_flags(flag_obj):
  if flag_obj.mode == "faithful":
    if flag_obj["runner"].present:
      raise cli.UserError(
          "--runner=%s: --mode=faithful runs in this one process (Google's "
          "records need the whole corpus in one place); pass "
          "--mode=scalable to run on a runner." % flag_obj.runner)
    for name in ("num_workers", "shard_size_mb"):
      if flag_obj[name].present:
        raise cli.UserError("--%s applies to --mode=scalable only." % name)
    return
  if flag_obj.num_workers is not None and flag_obj.num_workers < 1:
    raise cli.UserError("--num_workers=%d: must be at least 1." %
                        flag_obj.num_workers)
  if not flag_obj.shard_size_mb > 0:
    raise cli.UserError("--shard_size_mb=%g: must be positive." %
                        flag_obj.shard_size_mb)
  if "," in flag_obj.output_file:
    raise cli.UserError(
        "--output_file=%s: --mode=scalable takes one name, the prefix of "
        "its shard files." % flag_obj.output_file)


def settings_from_flags(flag_obj):
  return Settings(
      vocab_file=flag_obj.vocab_file,
      spm_model_file=flag_obj.spm_model_file,
      do_lower_case=flag_obj.do_lower_case,
      random_seed=flag_obj.random_seed,
      options=pretraining_instances.InstanceOptions(
          max_seq_length=flag_obj.max_seq_length,
          short_seq_prob=flag_obj.short_seq_prob,
          masked_lm_prob=flag_obj.masked_lm_prob,
          max_predictions_per_seq=flag_obj.max_predictions_per_seq,
          do_whole_word_mask=flag_obj.do_whole_word_mask,
          dupe_factor=flag_obj.dupe_factor))


def check_casing(flag_obj, tokenizer):
  """Refuses a --do_lower_case that contradicts the vocabulary's casing
  (tokenization.validate_case_matches_vocab): records made so would hold
  [UNK] for most capitalized words, or ids of pieces the model never sees
  again when it is fine-tuned. Google's script did not check.

  Raises:
    cli.UserError naming --do_lower_case and the value to pass.
  """
  tokenization.validate_case_matches_vocab(
      flag_obj.do_lower_case, tokenizer.vocab,
      "--spm_model_file=%s" % flag_obj.spm_model_file
      if flag_obj.spm_model_file else "--vocab_file=%s" % flag_obj.vocab_file)


def describe_records(flag_obj, tokenizer):
  """What the records of this run are made with, for their sidecars
  (corpus/record_sidecars.py)."""
  settings = {name: flag_obj[name].value for name in (
      "max_seq_length", "max_predictions_per_seq", "masked_lm_prob",
      "short_seq_prob", "do_whole_word_mask", "dupe_factor", "random_seed",
      "mode")}
  if flag_obj.mode == "scalable":
    settings["shard_size_mb"] = flag_obj.shard_size_mb
  return record_sidecars.describe(
      flag_obj.spm_model_file or flag_obj.vocab_file, len(tokenizer.vocab),
      flag_obj.do_lower_case, **settings)


def run(flag_obj, beam_args=()):
  """Writes the pre-training records the flags ask for.

  Args:
    flag_obj: the parsed flags.
    beam_args: the command line's flags that absl did not know, for Apache
      Beam's PipelineOptions (a Beam --runner only).

  Raises:
    cli.UserError for flags or input that cannot work.
  """
  # A misspelt flag first: it may be why another looks missing.
  beam_pipeline.check_local_args(flag_obj.runner, beam_args)
  check_flags(flag_obj)
  beam_options = None
  if not shard_job.is_local(flag_obj.runner):
    beam_options = beam_pipeline.pipeline_options(
        flag_obj.runner, beam_args, flag_obj.num_workers)
  tokenizer = checks.make_tokenizer(flag_obj.vocab_file,
                                     flag_obj.do_lower_case,
                                     flag_obj.spm_model_file)
  pretraining_instances.masking_vocab(tokenizer)  # Refuses a vocabulary without [CLS] etc.
  check_casing(flag_obj, tokenizer)
  input_files = text_files.resolve_input_files(flag_obj.input_file)
  text_files.text_bytes(input_files, "there are no documents to make "
                        "instances of")
  paths = flag_obj.output_file.split(",")
  settings = settings_from_flags(flag_obj)
  description = describe_records(flag_obj, tokenizer)
  with output_files.claim([("--output_file", path) for path in paths],
                          input_files):
    logging.info("Reading from %s", ", ".join(input_files))
    if flag_obj.mode == "faithful":
      run_faithful(settings, tokenizer, input_files, paths, description)
    else:
      run_scalable(settings, input_files, paths[0],
                   int(flag_obj.shard_size_mb * _MB), flag_obj.runner,
                   num_workers=(flag_obj.num_workers or
                                len(os.sched_getaffinity(0))),
                   beam_options=beam_options, description=description)


def main(argv):
  verbosity.start_logging()
  run(FLAGS, argv[1:])


if __name__ == "__main__":
  define_flags()
  # Flags this script does not define are Apache Beam's options.
  cli.run(main, known_only=True)
