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

Scale: the corpus is read in the main process and cut into shards of whole
documents (corpus.text_files.shard_documents, as
create_pretraining_data.py --mode=scalable cuts it); worker processes
(corpus/workers.py) count the shards. Memory holds the shards in flight and
the table of distinct words (it grows with the vocabulary of the corpus,
not with its size).

Several machines: `task_index` / `num_tasks` make one process count shard
k only when k % num_tasks == task_index. Each writes its counts
(`write_counts`), and `read_counts` adds count files up: the sum of the
parts is exactly the count of the whole.

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
from corpus import workers
from userio import cli
from userio import utf8
from userio import output_files
from userio import progress
import tokenization

_MB = 1e6
# Seconds between two progress lines.
_PROGRESS_INTERVAL = 30.0
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


def count_shard(documents_lines, do_lower_case):
  """The word Counter of one shard (runs in a worker process).

  Args:
    documents_lines: list of documents, each a list of lines (str).
    do_lower_case: as BasicTokenizer takes it.
  """
  basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  counts = collections.Counter()
  for lines in documents_lines:
    count_lines(lines, basic_tokenizer, counts)
  del documents_lines
  # The next shard reuses little of this one's heap.
  host_memory.release_freed_heap()
  return counts


def count_corpus(input_files, do_lower_case, num_workers, shard_bytes,
                 task_index=0, num_tasks=1):
  """Counts the words of the corpus's shards in `num_workers` processes
  (corpus/workers.py); logs how many shards and words it counted.

  Args:
    input_files: paths, read in this order.
    do_lower_case: as BasicTokenizer takes it.
    num_workers: worker processes.
    shard_bytes: input bytes per shard (as --shard_size_mb of
      create_pretraining_data.py).
    task_index, num_tasks: count only the shards k with
      k % num_tasks == task_index (all shards by default).

  Returns:
    Counter word -> count.

  Raises:
    cli.UserError: a file cannot be read or holds a line that is not UTF-8,
      or a worker process died.
  """
  meter = progress.Progress(
      "Counting words" + ("" if num_tasks == 1 else
                          " (shards %d mod %d)" % (task_index, num_tasks)),
      sum(tf.io.gfile.stat(p).length for p in input_files), unit="MB",
      interval=_PROGRESS_INTERVAL, scale=_MB)
  totals = collections.Counter()
  num_counted = num_shards = 0
  shards = text_files.read_shards(input_files, shard_bytes)
  with workers.results_in_order(
      count_shard, _count_jobs(shards, do_lower_case, task_index, num_tasks),
      num_workers) as counted:
    for counts, bytes_read in counted:
      num_shards += 1
      if counts is not None:
        num_counted += 1
        totals.update(counts)
      meter.advance(bytes_read - meter.done,
                    sizes={"distinct words": len(totals)})
  meter.finish()
  logging.info("%s: %s, %s.", meter.what,
               _shards(num_counted, num_shards), _words_in(totals))
  return totals


def _count_jobs(shards, do_lower_case, task_index, num_tasks):
  """The workers' jobs of `shards` (corpus/workers.py): this task's shards
  are counted, the others skipped; each tagged with the input bytes read at
  its end."""
  for index, (documents_lines, bytes_read) in enumerate(shards):
    counted = index % num_tasks == task_index
    yield ((documents_lines, do_lower_case) if counted else None), bytes_read


def _amount(number, noun):
  """E.g. "1 shard", "12,345 shards"."""
  return "{:,} {}{}".format(number, noun, "" if number == 1 else "s")


def _shards(num_counted, num_shards):
  """E.g. "3 shards", or "2 of 5 shards" when a task counts a part."""
  if num_counted == num_shards:
    return _amount(num_shards, "shard")
  return "%d of %s" % (num_counted, _amount(num_shards, "shard"))


def _words_in(counts):
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
               _words_in(totals))
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
