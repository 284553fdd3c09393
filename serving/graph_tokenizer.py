# coding=utf-8
"""tokenization.FullTokenizer as TensorFlow graph ops: raw text to ids.

    tokenizer = GraphTokenizer(vocab_file, do_lower_case)
    ids = tokenizer.tokenize(texts)   # tf.string [batch] -> int64 ragged

The ids equal FullTokenizer(vocab_file, do_lower_case)'s, id for id, on any
bytes. The steps:

* bytes to code points (invalid UTF-8 becomes U+FFFD, which cleaning drops,
  as Python's decode with errors="ignore" would);
* cleaning, lowercasing with accent stripping, whitespace, punctuation and
  ideographs by the per-code-point tables of character_tables.py, built
  from tokenization.py's own rules; CPython's final-sigma rule in the graph;
* words: runs without whitespace, each punctuation character and each
  ideograph a word of its own; a word over 200 characters is [UNK];
* WordPiece by TensorFlow Text's FastWordpieceTokenizer, whose greedy
  longest-match-first cut is Google's, with the vocabulary compiled into
  the graph (the SavedModel needs no vocabulary file).

Works in tf.compat.v1 graphs and in tf.function. A process that loads a
SavedModel holding it must `import tensorflow_text` to register its op.
"""

import tensorflow as tf

import tokenization
from serving import character_tables as tables_lib
from userio import cli

MAX_INPUT_CHARS_PER_WORD = 200
_MAX_BYTES_PER_CHAR = 4
REQUIREMENT = "tensorflow-text"


def import_tensorflow_text():
  """The tensorflow_text module, or one line naming the package to install.

  Raises:
    cli.UserError: it is not installed.
  """
  try:
    import tensorflow_text  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise cli.UserError(
        "The raw-text signature needs the %s package (%s)" % (
            REQUIREMENT, error),
        fix="pip install -r requirements-text.txt") from None
  return tensorflow_text


def register_text_ops():
  """Imports tensorflow_text if it is installed, which registers the ops a
  SavedModel with a text signature holds; returns whether it is."""
  try:
    import_tensorflow_text()
  except cli.UserError:
    return False
  return True


def vocabulary_by_id(vocab_file):
  """The tokens of `vocab_file` by id, as tokenization.load_vocab reads it;
  an id that no token keeps (an empty line, a line repeated later) holds a
  string no word can produce (it contains a space)."""
  vocab = tokenization.load_vocab(vocab_file)
  tokens = ["<no token %d>" % i for i in range(max(vocab.values()) + 1)]
  for token, index in vocab.items():
    if token:
      tokens[index] = token
  return tokens


class GraphTokenizer(object):
  """FullTokenizer(vocab_file, do_lower_case) as graph ops (WordPiece
  vocabularies; not SentencePiece)."""

  def __init__(self, vocab_file, do_lower_case, unk_token="[UNK]"):
    text = import_tensorflow_text()
    tokens = vocabulary_by_id(vocab_file)
    for token in (unk_token, "[CLS]", "[SEP]"):
      if token not in tokens:
        raise cli.UserError("%s has no %s token" % (vocab_file, token),
                            fix="Use the vocab.txt the model was trained "
                            "with.")
    self.vocab = {token: index for index, token in enumerate(tokens)}
    self.unk_id = self.vocab[unk_token]
    self.do_lower_case = do_lower_case
    self._wordpiece = text.FastWordpieceTokenizer(
        vocab=tokens, suffix_indicator="##", unknown_token=unk_token,
        max_bytes_per_word=_MAX_BYTES_PER_CHAR * MAX_INPUT_CHARS_PER_WORD,
        token_out_type=tf.int64, no_pretokenization=True,
        support_detokenization=False)
    self._tables = tables_lib.tables()

  def _constant(self, name):
    return tf.constant(self._tables[name], tf.int32)

  def _classes(self, code_points):
    starts = self._constant("class_starts")
    return tf.gather(self._constant("class_values"),
                     tf.searchsorted(starts, code_points, side="right") - 1)

  def tokenize(self, texts):
    """Args: texts: tf.string [batch], any bytes.

    Returns:
      tf.RaggedTensor int64 [batch, (pieces)]: each text's ids.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    chars = decoded.flat_values
    rows = decoded.value_rowids()
    bits = self._classes(chars)
    keep = _without(bits, tables_lib.DROP)
    chars, bits, rows = [tf.boolean_mask(t, keep) for t in (chars, bits, rows)]
    source = tf.range(tf.size(chars, out_type=tf.int64))
    if self.do_lower_case:
      chars, source = self._lower(chars, bits, rows)
      rows = tf.gather(rows, source)
      ideograph = _with(tf.gather(bits, source), tables_lib.CJK)
      bits = self._classes(chars)
    else:
      ideograph = _with(bits, tables_lib.CJK)
    words, lengths, word_rows = _words(chars, bits, rows, source, ideograph)
    pieces = self._unknown_if_long(self._wordpiece.tokenize(words), lengths)
    batch = tf.shape(texts, out_type=tf.int64)[0]
    return tf.RaggedTensor.from_value_rowids(
        pieces.flat_values, tf.gather(word_rows, pieces.value_rowids()),
        nrows=batch)

  def _unknown_if_long(self, pieces, lengths):
    """`pieces` [words, (pieces)] with each word of more than 200
    characters one [UNK] (FastWordpieceTokenizer cuts any length)."""
    too_long = lengths > MAX_INPUT_CHARS_PER_WORD
    counts = pieces.row_lengths()
    kept = tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(pieces.flat_values, tf.repeat(~too_long, counts)),
        tf.where(too_long, tf.zeros_like(counts), counts))
    unknown = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(too_long, tf.int32))], self.unk_id),
        tf.cast(too_long, tf.int64))
    return tf.concat([kept, tf.cast(unknown, tf.int64)], axis=1)

  def _lower(self, chars, bits, rows):
    """Lowercases with accents stripped, one character into 0..n.

    Returns:
      (lowered, source): the lowered code points, and for each the index
      in `chars` of the character it came from.
    """
    final = _final_sigma(chars, bits, rows)
    chars = tf.where(final, tf.constant(tables_lib.FINAL_SIGMA), chars)
    keys = self._constant("lower_keys")
    index = tf.minimum(tf.searchsorted(keys, chars, side="left"),
                       tf.size(keys) - 1)
    mapped = tf.equal(tf.gather(keys, index), chars)
    splits = self._constant("lower_splits")
    lengths = tf.where(mapped, tf.gather(splits[1:] - splits[:-1], index), 1)
    source = tf.repeat(tf.range(tf.size(chars, out_type=tf.int64)),
                       tf.cast(lengths, tf.int64))
    offset = tf.range(tf.size(source)) - tf.gather(
        tf.cumsum(lengths, exclusive=True), source)
    from_table = tf.gather(self._constant("lower_values"), tf.where(
        tf.gather(mapped, source),
        tf.gather(tf.gather(splits, index), source) + offset, 0))
    lowered = tf.where(tf.gather(mapped, source), from_table,
                       tf.gather(chars, source))
    return lowered, source


def _with(bits, flag):
  return tf.not_equal(tf.bitwise.bitwise_and(bits, flag), 0)


def _without(bits, flag):
  return tf.equal(tf.bitwise.bitwise_and(bits, flag), 0)


def _final_sigma(chars, bits, rows):
  """Where str.lower would make a U+03A3 of the cleaned texts final: the
  nearest character before it that is not case-ignorable is cased, and the
  nearest after it (in the same text) is not, or there is none."""
  count = tf.size(chars, out_type=tf.int64)
  anchor = _without(bits, tables_lib.CASE_IGNORABLE)
  # Positions of the characters that are not case-ignorable, then a
  # sentinel past the end that belongs to no text.
  anchors = tf.concat([tf.boolean_mask(tf.range(count), anchor), [count]], 0)
  anchor_rows = tf.concat([rows, [-1]], 0)
  cased = tf.concat([_with(bits, tables_lib.CASED), [False]], 0)
  after = tf.cumsum(tf.cast(anchor, tf.int64))
  before = after - tf.cast(anchor, tf.int64) - 1
  previous = tf.gather(anchors, tf.maximum(before, 0))
  previous_cased = ((before >= 0) & tf.equal(tf.gather(anchor_rows, previous),
                                             rows) & tf.gather(cased, previous))
  following = tf.gather(anchors, after)  # U+03A3 is itself an anchor.
  following_cased = (tf.equal(tf.gather(anchor_rows, following), rows) &
                     tf.gather(cased, following))
  return (tf.equal(chars, tables_lib.CAPITAL_SIGMA) & previous_cased &
          ~following_cased)


def _words(chars, bits, rows, source, ideograph):
  """Cuts the characters into BasicTokenizer's words.

  Args:
    chars, bits, rows: int [n] code points, their class bits, their text.
    source: int64 [n], the cleaned character each came from (characters
      of one source come from lowering one character: an ideograph's stay
      one word).
    ideograph: bool [n], whether the source character is an ideograph.

  Returns:
    (words, lengths, word_rows): the words as UTF-8 strings [words], their
    lengths in characters, and the text of each.
  """
  def shifted(values, first):
    return tf.concat([tf.fill([1], first), values[:-1]], 0)

  space = _with(bits, tables_lib.SPACE)
  punctuation = _with(bits, tables_lib.PUNCT)
  new_source = tf.not_equal(source, shifted(source, tf.constant(-1, tf.int64)))
  starts = (tf.not_equal(rows, shifted(rows, tf.constant(-1, tf.int64))) |
            shifted(space, True) | punctuation | shifted(punctuation, False) |
            (new_source & (ideograph | shifted(ideograph, False))))
  kept = ~space
  word_ids = tf.cumsum(tf.cast(tf.boolean_mask(starts, kept), tf.int64)) - 1
  word_rows = tf.boolean_mask(rows, starts & kept)
  code_points = tf.RaggedTensor.from_value_rowids(
      tf.boolean_mask(chars, kept), word_ids,
      nrows=tf.size(word_rows, out_type=tf.int64))
  return (tf.strings.unicode_encode(code_points, "UTF-8"),
          code_points.row_lengths(), word_rows)


def basic_words(tokenizer, texts):
  """tokenization.BasicTokenizer(tokenizer.do_lower_case).tokenize of each
  text as graph ops: the words that `tokenizer.tokenize` cuts into pieces,
  cleaned (and lowercased without accents when uncased).

  Args:
    tokenizer: a GraphTokenizer.
    texts: tf.string [batch], any bytes.

  Returns:
    tf.RaggedTensor tf.string [batch, (words)], UTF-8.
  """
  texts = tf.convert_to_tensor(texts, tf.string)
  decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                      replacement_char=0xFFFD)
  chars = decoded.flat_values
  rows = decoded.value_rowids()
  bits = tokenizer._classes(chars)  # pylint: disable=protected-access
  keep = _without(bits, tables_lib.DROP)
  chars, bits, rows = [tf.boolean_mask(t, keep) for t in (chars, bits, rows)]
  source = tf.range(tf.size(chars, out_type=tf.int64))
  if tokenizer.do_lower_case:
    chars, source = tokenizer._lower(chars, bits, rows)  # pylint: disable=protected-access
    rows = tf.gather(rows, source)
    ideograph = _with(tf.gather(bits, source), tables_lib.CJK)
    bits = tokenizer._classes(chars)  # pylint: disable=protected-access
  else:
    ideograph = _with(bits, tables_lib.CJK)
  words, _, word_rows = _words(chars, bits, rows, source, ideograph)
  return tf.RaggedTensor.from_value_rowids(
      words, word_rows, nrows=tf.shape(texts, out_type=tf.int64)[0])
