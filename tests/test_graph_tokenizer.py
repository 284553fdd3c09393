"""serving/graph_tokenizer.py against tokenization.FullTokenizer, id for id:
the tokenizer's own test texts, real GLUE and SQuAD text, generated text
from many scripts, every code point of the Basic Multilingual Plane, the
final-sigma rule, invalid UTF-8 and words around the 200-character limit,
with the cased and the uncased vocabulary; SentencePiece models, cased and
uncased; the raw words and their offsets."""
import ast
import csv
import json
import os
import random

import pytest
import sentencepiece
import tensorflow as tf

import tokenization
from serving import graph_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))

# (low, high) code point ranges that text is drawn from: scripts with and
# without case, marks, ideographs, every kind of space, control and format
# characters, punctuation and symbols, and code points no text should hold.
SCRIPTS = [
    (0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x52F),
    (0x530, 0x58F), (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F),
    (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x206F),
    (0x2070, 0x218F), (0x2190, 0x23FF), (0x2460, 0x24FF), (0x2C00, 0x2C7F),
    (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
    (0xE000, 0xF8FF), (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE6F),
    (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF), (0x10400, 0x1044F),
    (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF),
    (0xE0000, 0xE01EF), (0x0, 0x1F), (0x7F, 0x9F), (0x300, 0x36F),
]
SPACES = "\t\n\r \x0b\x0c\x1c\x85\xa0\u1680\u2002\u2028\u2029\u202f\u3000\u200b"


def _literals():
  """Every string literal of the tokenizer's tests."""
  with open(os.path.join(HERE, "test_tokenization.py"), encoding="utf-8") as f:
    tree = ast.parse(f.read())
  return sorted({node.value for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and
                 isinstance(node.value, str)})


def _real(assets_dir):
  texts = []
  with open(os.path.join(assets_dir, "glue", "MRPC", "dev.tsv"),
            encoding="utf-8-sig") as f:
    for row in list(csv.reader(f, delimiter="\t", quotechar=None))[1:]:
      texts += row[3:5]
  with open(os.path.join(assets_dir, "squad", "v1.1", "dev-v1.1.json"),
            encoding="utf-8") as f:
    articles = json.load(f)["data"]
  for article in articles[:20]:
    for paragraph in article["paragraphs"]:
      texts.append(paragraph["context"])
      texts += [qa["question"] for qa in paragraph["qas"]]
  return texts


def _generated(count, seed):
  rng = random.Random(seed)
  texts = []
  for _ in range(count):
    favoured = rng.sample(SCRIPTS, rng.randint(1, 3))
    chars = []
    for _ in range(rng.choice([rng.randint(1, 8), rng.randint(8, 80)])):
      if rng.random() < 0.15:
        chars.append(rng.choice(SPACES))
        continue
      low, high = rng.choice(favoured if rng.random() < 0.8 else SCRIPTS)
      chars.append(chr(rng.randint(low, high)))
    texts.append("".join(chars))
  return texts


def _sigma(count, seed):
  alphabet = ["\u03a3"] * 3 + list(
      "\u03c3\u0391aA'.:\u00b7\u2019\u0301\u0345\u00ad\u200d\u02b01 -"
      "\u4e00\u2028\u00a0\u0130\u0307\u3000\ufe0f\x00\t\u00aa\u2160\u24b6"
      "\u0149\ufb01_") + ["\U0001d400", "\U000e0001"]
  rng = random.Random(seed)
  return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
          for _ in range(count)]


def _invalid_utf8(count, seed):
  pieces = [b"abc", b" ", "caf\u00e9".encode(), "\u4e2d".encode(), b"\xc3",
            b"\xe4\xb8", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80", b"\xff", b"\xef\xbf\xbd", b"\x00",
            b"A\xcc\x81", "\u03a3".encode()]
  rng = random.Random(seed)
  return [b"".join(rng.choice(pieces) if rng.random() < 0.7 else
                   bytes(rng.randint(0, 255) for _ in range(2))
                   for _ in range(rng.randint(1, 10)))
          for _ in range(count)]


def _long_words():
  # Lengths that change with normalization: accents decomposed and dropped,
  # Hangul decomposed, U+0130 lowered to two characters, ideographs split.
  units = ["a", "\u00e9", "e\u0301", "\ud55c", "\u0130", "\u00df", "\u200b",
           "\ufb01", "\u4e00", "\u0345"]
  return ["w " + unit * length + " z" for unit in units
          for length in (99, 100, 101, 199, 200, 201, 250)]


def _every_code_point():
  """Each BMP code point inside a word, alone, and beside capital sigmas."""
  return ["x%sy %s \u0391%s\u03a3 \u03a3%s\u0391" % ((chr(code),) * 4)
          for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF]


def _graph_ids(vocab_file, do_lower_case, texts, batch_size=4096):
  graph = tf.Graph()
  with graph.as_default():
    tokenizer = graph_tokenizer.GraphTokenizer(vocab_file, do_lower_case)
    feed = tf.compat.v1.placeholder(tf.string, [None])
    ids = tokenizer.tokenize(feed)
    with tf.compat.v1.Session() as session:
      return [row for start in range(0, len(texts), batch_size)
              for row in session.run(ids, {
                  feed: texts[start:start + batch_size]}).to_list()]


def _check(vocab_file, do_lower_case, texts):
  reference = tokenization.FullTokenizer(vocab_file, do_lower_case)
  want = [reference.convert_tokens_to_ids(reference.tokenize(text))
          for text in texts]
  got = _graph_ids(vocab_file, do_lower_case, texts)
  wrong = [(text, g, w) for text, g, w in zip(texts, got, want) if g != w]
  assert not wrong, "%d of %d differ, first: %r" % (len(wrong), len(texts),
                                                    wrong[:3])


CASES = [("uncased", True), ("cased", False), ("uncased", False),
         ("cased", True)]


@pytest.mark.parametrize("vocab,do_lower_case", CASES)
def test_ids_equal_full_tokenizer(assets_dir, vocab, do_lower_case):
  vocab_file = os.path.join(assets_dir, "bert_vocab", vocab, "vocab.txt")
  _check(vocab_file, do_lower_case,
         _literals() + _real(assets_dir) + _generated(4000, 1) +
         _sigma(3000, 2) + _invalid_utf8(1000, 3) + _long_words() +
         ["", " ", ".", "\u0301", "\x00", "\u03a3"])


@pytest.mark.parametrize("vocab,do_lower_case", CASES[:2])
def test_every_code_point_as_full_tokenizer(assets_dir, vocab, do_lower_case):
  vocab_file = os.path.join(assets_dir, "bert_vocab", vocab, "vocab.txt")
  _check(vocab_file, do_lower_case, _every_code_point())


def test_a_vocabulary_with_gaps_keeps_the_ids(tmp_path):
  # An empty line and a repeated token leave ids no token maps to; the
  # other tokens keep their line numbers, as load_vocab gives them.
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text(
      "[PAD]\n[UNK]\n[CLS]\n[SEP]\n\nhello\nworld\nhello\n##s\n,\n",
      encoding="utf-8")
  _check(str(vocab_file), True, ["Hello, worlds", "hellos hello", "x"])


def test_a_missing_package_is_one_line(monkeypatch):
  monkeypatch.setitem(__import__("sys").modules, "tensorflow_text", None)
  with pytest.raises(Exception) as raised:
    graph_tokenizer.import_tensorflow_text()
  assert "tensorflow-text" in str(raised.value)
  assert "requirements-text.txt" in str(raised.value)


def test_words_with_offsets_equal_split_words_with_offsets(assets_dir):
  """The raw text's words (case, accents and control characters kept) and
  their code point offsets, as tokenization.split_words_with_offsets
  gives them, on generated text of every script and kind of space."""
  texts = (_literals() + _generated(3000, 5) + _sigma(300, 6) +
           ["", "  ", "\u2028a\u2029b\x0bc", "Smith-Jones,\u00a0(x)."])
  vocab_file = os.path.join(assets_dir, "bert_vocab", "cased", "vocab.txt")
  with tf.Graph().as_default():
    tokenizer = graph_tokenizer.GraphTokenizer(vocab_file, False)
    split = tokenizer.words_with_offsets(tf.constant(texts))
    with tf.compat.v1.Session() as session:
      words, starts, ends = (value.to_list() for value in session.run(split))
  for text, row, row_starts, row_ends in zip(texts, words, starts, ends):
    assert tokenization.split_words_with_offsets(text) == [
        (word.decode(), start, end)
        for word, start, end in zip(row, row_starts, row_ends)], repr(text)


@pytest.fixture(scope="module")
def spm_models(tmp_path_factory, assets_dir):
  """Two 600-piece SentencePiece models trained on MRPC and generated
  text, one with byte fallback (unknown characters as <0xNN> pieces)."""
  folder = tmp_path_factory.mktemp("spm")
  corpus = folder / "corpus.txt"
  corpus.write_text("\n".join(_real(assets_dir)[:3000] + _generated(60, 3)),
                    encoding="utf-8")
  models = []
  for byte_fallback in (False, True):
    prefix = str(folder / ("bytes" if byte_fallback else "plain"))
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=prefix, vocab_size=600,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], pad_id=0,
        unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]",
        unk_piece="[UNK]", byte_fallback=byte_fallback,
        character_coverage=0.98, minloglevel=2)
    models.append(prefix + ".model")
  return models


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_sentencepiece_ids_equal_full_tokenizer(assets_dir, spm_models,
                                                do_lower_case):
  """Every text gets FullTokenizer's ids, except where two segmentations
  score the same (a run of digits such as "000" as "0" + "00" or "00" +
  "0"): TensorFlow Text's SentencePiece build breaks such a tie the other
  way, so there the ids must spell the same text with the same score."""
  texts = (_literals() + _real(assets_dir)[3000:] + _generated(2000, 9) +
           _sigma(500, 2) + ["", " ", "\u0130STANBUL \u039f\u0394\u039f\u03a3"])
  for model in spm_models:
    reference = tokenization.FullTokenizer(None, do_lower_case,
                                           spm_model_file=model)
    with tf.Graph().as_default():
      tokenizer = graph_tokenizer.for_model(None, do_lower_case, model)
      ids = tokenizer.tokenize(tf.constant(texts))
      with tf.compat.v1.Session() as session:
        got = session.run(ids).to_list()
    processor = reference.sp_model
    ties = 0
    for text, graph_ids in zip(texts, got):
      want = reference.convert_tokens_to_ids(reference.tokenize(text))
      if graph_ids == want:
        continue
      ties += 1
      assert processor.decode(graph_ids) == processor.decode(want), text
      assert sum(map(processor.get_score, graph_ids)) == pytest.approx(
          sum(map(processor.get_score, want)), abs=1e-4), text
    assert ties < len(texts) / 100, ties
