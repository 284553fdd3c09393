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

On several machines, each counts a part of the shards and writes its
counts; one more run adds the count files up and learns:

    python create_vocab.py --input_file='corpus/*.txt' --num_tasks=2 \\
      --task_index=0 --counts_output=counts-0.tsv     # machine 0
    python create_vocab.py --input_file='corpus/*.txt' --num_tasks=2 \\
      --task_index=1 --counts_output=counts-1.tsv     # machine 1
    python create_vocab.py --counts_input=counts-0.tsv,counts-1.tsv \\
      --output_file=vocab.txt --vocab_size=30522

The result is the one a single machine gets. Outputs are written under
temporary names and renamed once complete.
"""

import os

from absl import flags
from absl import logging

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
      "Processes counting words (default: one per CPU core).",
      flag_values=fv)
  flags.DEFINE_float(
      "shard_size_mb", 4.0,
      "Megabytes of text per counting shard, as create_pretraining_data.py "
      "--mode=scalable cuts the input; each worker holds one or two.",
      flag_values=fv)
  flags.DEFINE_string(
      "counts_output", None,
      "Also write the word counts to this file, to learn from later with "
      "--counts_input (e.g. to merge the counts of several machines).",
      flag_values=fv)
  flags.DEFINE_string(
      "counts_input", None,
      "Learn from these count files (comma-separated, written by "
      "--counts_output) instead of --input_file; their counts are added "
      "up.", flag_values=fv)
  flags.DEFINE_integer(
      "num_tasks", 1,
      "Machines sharing the counting: this run counts only the shards k "
      "with k % num_tasks == task_index, and needs --counts_output.",
      flag_values=fv)
  flags.DEFINE_integer(
      "task_index", 0, "This machine's number, 0 to --num_tasks - 1.",
      flag_values=fv)
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

from corpus import text_files
from userio import output_files
from userio import verbosity
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
  _check_tasks(flag_obj)
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


def _check_tasks(flag_obj):
  _check_at_least(flag_obj, "num_tasks", 1)
  if not 0 <= flag_obj.task_index < flag_obj.num_tasks:
    raise cli.UserError("--task_index=%d: must be between 0 and "
                        "--num_tasks - 1 = %d." %
                        (flag_obj.task_index, flag_obj.num_tasks - 1))
  if flag_obj.num_tasks > 1 and (flag_obj.output_file or
                                 not flag_obj.counts_output or
                                 flag_obj.counts_input):
    raise cli.UserError(
        "--num_tasks=%d: each machine counts a part of the text, so pass "
        "--input_file and --counts_output (not --output_file), then learn "
        "from all parts with --counts_input." % flag_obj.num_tasks)


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


def gather_counts(flag_obj, input_files):
  """The word counts the flags name: counted from --input_file or added up
  from --counts_input (`input_files` are either's, `input_files_of`).
  Returns a Counter."""
  if flag_obj.counts_input:
    counts, do_lower_case = word_counts.read_counts(input_files)
    if do_lower_case != flag_obj.do_lower_case:
      raise cli.UserError(
          "--counts_input was counted with --do_lower_case=%s; pass "
          "--do_lower_case=%s." % (do_lower_case, do_lower_case))
    return counts
  num_workers = flag_obj.num_workers or len(os.sched_getaffinity(0))
  return word_counts.count_corpus(
      input_files, flag_obj.do_lower_case, num_workers,
      int(flag_obj.shard_size_mb * _MB), flag_obj.task_index,
      flag_obj.num_tasks)


def learn_vocabulary(counts, flag_obj):
  """The vocabulary's lines, learned from `counts` as the flags say; warns
  when the corpus leaves much of them to [unusedN] slots.

  Raises:
    cli.UserError: no words, or --vocab_size cannot hold the reserved
      tokens and the characters.
  """
  if not counts:
    raise cli.UserError("The input holds no words to learn from.")
  params = wordpiece_learner.learner_params(
      flag_obj.vocab_size, layout.reserved_tokens(flag_obj.num_unused),
      lower_thresh=flag_obj.lower_thresh,
      num_iterations=flag_obj.num_iterations,
      max_input_words=flag_obj.max_input_words,
      max_token_length=flag_obj.max_token_length,
      max_unique_chars=flag_obj.max_unique_chars,
      min_char_count=flag_obj.min_char_count,
      slack_ratio=flag_obj.slack_ratio,
      prefix_discount=flag_obj.prefix_discount)
  chars = wordpiece_learner.allowed_characters(
      counts, params.max_unique_chars, params.min_char_count)
  least = layout.smallest_size(flag_obj.num_unused, len(chars))
  if flag_obj.vocab_size < least:
    raise cli.UserError(
        "--vocab_size=%d is too small: the special tokens and [unusedN] "
        "slots take %d lines and the corpus's %d characters %d more (each "
        "alone and after ##); pass at least --vocab_size=%d, or fewer "
        "characters (--min_char_count, --max_unique_chars) or slots "
        "(--num_unused)." % (flag_obj.vocab_size, least - 2 * len(chars),
                             len(chars), 2 * len(chars), least))
  learned = wordpiece_learner.learn(counts, params)
  tokens, dropped, added = layout.fit_to_size(
      learned, flag_obj.vocab_size, flag_obj.num_unused, chars)
  logging.info(
      "Vocabulary: %d lines: %d reserved, %d characters (each alone and "
      "after ##), %d other pieces%s.", len(tokens), len(params.reserved_tokens),
      len(chars), len(tokens) - len(params.reserved_tokens) - 2 * len(chars)
      - added, _fit_note(dropped, added))
  _warn_if_short(len(learned), params, flag_obj.num_unused)
  return tokens


def _warn_if_short(num_learned, params, num_unused):
  """Warns when the learned vocabulary falls short of --vocab_size by more
  than the learner's slack, so that [unusedN] slots fill much of the file
  (on a corpus too small for the size, the count threshold reaches
  --lower_thresh before the pieces reach the size)."""
  if (num_learned >= params.vocab_size or
      wordpiece_learner.within_slack(num_learned, params)):
    return
  num_slots = num_unused + params.vocab_size - num_learned
  logging.warning(
      "Only %d of the %d lines of the vocabulary are learned pieces and "
      "characters; [unusedN] slots fill %.0f%% of it. Learn from a larger "
      "corpus, or pass a smaller --vocab_size (this corpus fills %d lines) "
      "and give bert_config.json the same vocab_size.",
      num_learned - len(params.reserved_tokens), params.vocab_size,
      100.0 * num_slots / params.vocab_size, num_learned)


def _fit_note(dropped, added):
  if dropped:
    return "; the %d least frequent pieces left out to fit" % dropped
  if added:
    return ("; %d more [unusedN] slots at the end fill it up (a lower "
            "--lower_thresh or --slack_ratio learns more pieces)" % added)
  return ""


def run(flag_obj):
  """Counts, merges and learns as the flags say; writes the outputs."""
  check_flags(flag_obj)
  input_files = input_files_of(flag_obj)
  with output_files.claim(outputs_of(flag_obj), input_files):
    counts = gather_counts(flag_obj, input_files)
    if flag_obj.counts_output:
      word_counts.write_counts(flag_obj.counts_output, counts,
                               flag_obj.do_lower_case, flag="--counts_output")
      logging.info("Wrote the counts of %d words to %s", len(counts),
                   flag_obj.counts_output)
    if flag_obj.output_file:
      tokens = learn_vocabulary(counts, flag_obj)
      output_files.write_text(flag_obj.output_file,
                              "".join(token + "\n" for token in tokens),
                              flag="--output_file")
      logging.info("Wrote %s", flag_obj.output_file)


def main(_):
  verbosity.start_logging()
  run(FLAGS)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
