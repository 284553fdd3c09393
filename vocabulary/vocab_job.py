# coding=utf-8
"""create_vocab.py's work as a corpus job (corpus/shard_job.py): count the
words of each shard, add the counts up, learn the vocabulary, write it.

The same functions run on --runner=local's worker processes and on any
Apache Beam runner (corpus/beam_pipeline.py). The counts are a sum, so they
do not depend on how the shards are spread or in which order they are
added, and the learner depends on the counts alone (ties broken by word,
vocabulary/wordpiece_learner.py): the vocabulary is the same file on every
runner.
"""

import collections

from absl import logging

from corpus import shard_job
from userio import cli
from userio import output_files
from vocabulary import layout
from vocabulary import word_counts
from vocabulary import wordpiece_learner

# What shapes the learned vocabulary (create_vocab.py's flags of these
# names).
LearnSettings = collections.namedtuple(
    "LearnSettings", ["vocab_size", "num_unused", "lower_thresh",
                      "num_iterations", "max_input_words", "max_token_length",
                      "max_unique_chars", "min_char_count", "slack_ratio",
                      "prefix_discount"])


class VocabJob(shard_job.ShardJob):
  """Counts the shards' words; `finish` writes the counts to
  `counts_output` and the vocabulary learned with `learn` (LearnSettings)
  to `output_file`, each when given."""

  name = "Counting words"

  def __init__(self, do_lower_case, learn=None, output_file=None,
               counts_output=None):
    self.do_lower_case = do_lower_case
    self.learn = learn
    self.output_file = output_file
    self.counts_output = counts_output

  def work(self, spec):
    return word_counts.count_shard(spec, self.do_lower_case)

  def tally(self, result):
    return {"documents": result["documents"],
            "words": sum(result["counts"].values()),
            shard_job.BYTES: result["bytes"]}

  def empty(self):
    return collections.Counter()

  def add(self, accumulator, result):
    accumulator.update(result["counts"])
    return accumulator

  def merge(self, accumulators):
    total = collections.Counter()
    for counts in accumulators:
      total.update(counts)
    return total

  def finish(self, accumulator):
    """Writes the counts and the vocabulary.

    Raises:
      cli.UserError: no words, or --vocab_size too small for them.
    """
    logging.info("Counted %s.", word_counts.words_in(accumulator))
    if self.counts_output:
      word_counts.write_counts(self.counts_output, accumulator,
                               self.do_lower_case, flag="--counts_output")
      logging.info("Wrote the counts of %d words to %s", len(accumulator),
                   self.counts_output)
    if self.output_file:
      tokens = learn_vocabulary(accumulator, self.learn)
      output_files.write_text(self.output_file,
                              "".join(token + "\n" for token in tokens),
                              flag="--output_file")
      logging.info("Wrote %s", self.output_file)

  def outputs(self, totals):
    """What the job wrote (the files; `totals` are not needed)."""
    del totals
    return ", ".join(path for path in (self.output_file, self.counts_output)
                     if path)


def learn_vocabulary(counts, settings):
  """The vocabulary's lines, learned from `counts` (word -> count) with
  `settings` (LearnSettings); warns when the corpus leaves much of them to
  [unusedN] slots.

  Raises:
    cli.UserError: no words, or --vocab_size cannot hold the reserved
      tokens and the characters.
  """
  if not counts:
    raise cli.UserError("The input holds no words to learn from.")
  params = wordpiece_learner.learner_params(
      settings.vocab_size, layout.reserved_tokens(settings.num_unused),
      lower_thresh=settings.lower_thresh,
      num_iterations=settings.num_iterations,
      max_input_words=settings.max_input_words,
      max_token_length=settings.max_token_length,
      max_unique_chars=settings.max_unique_chars,
      min_char_count=settings.min_char_count,
      slack_ratio=settings.slack_ratio,
      prefix_discount=settings.prefix_discount)
  chars = wordpiece_learner.allowed_characters(
      counts, params.max_unique_chars, params.min_char_count)
  least = layout.smallest_size(settings.num_unused, len(chars))
  if settings.vocab_size < least:
    raise cli.UserError(
        "--vocab_size=%d is too small: the special tokens and [unusedN] "
        "slots take %d lines and the corpus's %d characters %d more (each "
        "alone and after ##); pass at least --vocab_size=%d, or fewer "
        "characters (--min_char_count, --max_unique_chars) or slots "
        "(--num_unused)." % (settings.vocab_size, least - 2 * len(chars),
                             len(chars), 2 * len(chars), least))
  learned = wordpiece_learner.learn(counts, params)
  tokens, dropped, added = layout.fit_to_size(
      learned, settings.vocab_size, settings.num_unused, chars)
  logging.info(
      "Vocabulary: %d lines: %d reserved, %d characters (each alone and "
      "after ##), %d other pieces%s.", len(tokens), len(params.reserved_tokens),
      len(chars), len(tokens) - len(params.reserved_tokens) - 2 * len(chars)
      - added, _fit_note(dropped, added))
  _warn_if_short(len(learned), params, settings.num_unused)
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
