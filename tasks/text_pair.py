# coding=utf-8
"""One text or a pair of texts laid out as BERT reads them.

A single text becomes [CLS] a [SEP]; a pair becomes [CLS] a [SEP] b [SEP],
segment 0 up to and including the first [SEP] and segment 1 after it.
Google's scripts each carried their own copy of these steps.
"""

# [CLS] a [SEP]: the special tokens and one token of text.
MIN_SEQ_LENGTH_ONE_TEXT = 3
# [CLS] a [SEP] b [SEP]: the special tokens and one token of each text.
MIN_SEQ_LENGTH_PAIR = 5


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Cuts the pair in place to at most `max_length` tokens in total.

  Each cut drops the last token of whichever list is longer (b on a tie),
  so a short text stays whole while a long one gives up its tail.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def layout(tokens_a, tokens_b, max_seq_length):
  """The model's tokens and segment ids of one example, unpadded.

  Args:
    tokens_a: the first text's WordPiece tokens (a list; shortened in place
      when a pair is too long).
    tokens_b: the second text's tokens, or None / [] for a single text.
    max_seq_length: the longest sequence, special tokens included.

  Returns:
    (tokens, segment_ids), lists of the same length <= max_seq_length.
  """
  if tokens_b:
    # Room for [CLS] and the two [SEP]s.
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  elif len(tokens_a) > max_seq_length - 2:
    # Room for [CLS] and [SEP].
    tokens_a = tokens_a[0:(max_seq_length - 2)]
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  return tokens, segment_ids
