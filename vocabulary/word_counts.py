# coding=utf-8
"""Counting a corpus's words as BERT's basic tokenizer splits them.

A "word" is one token of `tokenization.BasicTokenizer.tokenize`: what
`FullTokenizer` hands to WordPiece. Counting those tokens, with the very
tokenizer class the model's users run, is what makes every word of the
corpus tokenizable with the learned vocabulary.

Speed without a second tokenizer: BasicTokenizer treats each character on
its own (dropping it, turning it into a space or keeping it) before it
splits at whitespace, and everything after that split (lowercasing, accent
stripping, punctuation splitting) works within one whitespace-separated
token. So the tokens of a line are the tokens of its space-separated
chunks, one after the other. A shard's chunks are counted first (a C loop
in collections.Counter), and each distinct chunk goes through
BasicTokenizer once, its words weighted by the chunk's count; the counts
are exactly those of tokenizing every line.

Scale: the corpus is cut into shards (corpus.text_files.plan_shards, as
create_pretraining_data.py --mode=scalable cuts it), each counted on its
own (`count_shard`) by whatever runs the job (vocabulary/vocab_job.py):
local worker processes or an Apache Beam runner. Memory holds the shards in
flight and the table of distinct words (it grows with the vocabulary of the
corpus, not with its size). Counts add up: the sum of the shards' counts
is exactly the count of the whole, in any order.

`write_counts` keeps a corpus's counts, and `read_counts` reads them back
(adding several files up), so that vocabularies of other sizes or settings
are learned without counting again.

Count files are UTF-8 text: a first line `#word_counts<TAB>do_lower_case=
True` (or False), then one `word<TAB>count` line per word, by decreasing
count and then by word. Words never hold whitespace, so tabs and newlines
cannot be part of one.
"""

import collections
import re

from absl import logging
import tensorflow as tf

from engine import host_memory
from corpus import text_files
from userio import cli
from userio import utf8
from userio import output_files
import tokenization

_HEADER = "#word_counts\tdo_lower_case=%s"
_HEADER_PATTERN = re.compile(r"#word_counts\tdo_lower_case=(True|False)$")


def count_lines(lines, basic_tokenizer, counts):
  """Adds the words of `lines` (str) to `counts` (a Counter), as
  `basic_tokenizer.tokenize` splits each line."""
  chunks = collections.Counter()
  for line in lines:
    chunks.update(line.split(" "))
  del chunks[""]
  for chunk, number in chunks.items():
    for word in basic_tokenizer.tokenize(chunk):
      counts[word] += number


def count_shard(spec, do_lower_case):
  """The words of one shard (a corpus.text_files.ShardSpec); runs in a
  worker.

  Returns:
    dict of counts (a Counter word -> count), documents and bytes (of
    input).
  """
  documents_lines, num_bytes = text_files.read_shard(spec)
  basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  counts = collections.Counter()
  for lines in documents_lines:
    count_lines(lines, basic_tokenizer, counts)
  result = {"counts": counts, "documents": len(documents_lines),
            "bytes": num_bytes}
  del documents_lines
  # The next shard reuses little of this one's heap.
  host_memory.release_freed_heap()
  return result


def _amount(number, noun):
  """E.g. "1 shard", "12,345 shards"."""
  return "{:,} {}{}".format(number, noun, "" if number == 1 else "s")


def words_in(counts):
  """E.g. "1,192 distinct words, 5,422 words in all"."""
  return "%s, %s in all" % (_amount(len(counts), "distinct word"),
                            _amount(sum(counts.values()), "word"))


def format_counts(counts, do_lower_case):
  """The text of a count file (see the module docstring)."""
  lines = [_HEADER % bool(do_lower_case)]
  lines.extend("%s\t%d" % (word, count)
               for word, count in sorted_counts(counts))
  return "\n".join(lines) + "\n"


def sorted_counts(counts):
  """(word, count) pairs by decreasing count, then by word."""
  return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def write_counts(path, counts, do_lower_case, flag=None):
  """Writes a count file atomically; a full disk ends in one line naming
  `flag` (the flag that chose the file, e.g. "--counts_output")."""
  output_files.write_text(path, format_counts(counts, do_lower_case),
                          flag=flag)


def read_counts(paths):
  """Adds up count files; logs how many words they hold.

  Returns:
    (Counter word -> count, do_lower_case the files were counted with).

  Raises:
    cli.UserError: a file is missing or malformed, or the files were
      counted with different --do_lower_case.
  """
  totals = collections.Counter()
  casing = None
  for path in paths:
    file_casing = _read_count_file(path, totals)
    if casing is not None and file_casing != casing:
      raise cli.UserError(
          "--counts_input: %s was counted with --do_lower_case=%s, %s with "
          "--do_lower_case=%s; count all parts with the same setting." %
          (paths[0], casing, path, file_casing))
    casing = file_casing
  logging.info("Read %s: %s.", _amount(len(paths), "count file"),
               words_in(totals))
  return totals, casing


def _read_count_file(path, totals):
  """Adds one count file to `totals`; returns its do_lower_case."""
  if not tf.io.gfile.exists(path):
    raise cli.UserError("--counts_input: %s: file not found." % path)
  casing = None
  with tf.io.gfile.GFile(path, "rb") as reader:
    for number, raw in enumerate(reader, 1):
      try:
        line = raw.decode("utf-8").rstrip("\n")
      except UnicodeDecodeError as e:
        raise cli.UserError(utf8.finding(path, raw, e.start, number),
                            fix="Is it a count file of create_vocab.py?"
                            ) from None
      if number == 1:
        match = _HEADER_PATTERN.match(line)
        if not match:
          raise cli.UserError(
              "%s, line 1: not the header of a count file of create_vocab.py "
              "(--counts_output writes them)." % path)
        casing = match.group(1) == "True"
        continue
      word, tab, count = line.partition("\t")
      if not (word and tab and count.isdigit() and count.isascii()):
        raise cli.UserError("%s, line %d: expected word<TAB>count, found %r."
                            % (path, number, line[:80]))
      totals[word] += int(count)
  if casing is None:
    raise cli.UserError("%s is empty; it is not a count file of "
                        "create_vocab.py." % path)
  return casing
