# coding=utf-8
"""tokenization.FullTokenizer as TensorFlow graph ops: raw text to ids.

    tokenizer = for_model(vocab_file, do_lower_case, spm_model_file)
    ids = tokenizer.tokenize(texts)   # tf.string [batch] -> int64 ragged

The ids equal FullTokenizer(vocab_file, do_lower_case, spm_model_file)'s,
id for id. With a WordPiece vocabulary, on any bytes, the steps are:

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

With a SentencePiece model: str.lower's rules by the same tables when
do_lower_case, then TensorFlow Text's SentencePiece op on the model's bytes
(also compiled into the graph), whose normalization is the model's own.

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


class _CharacterRules(object):
  """tokenization.py's character rules as graph ops (character_tables.py),
  shared by both tokenizers."""

  def __init__(self):
    self._tables = tables_lib.tables()

  def _constant(self, name):
    return tf.constant(self._tables[name], tf.int32)

  def _classes(self, code_points):
    starts = self._constant("class_starts")
    return tf.gather(self._constant("class_values"),
                     tf.searchsorted(starts, code_points, side="right") - 1)

  def _basic_split(self, texts):
    """BasicTokenizer(self.do_lower_case)'s words of `texts`.

    Returns:
      (words, lengths, word_rows): the words as UTF-8 strings [words],
      their lengths in characters, and the text of each.
    """
    decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    chars = decoded.flat_values
    rows = decoded.value_rowids()
    bits = self._classes(chars)
    keep = _without(bits, tables_lib.DROP)
    chars, bits, rows = [tf.boolean_mask(t, keep) for t in (chars, bits, rows)]
    source = tf.range(tf.size(chars, out_type=tf.int64))
    if self.do_lower_case:
      chars, source = self._lower(chars, bits, rows, tables_lib.LOWER)
      rows = tf.gather(rows, source)
      ideograph = _with(tf.gather(bits, source), tables_lib.CJK)
      bits = self._classes(chars)
    else:
      ideograph = _with(bits, tables_lib.CJK)
    return _words(chars, bits, rows, source, ideograph)

  def basic_words(self, texts):
    """tokenization.BasicTokenizer(do_lower_case).tokenize of each text:
    the words cleaned, split at whitespace, punctuation and ideographs (and
    lowercased without accents when uncased), whichever vocabulary the
    tokenizer has.

    Args:
      texts: tf.string [batch], any bytes.

    Returns:
      tf.RaggedTensor tf.string [batch, (words)], UTF-8.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    words, _, word_rows = self._basic_split(texts)
    return tf.RaggedTensor.from_value_rowids(
        words, word_rows, nrows=tf.shape(texts, out_type=tf.int64)[0])

  def words_with_offsets(self, texts):
    """tokenization.split_words_with_offsets in the graph: the raw texts cut
    at whitespace, each punctuation character a word of its own, nothing
    cleaned or lowercased.

    Args:
      texts: tf.string [batch], UTF-8 (an invalid byte becomes U+FFFD).

    Returns:
      (words, starts, ends), each ragged [batch, (words)]: the words
      (tf.string) and their offsets in code points (int64), the word
      text[start:end] of the decoded text.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    chars = decoded.flat_values
    rows = decoded.value_rowids()
    positions = (tf.range(tf.size(chars, out_type=tf.int64)) -
                 tf.gather(decoded.row_starts(), rows))
    bits = self._classes(chars)
    space = _with(bits, tables_lib.WORD_BREAK)
    punctuation = _with(bits, tables_lib.PUNCT)
    follows = tf.concat([[False], tf.equal(rows[1:], rows[:-1])], 0)
    previous_space = tf.concat([[True], space[:-1]], 0)
    previous_punctuation = tf.concat([[False], punctuation[:-1]], 0)
    starts = ~space & (punctuation | ~follows | previous_space |
                       previous_punctuation)
    kept = ~space
    word_ids = tf.cumsum(tf.cast(tf.boolean_mask(starts, kept), tf.int64)) - 1
    num_words = tf.reduce_sum(tf.cast(starts, tf.int64))
    code_points = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(chars, kept), word_ids, nrows=num_words)
    kept_positions = tf.boolean_mask(positions, kept)
    word_starts = tf.math.segment_min(kept_positions, word_ids)
    word_ends = tf.math.segment_max(kept_positions, word_ids) + 1
    word_rows = tf.boolean_mask(rows, starts)

    def by_text(values):
      return tf.RaggedTensor.from_value_rowids(values, word_rows,
                                               nrows=decoded.nrows())

    return (by_text(tf.strings.unicode_encode(code_points, "UTF-8")),
            by_text(word_starts), by_text(word_ends))

  def _lower(self, chars, bits, rows, table):
    """Lowercases by `table` (character_tables.LOWER: with accents
    stripped; PLAIN_LOWER: str.lower), one character into 0..n.

    Returns:
      (lowered, source): the lowered code points, and for each the index
      in `chars` of the character it came from.
    """
    final = _final_sigma(chars, bits, rows)
    chars = tf.where(final, tf.constant(tables_lib.FINAL_SIGMA), chars)
    keys = self._constant(table + "_keys")
    index = tf.minimum(tf.searchsorted(keys, chars, side="left"),
                       tf.size(keys) - 1)
    mapped = tf.equal(tf.gather(keys, index), chars)
    splits = self._constant(table + "_splits")
    lengths = tf.where(mapped, tf.gather(splits[1:] - splits[:-1], index), 1)
    source = tf.repeat(tf.range(tf.size(chars, out_type=tf.int64)),
                       tf.cast(lengths, tf.int64))
    offset = tf.range(tf.size(source)) - tf.gather(
        tf.cumsum(lengths, exclusive=True), source)
    from_table = tf.gather(self._constant(table + "_values"), tf.where(
        tf.gather(mapped, source),
        tf.gather(tf.gather(splits, index), source) + offset, 0))
    lowered = tf.where(tf.gather(mapped, source), from_table,
                       tf.gather(chars, source))
    return lowered, source


class GraphTokenizer(_CharacterRules):
  """FullTokenizer(vocab_file, do_lower_case) as graph ops, for a WordPiece
  vocabulary."""

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
    super().__init__()

  def tokenize(self, texts):
    """Args: texts: tf.string [batch], any bytes.

    Returns:
      tf.RaggedTensor int64 [batch, (pieces)]: each text's ids.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    words, lengths, word_rows = self._basic_split(texts)
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


class SentencePieceGraphTokenizer(_CharacterRules):
  """FullTokenizer(None, do_lower_case, spm_model_file) as graph ops: the
  text lowercased by str.lower's rules if do_lower_case, then TensorFlow
  Text's SentencePiece op on the model's bytes (compiled into the graph)."""

  def __init__(self, spm_model_file, do_lower_case):
    text = import_tensorflow_text()
    reference = tokenization.FullTokenizer(None, do_lower_case,
                                           spm_model_file=spm_model_file)
    for token in ("[CLS]", "[SEP]"):
      if token not in reference.vocab:
        raise cli.UserError("%s has no %s piece" % (spm_model_file, token),
                            fix="Use the SentencePiece model the model was "
                            "trained with.")
    self.vocab = dict(reference.vocab)
    self.unk_id = reference.convert_tokens_to_ids(["[UNK]"])[0]
    self.do_lower_case = do_lower_case
    self._sentencepiece = text.SentencepieceTokenizer(
        model=reference.sp_model.serialized_model_proto(), out_type=tf.int32)
    super().__init__()

  def tokenize(self, texts):
    """Args: texts: tf.string [batch], UTF-8.

    Returns:
      tf.RaggedTensor int64 [batch, (pieces)]: each text's ids.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    if self.do_lower_case:
      decoded = tf.strings.unicode_decode(texts, "UTF-8", errors="replace",
                                          replacement_char=0xFFFD)
      rows = decoded.value_rowids()
      chars, source = self._lower(decoded.flat_values,
                                  self._classes(decoded.flat_values), rows,
                                  tables_lib.PLAIN_LOWER)
      texts = tf.strings.unicode_encode(tf.RaggedTensor.from_value_rowids(
          chars, tf.gather(rows, source), nrows=decoded.nrows()), "UTF-8")
    return tf.cast(self._sentencepiece.tokenize(texts), tf.int64)


def for_model(vocab_file, do_lower_case, spm_model_file=None):
  """The graph tokenizer of a model's vocabulary: SentencePiece when
  `spm_model_file` is given, else WordPiece from `vocab_file`."""
  if spm_model_file:
    return SentencePieceGraphTokenizer(spm_model_file, do_lower_case)
  return GraphTokenizer(vocab_file, do_lower_case)


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
