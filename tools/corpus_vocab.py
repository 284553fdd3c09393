# coding=utf-8
"""Writes a WordPiece vocabulary cut down to the pieces one corpus uses most.

For pre-training a small BERT from scratch on a small corpus: with 128
hidden units, Google's 30,522-piece vocabulary makes the masked-LM output
layer cost more than the encoder, and most of its rows never see a
gradient. The new vocabulary keeps, in the source vocabulary's order (so
[PAD] stays id 0 and the file reads like Google's):

  * the special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]; not [unusedN]);
  * every piece of one character, with and without "##", so that a word
    whose longer pieces were dropped splits into shorter ones, not [UNK];
  * then the pieces the corpus uses most under the source vocabulary,
    until --size pieces.

    python -m tools.corpus_vocab --vocab_file=.../uncased/vocab.txt \\
      --input_file=/tmp/pt3/train.txt --output_file=/tmp/pt3/vocab8k.txt \\
      --size=8192

A model's config then needs "vocab_size": --size.
"""

import collections
import os

from absl import flags
from absl import logging

from corpus import text_files
from startup import checks
from userio import cli
from userio import output_files
from userio import progress

FLAGS = flags.FLAGS
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary to cut.")
flags.DEFINE_string("input_file", None, "The corpus (any text, UTF-8).")
flags.DEFINE_string("output_file", None, "The vocabulary to write.")
flags.DEFINE_integer("size", 8192, "Pieces in the new vocabulary.")
flags.DEFINE_bool("do_lower_case", True, "As the tokenizer that will use it.")
for _name in ("vocab_file", "input_file", "output_file"):
  flags.mark_flag_as_required(_name)


def is_special(piece):
  """True for [PAD], [CLS], ... but not for the placeholders [unusedN]."""
  return (piece.startswith("[") and piece.endswith("]")
          and not piece.startswith("[unused"))


def is_character(piece):
  """True for "a" and "##a": the pieces every word can fall back on."""
  return len(piece) == 1 or (piece.startswith("##") and len(piece) == 3)


def required_pieces(pieces, size):
  """The special and one-character pieces, which every cut keeps."""
  required = [p for p in pieces if is_special(p) or is_character(p)]
  if len(required) > size:
    raise cli.UserError(
        "--size=%d is below the %d special and one-character pieces that "
        "must stay" % (size, len(required)), fix="Pass a larger --size.")
  return required


def cut_vocabulary(pieces, required, counts, size):
  """The pieces to keep, in their original order.

  Args:
    pieces: list of str, the source vocabulary in id order.
    required: list of str, required_pieces(pieces, size).
    counts: collections.Counter of piece -> uses in the corpus.
    size: int, how many to keep.

  Returns:
    list of str, at most `size` long (exactly `size` if the corpus uses
    enough pieces).
  """
  keep = set(required)
  for piece, _ in counts.most_common():
    if len(keep) >= size:
      break
    keep.add(piece)
  return [p for p in pieces if p in keep]


def count_pieces(tokenizer, path):
  """Counter of piece -> uses when `tokenizer` splits the file at `path`.

  Read as create_pretraining_data.py reads its input, so a line that is
  not UTF-8 ends the script with one line naming it.
  """
  counts = collections.Counter()
  meter = progress.Progress("Counting pieces", os.path.getsize(path),
                            unit="MB", scale=1e6)
  for _, text, size in text_files.read_lines(path):
    counts.update(tokenizer.tokenize(text))
    meter.advance(size)
  meter.finish()
  return counts


def main(argv):
  del argv
  for flag in ("vocab_file", "input_file"):
    if not os.path.isfile(getattr(FLAGS, flag)):
      raise cli.UserError("--%s=%s: no such file" % (flag, getattr(FLAGS, flag)),
                          fix="Pass the path of an existing file.")
  folder = os.path.dirname(os.path.abspath(FLAGS.output_file))
  if not os.path.isdir(folder):
    raise cli.UserError("--output_file=%s: folder %s does not exist"
                        % (FLAGS.output_file, folder), fix="Create it first.")
  tokenizer = checks.make_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
  pieces = list(tokenizer.vocab)
  required = required_pieces(pieces, FLAGS.size)  # Before the slow count.
  counts = count_pieces(tokenizer, FLAGS.input_file)
  kept = cut_vocabulary(pieces, required, counts, FLAGS.size)
  output_files.write_text(FLAGS.output_file, "".join(p + "\n" for p in kept))
  logging.info("The corpus is %d pieces, %d distinct; kept %d special and "
               "one-character pieces and the %d most used others.",
               sum(counts.values()), len(counts), len(required),
               len(kept) - len(required))
  logging.info("Wrote %d of %d pieces to %s; set \"vocab_size\": %d in the "
               "model's config.", len(kept), len(pieces), FLAGS.output_file,
               len(kept))


if __name__ == "__main__":
  cli.run(main)
