# coding=utf-8
"""Google's character rules, one answer per code point, for graph ops.

tokenization.BasicTokenizer decides each character with Python's
`unicodedata` and `str` methods. TensorFlow Text's normalizers carry ICU's
data instead (case folding with compatibility mappings, another Unicode
version, other whitespace and control classes) and disagree on thousands
of code points. So the rules are asked of tokenization.py itself, once per
code point, and kept as sorted arrays that tf.searchsorted and tf.gather
read: the graph then tokenizes as tokenization.py does on the Python that
built the tables (`unicodedata.unidata_version`).
"""

import functools
import unicodedata

import numpy as np

import tokenization

CODE_POINTS = 0x110000
FINAL_SIGMA = 0x3C2
CAPITAL_SIGMA = 0x3A3

# Names of the two lowercasing tables.
LOWER = "lower"
PLAIN_LOWER = "plain_lower"

# Bits of a code point's class.
DROP = 1     # _clean_text removes it (NUL, U+FFFD, Cc and Cf but \t\n\r)
SPACE = 2    # separates words (_is_whitespace, or str.split's isspace)
CJK = 4      # an ideograph: a word of its own
PUNCT = 8    # punctuation: a word of its own
CASE_IGNORABLE = 16  # skipped when str.lower looks for a final sigma
CASED = 32   # cased and not case-ignorable, as str.lower sees it
WORD_BREAK = 64  # _is_whitespace: where split_words_with_offsets cuts raw text

_basic = tokenization.BasicTokenizer(do_lower_case=True)


def _class_bits(char):
  """The class bits of one character."""
  code = ord(char)
  if code == 0 or code == 0xFFFD or tokenization._is_control(char):  # pylint: disable=protected-access
    bits = DROP
  elif tokenization._is_whitespace(char) or char.isspace():  # pylint: disable=protected-access
    # U+2028 and U+2029 are not Zs, survive cleaning, and still split words
    # (whitespace_tokenize is str.split).
    bits = SPACE
  else:
    bits = 0
  if tokenization._is_whitespace(char):  # pylint: disable=protected-access
    bits |= WORD_BREAK
  if _basic._is_chinese_char(code):  # pylint: disable=protected-access
    bits |= CJK
  if tokenization._is_punctuation(char):  # pylint: disable=protected-access
    bits |= PUNCT
  # CPython lowers U+03A3 to a final sigma when the nearest character before
  # it that is not case-ignorable is cased and the nearest after is not.
  # Asked of str.lower: "c" + "Σ" ends in "ς" iff c is cased (and not
  # ignorable); "A" + c + "Σ" does iff c is cased or ignorable.
  if (char + "\u03a3").lower()[-1] == "\u03c2":
    bits |= CASED
  elif ("A" + char + "\u03a3").lower()[-1] == "\u03c2":
    bits |= CASE_IGNORABLE
  return bits


@functools.lru_cache(maxsize=None)
def tables():
  """Returns a dict of int32 arrays:

    class_starts, class_values: the class bits of code point c are
      class_values[searchsorted(class_starts, c, side="right") - 1] (runs
      of equal bits; about 1,400 of them).
    lower_keys (sorted), lower_splits, lower_values: lowercasing, NFD and
      dropping Mn marks, per character: code point lower_keys[i] becomes
      lower_values[lower_splits[i]:lower_splits[i + 1]] (possibly nothing);
      a code point not in lower_keys stays. U+03A3 maps to U+03C3; the
      graph puts U+03C2 where str.lower's final-sigma rule applies.
    plain_lower_keys, plain_lower_splits, plain_lower_values: str.lower
      alone, per character, in the same layout (the SentencePiece path,
      which lowercases without stripping accents).

  Lowering one character at a time equals lowering the word except for
  that rule and for NFD's reordering of combining marks, which only moves
  marks of class Mc past each other (no BERT vocabulary has such a word).
  """
  bits = np.zeros(CODE_POINTS, np.int32)
  lower, plain_lower = {}, {}
  for code in range(CODE_POINTS):
    if 0xD800 <= code <= 0xDFFF:  # Surrogates: no UTF-8 decoder yields one.
      bits[code] = DROP
      continue
    char = chr(code)
    bits[code] = _class_bits(char)
    plain = "\u03c3" if code == CAPITAL_SIGMA else char.lower()
    if plain != char:
      plain_lower[code] = plain
    if bits[code] & (DROP | SPACE):
      continue
    lowered = _basic._run_strip_accents(plain)  # pylint: disable=protected-access
    if lowered != char:
      lower[code] = lowered
  _check(bits, lower.values())
  change = np.flatnonzero(np.diff(bits)) + 1
  starts = np.concatenate([[0], change]).astype(np.int32)
  result = {"class_starts": starts, "class_values": bits[starts]}
  result.update(_mapping_arrays(LOWER, lower))
  result.update(_mapping_arrays(PLAIN_LOWER, plain_lower))
  return result


def _mapping_arrays(name, mapping):
  """The sorted keys, splits and values arrays of a code point -> string
  mapping (see `tables`)."""
  keys = sorted(mapping)
  lengths = [len(mapping[key]) for key in keys]
  return {
      name + "_keys": np.array(keys, np.int32),
      name + "_splits": np.concatenate([[0], np.cumsum(lengths)]).astype(
          np.int32),
      name + "_values": np.array(
          [ord(c) for key in keys for c in mapping[key]], np.int32),
  }


def _check(bits, lower_values):
  """The assumptions the graph's word splitting rests on, for this Python's
  Unicode data: a separator or ideograph also ends a final-sigma context,
  and lowering yields no dropped character and no separator that str.split
  would not split at."""
  ends_context = (bits & (SPACE | CJK)) != 0
  assert not np.any(ends_context & ((bits & (CASE_IGNORABLE | CASED)) != 0))
  for values in lower_values:
    for code in map(ord, values):
      assert not bits[code] & DROP, hex(code)
      assert bool(bits[code] & SPACE) == chr(code).isspace(), hex(code)


UNICODE_VERSION = unicodedata.unidata_version
