# coding=utf-8
"""Tokenization as in Google's BERT: basic splitting, then WordPiece.

`FullTokenizer` runs `BasicTokenizer` (cleanup, CJK and punctuation
splitting, optional lowercasing with accent stripping) and then
`WordpieceTokenizer` (greedy longest-match-first subwords, "##" marks a
piece that continues a word). Given `spm_model_file` it uses a
SentencePiece model instead (the ALBERT-style vocabulary), keeping the same
interface: `tokenize`, `convert_tokens_to_ids`, `convert_ids_to_tokens`,
`vocab` and `inv_vocab`.

Files are read through `tf.io.gfile`, so vocabularies and models may live
on any file system TensorFlow knows (local, gs://, ...).
"""

import collections
import re
import unicodedata

import sentencepiece as spm
import tensorflow as tf

from userio import cli

# Google's released checkpoints, by the name of their directory, and whether
# their pretraining text was lowercased.
_LOWERCASED_MODELS = (
    "uncased_L-24_H-1024_A-16",
    "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12",
    "chinese_L-12_H-768_A-12",
)
_CASED_MODELS = (
    "cased_L-12_H-768_A-12",
    "cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
)

# A vocabulary is cased when at least this share of its pieces with letters
# holds an uppercase letter (Google's cased vocab: 29%; uncased: none).
_CASED_VOCAB_SHARE = 0.05

# ASCII characters that are not letters or digits; all count as punctuation
# (e.g. "$", "^", "`" are symbols in Unicode but split like punctuation).
_ASCII_PUNCTUATION_RANGES = ((33, 47), (58, 64), (91, 96), (123, 126))

# The CJK Unified Ideographs blocks (and compatibility blocks) of the
# original. Hiragana, Katakana and Hangul are not in them: those scripts
# separate words with spaces or are handled by WordPiece.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Refuses a `do_lower_case` that contradicts a Google checkpoint's name.

  The model name is the directory holding `bert_model.ckpt`, e.g.
  ".../uncased_L-12_H-768_A-12/bert_model.ckpt". Checkpoints with other
  names (renamed, fine-tuned, converted) are not checked.

  Raises:
    ValueError: the name is a known uncased model and `do_lower_case` is
      False, or a known cased model and `do_lower_case` is True.
  """
  if not init_checkpoint:
    return
  match = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _LOWERCASED_MODELS and not do_lower_case:
    kind, fix = "lowercased (uncased)", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    kind, fix = "cased", "False"
  else:
    return
  raise cli.UserError(
      "--init_checkpoint=%s is Google's %s model `%s`, but "
      "--do_lower_case=%s was given; set --do_lower_case=%s so that "
      "fine-tuning sees text cased the way pretraining did." %
      (init_checkpoint, kind, model_name, bool(do_lower_case), fix))


def vocab_is_cased(tokens):
  """Whether a vocabulary was made from cased text, judged from its pieces.

  An uncased vocabulary (text lowercased before it was built) holds no
  uppercase letter outside its [bracketed] special tokens; a cased one holds
  many (Google's cased vocab: 8366 of 28890 pieces with letters).

  Args:
    tokens: the vocabulary's tokens (WordPiece lines or SentencePiece
      pieces).

  Returns:
    False (uncased), True (cased), or None when the pieces do not tell (no
    letters with case, or only a few uppercase pieces).
  """
  with_letters = uppercase = 0
  for token in tokens:
    if token.startswith("[") and token.endswith("]"):
      continue
    if any(c.lower() != c.upper() for c in token):
      with_letters += 1
      if any(c != c.lower() for c in token):
        uppercase += 1
  if not with_letters:
    return None
  if uppercase == 0:
    return False
  if uppercase >= _CASED_VOCAB_SHARE * with_letters:
    return True
  return None


def validate_case_matches_vocab(do_lower_case, tokens, vocab_file):
  """Refuses a `do_lower_case` that contradicts the vocabulary's casing.

  Lowercased text meets a cased vocabulary with most capitalized words
  missing, and cased text an uncased vocabulary with every capital unknown;
  either way fine-tuning would see different pieces than pretraining did.

  Raises:
    cli.UserError naming --do_lower_case and the value to set.
  """
  cased = vocab_is_cased(tokens)
  if cased is None or cased != bool(do_lower_case):
    return
  kind, fix = ("cased (it holds uppercase pieces)", "False") if cased else (
      "uncased (it holds no uppercase pieces)", "True")
  raise cli.UserError(
      "%s is %s, but --do_lower_case=%s was given; set --do_lower_case=%s "
      "so that fine-tuning sees text cased the way pretraining did." %
      (vocab_file, kind, bool(do_lower_case), fix))


def convert_to_unicode(text):
  """Returns `text` as `str`, decoding UTF-8 bytes (bad bytes dropped)."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s (expected str or bytes)" %
                   type(text).__name__)


def printable_text(text):
  """Returns `text` as a `str` fit for printing or logging."""
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """Reads a vocabulary file, one token per line, into an OrderedDict.

  Each line is stripped of surrounding whitespace; the id of a token is its
  line number counted from 0.

  Returns:
    OrderedDict token (str) -> id (int), in file order.
  Raises:
    ValueError: `vocab_file` is empty or None.
    FileNotFoundError: `vocab_file` does not exist.
  """
  if not vocab_file:
    raise ValueError("No vocabulary given; pass --vocab_file (vocab.txt of "
                     "the checkpoint) or --spm_model_file.")
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(
        "Vocabulary file %r not found; pass the vocab.txt that comes with the "
        "checkpoint as --vocab_file." % (vocab_file,))
  vocab = collections.OrderedDict()
  with tf.io.gfile.GFile(vocab_file, "r") as reader:
    for index, line in enumerate(reader):
      vocab[convert_to_unicode(line).strip()] = index
  return vocab


def convert_by_vocab(vocab, items):
  """Maps each of `items` through the dict `vocab` (token->id or id->token).

  Raises:
    KeyError: an item is not in `vocab`, naming the item.
  """
  output = []
  for item in items:
    if item not in vocab:
      raise KeyError("%r is not in the vocabulary (%d entries); tokens from "
                     "FullTokenizer.tokenize are always in it." %
                     (item, len(vocab)))
    output.append(vocab[item])
  return output


def convert_tokens_to_ids(vocab, tokens):
  """Returns the ids of `tokens` in `vocab` (token -> id)."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  """Returns the tokens of `ids` in `inv_vocab` (id -> token)."""
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Splits `text` on runs of whitespace; [] for blank text."""
  return text.split()


def split_words_with_offsets(text):
  """The words of raw text with their character offsets, cut by
  BasicTokenizer's rules for whitespace and punctuation (each punctuation
  character a word of its own), case and accents kept: how a tagger's
  words line up with the text a user gave.

  Returns:
    list of (word, start, end), `text[start:end] == word`.
  """
  words = []
  start = None
  for index, char in enumerate(text + " "):
    space = index == len(text) or _is_whitespace(char)
    punctuation = not space and _is_punctuation(char)
    if start is not None and (space or punctuation):
      words.append((text[start:index], start, index))
      start = None
    if punctuation:
      words.append((char, index, index + 1))
    elif not space and start is None:
      start = index
  return words


class FullTokenizer(object):
  """End-to-end tokenizer: text -> tokens -> ids, and back.

  With `spm_model_file` the SentencePiece model replaces basic + WordPiece
  tokenization and `vocab_file` is ignored (it may be None). Its pipeline:
  lowercase the text if `do_lower_case` (as ALBERT does), then let the
  model encode it into pieces; the model's own normalization rules (stored
  in the model file) apply, this class adds no other normalization.
  `vocab` then lists the model's pieces in id order.
  """

  def __init__(self, vocab_file, do_lower_case=True, spm_model_file=None):
    self.do_lower_case = do_lower_case
    self.sp_model = None
    if spm_model_file:
      self.sp_model = _load_sentencepiece(spm_model_file)
      self.vocab = collections.OrderedDict(
          (self.sp_model.id_to_piece(i), i)
          for i in range(self.sp_model.get_piece_size()))
    else:
      self.vocab = load_vocab(vocab_file)
      self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
      self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    self.inv_vocab = {index: token for token, index in self.vocab.items()}

  def tokenize(self, text):
    """Returns the list of tokens (str) of `text` (str or UTF-8 bytes)."""
    text = convert_to_unicode(text)
    if self.sp_model is not None:
      if self.do_lower_case:
        text = text.lower()
      return self.sp_model.encode(text, out_type=str)
    split_tokens = []
    for token in self.basic_tokenizer.tokenize(text):
      split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
    return split_tokens

  def convert_tokens_to_ids(self, tokens):
    """Returns the id of each token; unknown pieces get the spm unk id."""
    if self.sp_model is not None:
      return [self.sp_model.piece_to_id(printable_text(t)) for t in tokens]
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Returns the token of each id."""
    if self.sp_model is not None:
      return [self.sp_model.id_to_piece(int(i)) for i in ids]
    return convert_by_vocab(self.inv_vocab, ids)


def _load_sentencepiece(spm_model_file):
  """Loads a SentencePiece model from any tf.io.gfile path."""
  if not tf.io.gfile.exists(spm_model_file):
    raise FileNotFoundError(
        "SentencePiece model %r not found; pass the .model file that comes "
        "with the checkpoint as --spm_model_file." % (spm_model_file,))
  with tf.io.gfile.GFile(spm_model_file, "rb") as reader:
    return spm.SentencePieceProcessor(model_proto=reader.read())


class BasicTokenizer(object):
  """Splits on whitespace and punctuation; optionally lowercases.

  Steps: drop NUL, U+FFFD and control characters; map every whitespace
  character to a space; put spaces around CJK ideographs (Chinese has no
  spaces between words, so each character becomes a word); split on
  whitespace; if `do_lower_case`, lowercase and strip accents; make every
  punctuation character a token of its own.
  """

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    """Returns the list of words and punctuation tokens of `text`."""
    text = convert_to_unicode(text)
    text = self._clean_text(text)
    text = self._tokenize_chinese_chars(text)
    split_tokens = []
    for token in whitespace_tokenize(text):
      if self.do_lower_case:
        token = self._run_strip_accents(token.lower())
      split_tokens.extend(self._run_split_on_punc(token))
    # Re-split: stripping accents can leave an empty token (a lone mark).
    return whitespace_tokenize(" ".join(split_tokens))

  def _run_strip_accents(self, text):
    """Decomposes (NFD) and drops the nonspacing marks (accents)."""
    text = unicodedata.normalize("NFD", text)
    return "".join(c for c in text if unicodedata.category(c) != "Mn")

  def _run_split_on_punc(self, text):
    """Splits `text` into runs of non-punctuation and single punctuation."""
    output = []
    start_new_word = True
    for char in text:
      if _is_punctuation(char):
        output.append(char)
        start_new_word = True
      else:
        if start_new_word:
          output.append("")
          start_new_word = False
        output[-1] += char
    return output

  def _tokenize_chinese_chars(self, text):
    """Puts a space on both sides of every CJK ideograph."""
    output = []
    for char in text:
      if self._is_chinese_char(ord(char)):
        output.extend((" ", char, " "))
      else:
        output.append(char)
    return "".join(output)

  def _is_chinese_char(self, cp):
    """Whether code point `cp` is in one of the CJK ideograph blocks."""
    return any(low <= cp <= high for low, high in _CJK_RANGES)

  def _clean_text(self, text):
    """Drops invalid and control characters; whitespace becomes a space."""
    output = []
    for char in text:
      cp = ord(char)
      if cp == 0 or cp == 0xFFFD or _is_control(char):
        continue
      output.append(" " if _is_whitespace(char) else char)
    return "".join(output)


class WordpieceTokenizer(object):
  """Greedy longest-match-first WordPiece tokenization."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text):
    """Splits each whitespace-separated word of `text` into pieces.

    Each word is cut from the left into the longest piece in the vocabulary,
    pieces after the first carrying the "##" prefix, e.g. "unaffable" ->
    ["una", "##ffa", "##ble"] with Google's uncased vocabulary. A word that
    cannot be covered completely, or that is longer than
    `max_input_chars_per_word`, becomes the single token `unk_token`.

    Args:
      text: a single token or whitespace-separated tokens, already passed
        through `BasicTokenizer`.
    Returns:
      A list of wordpiece tokens.
    """
    output_tokens = []
    for token in whitespace_tokenize(convert_to_unicode(text)):
      if len(token) > self.max_input_chars_per_word:
        output_tokens.append(self.unk_token)
        continue
      pieces = self._split_word(token)
      if pieces is None:
        output_tokens.append(self.unk_token)
      else:
        output_tokens.extend(pieces)
    return output_tokens

  def _split_word(self, word):
    """Returns the pieces of `word`, or None if it cannot be covered."""
    pieces = []
    start = 0
    while start < len(word):
      end = len(word)
      piece = None
      while start < end:
        candidate = word[start:end]
        if start > 0:
          candidate = "##" + candidate
        if candidate in self.vocab:
          piece = candidate
          break
        end -= 1
      if piece is None:
        return None
      pieces.append(piece)
      start = end
    return pieces


def _is_whitespace(char):
  """Whether `char` is whitespace: space, \\t, \\n, \\r or category Zs."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def _is_control(char):
  """Whether `char` is a control (Cc) or format (Cf) character.

  \\t, \\n and \\r are control characters in Unicode but count as whitespace.
  Google's final tokenization.py drops these two categories only: private
  use (Co), unassigned (Cn) and surrogate (Cs) code points stay in the text
  (and become [UNK] unless the vocabulary has them), which changes the
  tokens and so every later random draw of create_pretraining_data.py.
  """
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  """Whether `char` is punctuation: any non-alphanumeric ASCII or P*."""
  cp = ord(char)
  if any(low <= cp <= high for low, high in _ASCII_PUNCTUATION_RANGES):
    return True
  return unicodedata.category(char).startswith("P")
