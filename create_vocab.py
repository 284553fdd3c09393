# coding=utf-8
"""Learns a WordPiece vocabulary (vocab.txt) from a text corpus.

The corpus is the input of create_pretraining_data.py: UTF-8 text, one
sentence per line, empty lines between documents (ignored here). Words are
what tokenization.BasicTokenizer makes of the text with --do_lower_case,
so every word of the corpus tokenizes with tokenization.FullTokenizer and
the new vocab.txt without [UNK], except words holding a character left out
by --min_char_count or --max_unique_chars (and words over 200 characters,
which the tokenizer never splits).

The algorithm is TensorFlow Text's WordPiece learner (a binary search over
a count threshold; vocabulary/wordpiece_learner.py says how it works). The
file has Google's layout and exactly --vocab_size lines: [PAD]=0,
[unused0..98], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103, the other
[unusedN] slots, the characters, then the pieces by decreasing count
(vocabulary/layout.py; other --num_unused counts are described there). The
same input and flags always give the same file; nothing is random.

    python create_vocab.py --input_file='corpus/*.txt' \\
      --output_file=vocab.txt --vocab_size=30522 --do_lower_case=True

The words are counted shard by shard (the shards of
create_pretraining_data.py --mode=scalable), in --num_workers processes
here, or on an Apache Beam runner with --runner: the flags this script does
not define are Beam's pipeline options, e.g.

    python create_vocab.py --input_file='gs://bucket/corpus/*.txt' \\
      --output_file=gs://bucket/vocab.txt --runner=DataflowRunner \\
      --project=my-project --region=us-central1 \\
      --temp_location=gs://bucket/tmp

The vocabulary is the same file on every runner. Outputs are written under
temporary names and renamed once complete.
"""

import os

from absl import flags

from corpus import shard_job
from userio import cli
from vocabulary import layout
from vocabulary import wordpiece_learner

FLAGS = flags.FLAGS

_MB = 1e6
# The longest word tokenization.WordpieceTokenizer splits; a longer piece
# could never be used.
_LONGEST_WORD = 200


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags (called from `__main__`, so that tests can
  parse their own flag sets)."""
  fv = flag_values
  flags.DEFINE_string(
      "input_file", None,
      "Text file(s) to learn from: a comma-separated list of paths or glob "
      "patterns, as create_pretraining_data.py takes them.", flag_values=fv)
  flags.DEFINE_string(
      "output_file", None, "The vocab.txt to write.", flag_values=fv)
  flags.DEFINE_integer(
      "vocab_size", 30522,
      "Lines of vocab.txt, special tokens and [unusedN] slots included; "
      "the vocab_size of the model's bert_config.json.", flag_values=fv)
  flags.DEFINE_bool(
      "do_lower_case", True,
      "Lower-case the text (and strip accents) before learning, for an "
      "uncased model; pass the same value to the other scripts.",
      flag_values=fv)
  flags.DEFINE_integer(
      "num_unused", layout.GOOGLE_NUM_UNUSED,
      "[unusedN] slots kept for tokens added later. 994 is Google's "
      "uncased layout; from 99 on, [UNK], [CLS], [SEP] and [MASK] keep "
      "ids 100-103.", flag_values=fv)
  flags.DEFINE_integer(
      "min_char_count", 1,
      "Characters seen fewer times in the corpus are left out of the "
      "vocabulary; words holding one become [UNK].", flag_values=fv)
  flags.DEFINE_integer(
      "max_unique_chars", 1000,
      "The most characters in the vocabulary (the most frequent); words "
      "holding another become [UNK].", flag_values=fv)
  flags.DEFINE_integer(
      "num_workers", None,
      "Processes counting words with --runner=local (default: one per CPU "
      "core); with a Beam --runner, Beam's option of that name (Dataflow's "
      "worker machines).", flag_values=fv)
  flags.DEFINE_float(
      "shard_size_mb", 4.0,
      "Megabytes of text per counting shard, as create_pretraining_data.py "
      "--mode=scalable cuts the input; each worker holds one or two.",
      flag_values=fv)
  flags.DEFINE_string(
      "counts_output", None,
      "Also write the word counts to this file, to learn other "
      "vocabularies from later with --counts_input without counting "
      "again.", flag_values=fv)
  flags.DEFINE_string(
      "counts_input", None,
      "Learn from these count files (comma-separated, written by "
      "--counts_output) instead of --input_file; their counts are added "
      "up. Runs here, without --runner.", flag_values=fv)
  # --runner: local processes or an Apache Beam runner.
  shard_job.define_runner_flag(fv)
  flags.adopt_module_key_flags(shard_job, flag_values=fv)
  flags.DEFINE_enum(
      "prefix_discount", "all", wordpiece_learner.PREFIX_DISCOUNTS,
      "all: as TensorFlow Text's learner (bert_vocab_from_dataset) does, "
      "every candidate piece's count is taken from its prefixes; kept: only "
      "kept pieces' counts, as TensorFlow Text's guide describes it.",
      flag_values=fv)
  flags.DEFINE_integer(
      "num_iterations", 4, "Learning rounds per count threshold.",
      flag_values=fv)
  flags.DEFINE_integer(
      "max_token_length", 50,
      "Longer words are not learned from (they still tokenize).",
      flag_values=fv)
  flags.DEFINE_integer(
      "max_input_words", 5000000,
      "Learn from at most this many distinct words, the most frequent.",
      flag_values=fv)
  flags.DEFINE_integer(
      "lower_thresh", 10,
      "The count threshold is not searched below this (TensorFlow Text's "
      "learn parameter of that name); lower it when a small corpus leaves "
      "the vocabulary short of --vocab_size.", flag_values=fv)
  flags.DEFINE_float(
      "slack_ratio", 0.05,
      "The search for the count threshold stops at a vocabulary this "
      "fraction below --vocab_size; [unusedN] slots fill the rest.",
      flag_values=fv)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order

from corpus import beam_pipeline
from corpus import text_files
from userio import output_files
from userio import verbosity
from vocabulary import vocab_job
from vocabulary import word_counts
# pylint: enable=g-import-not-at-top,wrong-import-position

# The flags naming the files a run writes.
_OUTPUT_FLAGS = ("output_file", "counts_output")


def check_flags(flag_obj):
  """Refuses flag values that cannot work, before any slow step.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  if bool(flag_obj.input_file) == bool(flag_obj.counts_input):
    raise cli.UserError("Pass --input_file (the text) or --counts_input "
                        "(count files), one of the two.")
  if not (flag_obj.output_file or flag_obj.counts_output):
    raise cli.UserError("--output_file is required (or --counts_output to "
                        "write the word counts only).")
  if flag_obj.counts_input and flag_obj["runner"].present:
    raise cli.UserError(
        "--runner=%s: learning from --counts_input runs in this process; "
        "the runner applies to counting --input_file." % flag_obj.runner)
  reserved = len(layout.reserved_tokens(max(flag_obj.num_unused, 0)))
  _check_at_least(flag_obj, "num_unused", 0)
  _check_at_least(flag_obj, "vocab_size", reserved + 1,
                  "the special tokens and %d [unusedN] slots take %d lines" %
                  (flag_obj.num_unused, reserved))
  for name in ("min_char_count", "max_unique_chars", "num_iterations",
               "max_input_words", "lower_thresh"):
    _check_at_least(flag_obj, name, 1)
  if flag_obj.num_workers is not None:
    _check_at_least(flag_obj, "num_workers", 1)
  if not 1 <= flag_obj.max_token_length <= _LONGEST_WORD:
    raise cli.UserError("--max_token_length=%d: must be between 1 and %d." %
                        (flag_obj.max_token_length, _LONGEST_WORD))
  if not flag_obj.shard_size_mb > 0:
    raise cli.UserError("--shard_size_mb=%g: must be positive." %
                        flag_obj.shard_size_mb)
  if not 0.0 <= flag_obj.slack_ratio < 1.0:
    raise cli.UserError("--slack_ratio=%g: must be at least 0 and below 1 "
                        "(0.05 is TensorFlow Text's)." % flag_obj.slack_ratio)


def _check_at_least(flag_obj, name, least, why=None):
  value = flag_obj[name].value
  if value < least:
    raise cli.UserError("--%s=%d: must be at least %d%s." % (
        name, value, least, "; " + why if why else ""))


def input_files_of(flag_obj):
  """The files the run reads: --counts_input's, or those --input_file
  names."""
  if flag_obj.counts_input:
    return flag_obj.counts_input.split(",")
  return text_files.resolve_input_files(flag_obj.input_file)


def outputs_of(flag_obj):
  """(flag, path) of each file the run writes, as output_files.claim takes
  them."""
  return [("--" + name, flag_obj[name].value) for name in _OUTPUT_FLAGS
          if flag_obj[name].value]


def learn_settings(flag_obj):
  """The vocab_job.LearnSettings of the flags of those names."""
  return vocab_job.LearnSettings(
      **{name: flag_obj[name].value for name in vocab_job.LearnSettings._fields})


def run(flag_obj, beam_args=()):
  """Counts and learns as the flags say; writes the outputs.

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
  input_files = input_files_of(flag_obj)
  total_bytes = None if flag_obj.counts_input else text_files.text_bytes(
      input_files, "there are no words to learn from")
  job = vocab_job.VocabJob(
      flag_obj.do_lower_case, learn_settings(flag_obj),
      output_file=flag_obj.output_file, counts_output=flag_obj.counts_output)
  with output_files.claim(outputs_of(flag_obj), input_files):
    if flag_obj.counts_input:
      counts, do_lower_case = word_counts.read_counts(input_files)
      if do_lower_case != flag_obj.do_lower_case:
        raise cli.UserError(
            "--counts_input was counted with --do_lower_case=%s; pass "
            "--do_lower_case=%s." % (do_lower_case, do_lower_case))
      job.finish(counts)
      return
    specs = text_files.plan_shards(input_files,
                                   int(flag_obj.shard_size_mb * _MB))
    if shard_job.is_local(flag_obj.runner):
      shard_job.run_local(
          job, specs, flag_obj.num_workers or len(os.sched_getaffinity(0)),
          total_bytes)
    else:
      beam_pipeline.run(job, specs, flag_obj.runner, beam_options,
                        total_bytes)


def main(argv):
  verbosity.start_logging()
  run(FLAGS, argv[1:])


if __name__ == "__main__":
  define_flags()
  # Flags this script does not define are Apache Beam's options.
  cli.run(main, known_only=True)
