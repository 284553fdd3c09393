# coding=utf-8
"""Tests of create_pretraining_data.py.

The instance-building functions run with a scripted random source that
returns the draws a test lists and checks that they are asked for in that
order with those arguments; the expected instances are worked out by hand
from the algorithm's rules for those draws. Token ids in these tests are
arbitrary integers; [CLS], [SEP] and [MASK] are 2, 3 and 4.

The whole script runs in-process on small texts with Google's uncased
vocabulary (../shared/assets), and its records are parsed with
tf.io.parse_single_example.
"""

import hashlib
import json
import os
import random

from absl import flags
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from corpus import text_files
from userio import cli
from corpus import pretraining_instances
import create_pretraining_data as cpd
import tokenization

CLS, SEP, MASK = 2, 3, 4
VOCAB = pretraining_instances.MaskingVocab(cls=CLS, sep=SEP, mask=MASK,
                         words=list(range(40, 50)),
                         continuations=frozenset([60, 61, 62]))
SPM_WORD_START = "\u2581"


class ScriptedRandom(object):
  """Returns scripted draws, checking the kind and arguments of each call.

  Script entries: ("random", value), ("randint", a, b, value) and
  ("shuffle", length, order), where order lists the old index of each new
  position.
  """

  def __init__(self, script):
    self._script = list(script)

  def _next(self, kind, *args):
    assert self._script, "unexpected draw %s%r" % (kind, args)
    entry = self._script.pop(0)
    assert entry[:-1] == (kind,) + args, (
        "expected %r, got %s%r" % (entry, kind, args))
    return entry[-1]

  def random(self):
    return self._next("random")

  def randint(self, a, b):
    return self._next("randint", a, b)

  def shuffle(self, items):
    order = self._next("shuffle", len(items))
    items[:] = [items[i] for i in order]

  def assert_done(self):
    assert not self._script, "draws not made: %r" % (self._script,)


def _options(max_seq_length=16, short_seq_prob=0.1, masked_lm_prob=0.25,
             max_predictions_per_seq=20, do_whole_word_mask=False,
             dupe_factor=1):
  return pretraining_instances.InstanceOptions(max_seq_length, short_seq_prob, masked_lm_prob,
                             max_predictions_per_seq, do_whole_word_mask,
                             dupe_factor)


def _fields(instance):
  return (instance.tokens, instance.segment_ids,
          instance.masked_lm_positions, instance.masked_lm_labels,
          instance.is_random_next)


# ---------------------------------------------------------------------------
# Truncation and masking.
# ---------------------------------------------------------------------------


def test_truncation_pops_the_longer_segment_at_the_drawn_end():
  a, b = [1, 2, 3, 4, 5], [6, 7]
  rng = ScriptedRandom([("random", 0.3),    # < 0.5: A loses its front
                        ("random", 0.5),    # not < 0.5: A loses its back
                        ("random", 0.1)])   # front again
  cpd.truncate_seq_pair(a, b, 4, rng)
  rng.assert_done()
  assert (a, b) == ([3, 4], [6, 7])


def test_truncation_takes_b_on_a_tie():
  a, b = [1, 2], [3, 4]
  rng = ScriptedRandom([("random", 0.9)])
  cpd.truncate_seq_pair(a, b, 3, rng)
  rng.assert_done()
  assert (a, b) == ([1, 2], [3])


@pytest.mark.parametrize("length,prob,max_predictions,expected", [
    (10, 0.25, 20, 2),   # 2.5 rounds to even: 2 (Python 2 gave 3)
    (14, 0.25, 20, 4),   # 3.5 -> 4
    (6, 0.25, 20, 2),    # 1.5 -> 2
    (18, 0.25, 20, 4),   # 4.5 -> 4
    (20, 0.125, 20, 2),  # 2.5 -> 2
    (5, 0.1, 20, 1),     # 0.5 -> 0, but at least one
    (40, 0.5, 5, 5),     # 20, capped by max_predictions_per_seq
])
def test_number_of_masked_positions(length, prob, max_predictions, expected):
  tokens = [CLS] + [10] * (length - 4) + [SEP, 11, SEP]
  for seed in range(5):
    _, positions, labels = cpd.create_masked_lm_predictions(
        tokens, prob, max_predictions, VOCAB, random.Random(seed))
    assert len(positions) == len(labels) == expected
    assert positions == sorted(positions)
    assert not {0, length - 3, length - 1} & set(positions)


def test_masking_draws_and_replacements():
  # 12 tokens at 0.25: 3 predictions; candidates are positions 1-5, 7-10.
  tokens = [CLS, 21, 22, 23, 24, 25, SEP, 26, 27, 28, 29, SEP]
  rng = ScriptedRandom([
      ("shuffle", 9, [8, 0, 4, 1, 2, 3, 5, 6, 7]),  # positions 10, 1, 5
      ("random", 0.79),                    # position 10: [MASK]
      ("random", 0.8), ("random", 0.49),   # position 1: kept as it is
      ("random", 0.95), ("random", 0.5),   # position 5: a random word,
      ("randint", 0, 9, 3),                # the vocabulary's 4th entry
  ])
  output, positions, labels = cpd.create_masked_lm_predictions(
      tokens, 0.25, 20, VOCAB, rng)
  rng.assert_done()
  assert positions == [1, 5, 10]
  assert labels == [21, 25, 29]
  assert output == [CLS, 21, 22, 23, 24, 43, SEP, 26, 27, 28, MASK, SEP]


def test_whole_word_groups_and_skipped_groups():
  # 60-62 continue a word. Groups: [1, 2, 3], [4, 6] (a continuation after
  # [SEP] joins the group before it, as in Google's code) and [7].
  tokens = [CLS, 20, 60, 61, 21, SEP, 62, 22, SEP]
  # 9 tokens at 0.25: 2 predictions. The 3-piece word does not fit.
  rng = ScriptedRandom([("shuffle", 3, [0, 1, 2]),
                        ("random", 0.1), ("random", 0.1)])
  output, positions, labels = cpd.create_masked_lm_predictions(
      tokens, 0.25, 20, VOCAB, rng, do_whole_word_mask=True)
  rng.assert_done()
  assert positions == [4, 6] and labels == [21, 62]
  assert output == [CLS, 20, 60, 61, MASK, SEP, MASK, 22, SEP]

  # [7] first; then neither word fits in the one prediction left.
  rng = ScriptedRandom([("shuffle", 3, [2, 0, 1]), ("random", 0.1)])
  _, positions, _ = cpd.create_masked_lm_predictions(
      tokens, 0.25, 20, VOCAB, rng, do_whole_word_mask=True)
  rng.assert_done()
  assert positions == [7]

  # Without whole-word masking every piece is a candidate of its own.
  rng = ScriptedRandom([("shuffle", 6, [1, 0, 2, 3, 4, 5]),
                        ("random", 0.1), ("random", 0.1)])
  _, positions, _ = cpd.create_masked_lm_predictions(tokens, 0.25, 20, VOCAB,
                                                     rng)
  rng.assert_done()
  assert positions == [1, 2]


# ---------------------------------------------------------------------------
# Pairs from documents.
# ---------------------------------------------------------------------------


def test_unused_sentences_are_put_back():
  document = [[11, 11], [12, 12], [13, 13], [14, 14]]
  other = [[19, 19, 19]]
  rng = ScriptedRandom([
      ("random", 0.5),            # not a short sequence: target 5 tokens
      # Chunk [11 11][12 12][13 13] reaches 6 >= 5 tokens.
      ("randint", 1, 2, 1),       # A = [11 11]
      ("random", 0.3),            # random next
      ("randint", 0, 1, 1),       # the other document
      ("randint", 0, 0, 0),       # from its first sentence: B = [19 19 19]
      ("shuffle", 5, [0, 1, 2, 3, 4]), ("random", 0.1),
      # [12 12] and [13 13] were put back: the next chunk starts with them.
      ("randint", 1, 2, 2),       # A = [12 12 13 13]
      ("random", 0.6),            # actual next: B = [14 14]
      ("random", 0.7),            # 6 > 5 tokens: A loses its back
      ("shuffle", 5, [0, 1, 2, 3, 4]), ("random", 0.1),
  ])
  instances = cpd.create_instances_from_document(
      [document, other], 0, _options(max_seq_length=8, short_seq_prob=0.0,
                                     masked_lm_prob=0.1), VOCAB, rng)
  rng.assert_done()
  assert [_fields(i) for i in instances] == [
      ([CLS, MASK, 11, SEP, 19, 19, 19, SEP], [0, 0, 0, 0, 1, 1, 1, 1],
       [1], [11], True),
      ([CLS, MASK, 12, 13, SEP, 14, 14, SEP], [0, 0, 0, 0, 0, 1, 1, 1],
       [1], [12], False),
  ]


def test_corpus_draws_in_googles_order():
  d0 = [[21, 22], [23]]
  d1 = [[31], [32, 33]]
  rng = ScriptedRandom([
      ("shuffle", 2, [1, 0]),      # documents: d1, d0
      # d1: full length; one chunk of both sentences, A = [31].
      ("random", 0.5), ("randint", 1, 1, 1),
      ("random", 0.7),             # actual next: B = [32 33]
      # 6 tokens: 2 predictions among positions 1, 3, 4.
      ("shuffle", 3, [2, 0, 1]), ("random", 0.0), ("random", 0.0),
      # d0: short, target 2 tokens; chunk [21 22] is one sentence, so its B
      # is random without a draw.
      ("random", 0.05), ("randint", 2, 13, 2),
      ("randint", 0, 1, 1),        # d0 itself: draw again
      ("randint", 0, 1, 0), ("randint", 0, 1, 1),  # d1 from [32 33]
      # 7 tokens: 2 predictions.
      ("shuffle", 4, [0, 1, 2, 3]),
      ("random", 0.9), ("random", 0.2),              # 21 kept
      ("random", 0.85), ("random", 0.6), ("randint", 0, 9, 7),  # 22 -> 47
      # The last sentence [23] alone, B from d1's [31].
      ("randint", 0, 1, 0), ("randint", 0, 1, 0),
      ("shuffle", 2, [1, 0]), ("random", 0.3),       # 5 tokens: 1
      ("shuffle", 3, [2, 0, 1]),   # all instances
  ])
  records = cpd.create_training_instances([d0, d1], _options(), VOCAB, rng,
                                          make_record=_fields)
  rng.assert_done()
  assert records == [
      ([CLS, 23, SEP, MASK, SEP], [0, 0, 0, 1, 1], [3], [31], True),
      ([CLS, MASK, SEP, 32, MASK, SEP], [0, 0, 0, 1, 1, 1], [1, 4],
       [31, 33], False),
      ([CLS, 21, 47, SEP, 32, 33, SEP], [0, 0, 0, 0, 1, 1, 1], [1, 2],
       [21, 22], True),
  ]


def test_passes_and_the_fallback_to_the_same_document():
  documents = [[[11]], [[21]]]
  rng = ScriptedRandom([
      ("shuffle", 2, [0, 1]),      # once, before all passes
      # Pass 1. One-sentence documents: B is always random.
      ("random", 0.5), ("randint", 0, 1, 1), ("randint", 0, 0, 0),
      ("shuffle", 2, [0, 1]), ("random", 0.1),
      ("random", 0.5), ("randint", 0, 1, 0), ("randint", 0, 0, 0),
      ("shuffle", 2, [1, 0]), ("random", 0.1),
      # Pass 2. Ten draws of the document itself: it is used after all.
      ("random", 0.5)] + [("randint", 0, 1, 0)] * 10 + [
          ("randint", 0, 0, 0), ("shuffle", 2, [0, 1]), ("random", 0.1),
          ("random", 0.5), ("randint", 0, 1, 0), ("randint", 0, 0, 0),
          ("shuffle", 2, [0, 1]), ("random", 0.1),
          ("shuffle", 4, [0, 1, 2, 3])])
  records = cpd.create_training_instances(
      documents, _options(dupe_factor=2), VOCAB, rng, make_record=_fields)
  rng.assert_done()
  segments = [0, 0, 0, 1, 1]
  assert records == [
      ([CLS, MASK, SEP, 21, SEP], segments, [1], [11], True),
      ([CLS, 21, SEP, MASK, SEP], segments, [3], [11], True),
      ([CLS, MASK, SEP, 11, SEP], segments, [1], [11], True),
      ([CLS, MASK, SEP, 11, SEP], segments, [1], [21], True),
  ]


# ---------------------------------------------------------------------------
# Reading the text (corpus/text_files.py, which create_vocab.py reads with
# too).
# ---------------------------------------------------------------------------


def test_document_boundaries(tmp_path, uncased_vocab):
  first = tmp_path / "a.txt"
  second = tmp_path / "b.txt"
  first.write_bytes(
      b"Line one.\r\nLine\rtwo.\r\n  \t \r\n\r\nDoc two.\n"
      b"\xe3\x80\x80\n"           # an ideographic space strips to nothing
      b"Doc three a.\n\xe2\x80\x8b\nDoc three b.")  # no final newline
  second.write_bytes(b"continues in file two.\n\n\n\nDoc four.\n")
  documents = [lines for lines, _ in text_files.read_documents(
      [str(first), str(second)])]
  # "\r" is dropped wherever it stands (as tf.io.gfile's reader does); the
  # zero-width space line is text (it ends no document) and has no tokens;
  # the first file's last document goes on in the second file.
  assert documents == [
      ["Line one.", "Linetwo."],
      ["Doc two."],
      ["Doc three a.", "\u200b", "Doc three b.", "continues in file two."],
      ["Doc four."],
  ]
  tokenizer = tokenization.FullTokenizer(uncased_vocab)
  tokens = pretraining_instances.tokenize_document(documents[2], tokenizer)
  assert [tokenizer.convert_ids_to_tokens(s) for s in tokens] == [
      ["doc", "three", "a", "."], ["doc", "three", "b", "."],
      ["continues", "in", "file", "two", "."]]


def test_documents_without_empty_lines_are_cut_at_shard_ends(tmp_path):
  """Ten 8-byte lines, no empty line, shards of 20 bytes: with no empty
  line in [20k, 20k + 20), shard k-1 ends at the first line start from
  20k + 20 on: 40, 64, 80 (the end), and the last of the ceil(80 / 20) = 4
  shards is empty."""
  path = tmp_path / "one_long_document.txt"
  path.write_text("".join("line %d.\n" % i for i in range(10)))  # 8 bytes
  specs = text_files.plan_shards([str(path)], 20)
  assert [text_files.shard_range(spec) for spec in specs] == [
      (0, 40, 80), (40, 64, 80), (64, 80, 80), (80, 80, 80)]
  assert [text_files.read_shard(spec) for spec in specs] == [
      ([["line %d." % i for i in range(5)]], 40),
      ([["line 5.", "line 6.", "line 7."]], 24),
      ([["line 8.", "line 9."]], 16), ([], 0)]
  whole = list(text_files.read_documents([str(path)]))
  assert len(whole) == 1 and len(whole[0][0]) == 10


def _reference_cuts(data, shard_bytes):
  """The shard ends of the rule in text_files.shard_range, worked out on
  the whole file's bytes: the cut near n = k * shard_bytes is after the
  first line that starts in [n, n + shard_bytes) and strips to nothing,
  else at the first line start from n + shard_bytes on (or the end)."""
  starts = [0] + [i + 1 for i, b in enumerate(data) if b == ord("\n")]
  starts = [p for p in starts if p < len(data)]
  ends = starts[1:] + [len(data)]

  def cut(nominal):
    if nominal == 0 or nominal >= len(data):
      return min(nominal, len(data))
    for start, end in zip(starts, ends):
      if nominal <= start < nominal + shard_bytes and not data[
          start:end].decode("utf-8").strip():
        return end
    return min([p for p in starts if p >= nominal + shard_bytes] +
               [len(data)])

  count = -(-len(data) // shard_bytes)
  return [cut(k * shard_bytes) for k in range(count + 1)]


def test_shards_follow_the_rule_and_hold_every_document_once(tmp_path):
  rng = random.Random(5)
  for trial in range(30):
    lines = []
    for _ in range(rng.randint(1, 40)):
      lines.append(rng.choice(["", " ", "\u3000", "a" * rng.randint(1, 30),
                               "word " * rng.randint(1, 8)]))
    path = tmp_path / ("t%d.txt" % trial)
    path.write_bytes(("\n".join(lines) + rng.choice(["", "\n"])).encode())
    data = path.read_bytes()
    shard_bytes = rng.randint(1, 60)
    specs = text_files.plan_shards([str(path)], shard_bytes)
    cuts = _reference_cuts(data, shard_bytes)
    assert [text_files.shard_range(spec)[:2] for spec in specs] == list(
        zip(cuts[:-1], cuts[1:])), (lines, shard_bytes)
    shards = [text_files.read_shard(spec) for spec in specs]
    assert sum(size for _, size in shards) == len(data)
    whole = [lines for lines, _ in text_files.read_documents([str(path)])]
    # Shards end at documents' ends, unless a document is longer than the
    # shards' window: then its parts, joined, are the document.
    joined = [line for documents, _ in shards for d in documents
              for line in d]
    assert joined == [line for d in whole for line in d]


def test_invalid_utf8_names_file_and_line(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"fine\n\nstill fine\nbad \xff here\n")
  with pytest.raises(cli.UserError, match=r"bad.txt:4: byte 0xff at column 5 is "
                     r"not UTF-8\. Convert the file to UTF-8\."):
    list(text_files.read_documents([str(path)]))


def test_a_bad_line_in_a_later_shard_is_named_by_its_number(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"".join(b"line %d.\n\n" % i for i in range(20)) +
                   b"bad \xff here\n")
  specs = text_files.plan_shards([str(path)], 30)
  with pytest.raises(cli.UserError, match=r"bad.txt:41: byte 0xff at "
                     r"column 5 is not UTF-8\. Convert the file to UTF-8\."):
    text_files.read_shard(specs[-1])


# ---------------------------------------------------------------------------
# The script on text files.
# ---------------------------------------------------------------------------

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It was not amused by such unaffable behaviour.",
    "Meanwhile the embeddings were tokenized into wordpieces.",
    "A second paragraph starts here, much shorter.",
    "Nobody expected the hyperparameters to matter this much.",
    "Then the run finished and everyone went home.",
]


@pytest.fixture(scope="module")
def uncased_vocab(assets_dir):
  return os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")


def _flags(*args):
  fv = flags.FlagValues()
  cpd.define_flags(fv)
  fv(["create_pretraining_data.py"] + list(args))
  return fv


def _write_corpus(path, documents):
  path.write_text("\n\n".join("\n".join(d) for d in documents) + "\n",
                  encoding="utf-8")
  return str(path)


def _small_corpus(tmp_path):
  documents = [SENTENCES[i:] + SENTENCES[:i] for i in range(6)]
  return _write_corpus(tmp_path / "corpus.txt", documents)


_FEATURES = {
    "input_ids": ("int", "max_seq_length"),
    "input_mask": ("int", "max_seq_length"),
    "segment_ids": ("int", "max_seq_length"),
    "masked_lm_positions": ("int", "max_predictions_per_seq"),
    "masked_lm_ids": ("int", "max_predictions_per_seq"),
    "masked_lm_weights": ("float", "max_predictions_per_seq"),
    "next_sentence_labels": ("int", None),
}


def _parse(path, max_seq_length, max_predictions_per_seq):
  """Each record of a TFRecord file as a dict of numpy arrays."""
  lengths = {"max_seq_length": max_seq_length,
             "max_predictions_per_seq": max_predictions_per_seq, None: 1}
  spec = {name: tf.io.FixedLenFeature(
      [lengths[length]], tf.int64 if kind == "int" else tf.float32)
          for name, (kind, length) in _FEATURES.items()}
  records = []
  for raw in tf.data.TFRecordDataset(path):
    example = tf.train.Example.FromString(raw.numpy())
    assert sorted(example.features.feature) == sorted(_FEATURES)
    parsed = tf.io.parse_single_example(raw, spec)
    records.append({name: value.numpy() for name, value in parsed.items()})
  return records


def _check_sidecar(path, vocab_file, vocab_size, num_records, **settings):
  """The sidecar beside `path` names the vocabulary by the sha256 of its
  bytes (hashed here) and its number of lines, and vouches for the file."""
  with open(path + ".meta.json", encoding="utf-8") as f:
    sidecar = json.load(f)
  with open(vocab_file, "rb") as f:
    assert sidecar["vocab_sha256"] == hashlib.sha256(f.read()).hexdigest()
  assert sidecar["vocab_size"] == vocab_size
  with open(path, "rb") as f:
    data = f.read()
  assert sidecar["file"] == {"bytes": len(data), "records": num_records,
                             "sha256": hashlib.sha256(data).hexdigest()}
  for name, value in settings.items():
    assert sidecar[name] == value, name


def test_record_format(tmp_path, uncased_vocab):
  corpus = _small_corpus(tmp_path)
  output = str(tmp_path / "out.tfrecord")
  cpd.run(_flags("--input_file=" + corpus, "--output_file=" + output,
                 "--vocab_file=" + uncased_vocab, "--max_seq_length=24",
                 "--max_predictions_per_seq=4", "--dupe_factor=2"))
  assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "out.tfrecord",
                                          "out.tfrecord.meta.json"]
  records = _parse(output, 24, 4)
  assert len(records) > 12
  _check_sidecar(output, uncased_vocab, 30522, len(records),
                 max_seq_length=24, max_predictions_per_seq=4)
  vocab = tokenization.load_vocab(uncased_vocab)
  cls, sep, mask = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
  for r in records:
    assert r["input_ids"].dtype == np.int64
    assert r["masked_lm_weights"].dtype == np.float32
    n = int(r["input_mask"].sum())
    assert list(r["input_mask"]) == [1] * n + [0] * (24 - n)
    ids = r["input_ids"]
    assert not ids[n:].any() and not r["segment_ids"][n:].any()
    # [CLS] A [SEP] B [SEP]: segment 0 up to the first [SEP], then 1.
    len_a = int((r["segment_ids"][:n] == 0).sum()) - 2
    assert list(r["segment_ids"][:n]) == [0] * (len_a + 2) + [1] * (
        n - len_a - 2)
    assert len_a >= 1 and n - len_a - 3 >= 1
    assert ids[0] == cls and ids[len_a + 1] == sep and ids[n - 1] == sep
    # Python 3's round, at least one, at most 4.
    k = int(r["masked_lm_weights"].sum())
    assert k == min(4, max(1, round(n * 0.15)))
    assert list(r["masked_lm_weights"]) == [1.0] * k + [0.0] * (4 - k)
    positions = r["masked_lm_positions"]
    assert list(positions[:k]) == sorted(set(positions[:k]))
    assert not positions[k:].any() and not r["masked_lm_ids"][k:].any()
    assert set(positions[:k]).isdisjoint({0, len_a + 1, n - 1})
    assert not set(r["masked_lm_ids"][:k]) & {0, cls, sep, mask}
    assert r["next_sentence_labels"][0] in (0, 1)


def test_round_robin_output_files(tmp_path, uncased_vocab):
  corpus = _small_corpus(tmp_path)
  args = ["--input_file=" + corpus, "--vocab_file=" + uncased_vocab,
          "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--dupe_factor=3"]
  single = str(tmp_path / "all.tfrecord")
  cpd.run(_flags("--output_file=" + single, *args))
  dealt = [str(tmp_path / ("part%d.tfrecord" % i)) for i in range(3)]
  cpd.run(_flags("--output_file=" + ",".join(dealt), *args))
  everything = _parse(single, 32, 5)
  assert len(everything) >= 7
  for i, path in enumerate(dealt):
    part = _parse(path, 32, 5)
    expected = everything[i::3]
    assert len(part) == len(expected)
    for got, want in zip(part, expected):
      for name in _FEATURES:
        np.testing.assert_array_equal(got[name], want[name])


def test_records_follow_the_text(tmp_path, uncased_vocab):
  # With one two-sentence document and nothing to mask but one token,
  # records spell the document out: actual-next pairs are its sentences.
  corpus = _write_corpus(tmp_path / "c.txt", [
      ["hello world .", "good morning ."], ["other text here ."]])
  output = str(tmp_path / "o.tfrecord")
  cpd.run(_flags("--input_file=" + corpus, "--output_file=" + output,
                 "--vocab_file=" + uncased_vocab, "--max_seq_length=16",
                 "--max_predictions_per_seq=1", "--masked_lm_prob=0.01",
                 "--short_seq_prob=0", "--dupe_factor=20"))
  tokenizer = tokenization.FullTokenizer(uncased_vocab)
  pairs = set()
  for r in _parse(output, 16, 1):
    ids = r["input_ids"].copy()
    ids[r["masked_lm_positions"][0]] = r["masked_lm_ids"][0]
    text = " ".join(tokenizer.convert_ids_to_tokens(
        ids[:int(r["input_mask"].sum())]))
    pairs.add((text, int(r["next_sentence_labels"][0])))
  assert ("[CLS] hello world . [SEP] good morning . [SEP]", 0) in pairs
  assert all(label == 1 for text, label in pairs
             if text != "[CLS] hello world . [SEP] good morning . [SEP]")
  assert {t for t, _ in pairs} <= {
      "[CLS] hello world . [SEP] good morning . [SEP]",
      "[CLS] hello world . [SEP] other text here . [SEP]",
      "[CLS] good morning . [SEP] other text here . [SEP]",
      "[CLS] other text here . [SEP] hello world . good morning . [SEP]",
      "[CLS] other text here . [SEP] good morning . [SEP]",
  }


# ---------------------------------------------------------------------------
# SentencePiece.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, assets_dir):
  """A 400-piece model trained on MRPC's sentences and SENTENCES."""
  with open(os.path.join(assets_dir, "glue", "MRPC", "train.tsv"),
            encoding="utf-8-sig") as f:
    mrpc = [line.split("\t")[3] for line in f.read().splitlines()[1:2001]]
  folder = tmp_path_factory.mktemp("spm")
  text = folder / "train.txt"
  text.write_text("\n".join(mrpc + SENTENCES), encoding="utf-8")
  prefix = str(folder / "tiny")
  spm.SentencePieceTrainer.train(
      input=str(text), model_prefix=prefix, vocab_size=400,
      user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], pad_id=0,
      unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]", unk_piece="[UNK]",
      minloglevel=2)
  return prefix + ".model"


def test_sentencepiece_continuations(spm_model):
  tokenizer = tokenization.FullTokenizer(None, spm_model_file=spm_model)
  vocab = pretraining_instances.masking_vocab(tokenizer)
  assert tokenizer.convert_ids_to_tokens(
      [vocab.cls, vocab.sep, vocab.mask]) == ["[CLS]", "[SEP]", "[MASK]"]
  pieces = tokenizer.tokenize("The embeddings were tokenized.")
  ids = tokenizer.convert_tokens_to_ids(pieces)
  assert len(pieces) > 4   # some words take several pieces
  for piece, i in zip(pieces, ids):
    assert (i in vocab.continuations) == (
        not piece.startswith(SPM_WORD_START)), piece
  # The padding and unknown pieces start words of their own.
  assert not {0, 1} & vocab.continuations


def test_sentencepiece_whole_word_masking(tmp_path, spm_model):
  # The model is cased (trained on MRPC's cased text).
  corpus = _small_corpus(tmp_path)
  output = str(tmp_path / "spm.tfrecord")
  cpd.run(_flags("--input_file=" + corpus, "--output_file=" + output,
                 "--spm_model_file=" + spm_model, "--do_whole_word_mask",
                 "--do_lower_case=False",
                 "--max_seq_length=40", "--max_predictions_per_seq=8",
                 "--masked_lm_prob=0.2", "--dupe_factor=3"))
  tokenizer = tokenization.FullTokenizer(None, do_lower_case=False,
                                         spm_model_file=spm_model)
  num_grouped = 0
  for r in _parse(output, 40, 8):
    n = int(r["input_mask"].sum())
    k = int(r["masked_lm_weights"].sum())
    original = r["input_ids"][:n].copy()
    original[r["masked_lm_positions"][:k]] = r["masked_lm_ids"][:k]
    pieces = tokenizer.convert_ids_to_tokens(original)
    # Words: a piece with the word-start mark and the pieces after it
    # ([CLS] and [SEP] are skipped, as in Google's grouping).
    words = []
    for i, piece in enumerate(pieces):
      if piece in ("[CLS]", "[SEP]"):
        continue
      if words and not piece.startswith(SPM_WORD_START) and piece != "[UNK]":
        words[-1].append(i)
      else:
        words.append([i])
    masked = set(r["masked_lm_positions"][:k])
    for word in words:
      assert set(word) <= masked or not set(word) & masked, (pieces, word)
      num_grouped += len(word) > 1 and set(word) <= masked
  assert num_grouped > 0


# ---------------------------------------------------------------------------
# The scalable mode.
# ---------------------------------------------------------------------------


def _synthetic_corpus(path, uncased_vocab, num_documents, seed,
                      sentences_per_document=(2, 12)):
  """Documents of random numbers of sentences of 4-14 whole words of the
  vocabulary."""
  words = [w for w in tokenization.load_vocab(uncased_vocab)
           if w.isalpha() and w.isascii() and len(w) > 2][:3000]
  rng = random.Random(seed)
  documents = [[" ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
                + "." for _ in range(rng.randint(*sentences_per_document))]
               for _ in range(num_documents)]
  return _write_corpus(path, documents)


def _scalable_args(corpus, output, uncased_vocab, *extra):
  return ["--input_file=" + corpus, "--output_file=" + output,
          "--vocab_file=" + uncased_vocab, "--mode=scalable",
          "--max_seq_length=64", "--max_predictions_per_seq=10",
          "--dupe_factor=2"] + list(extra)


def test_scalable_output_does_not_depend_on_workers(tmp_path, uncased_vocab):
  corpus = _synthetic_corpus(tmp_path / "c.txt", uncased_vocab, 120, 1)
  contents = []
  for workers in (1, 2):
    folder = tmp_path / ("w%d" % workers)
    folder.mkdir()
    cpd.run(_flags(*_scalable_args(
        corpus, str(folder / "data"), uncased_vocab,
        "--num_workers=%d" % workers, "--shard_size_mb=0.01")))
    names = sorted(os.listdir(folder))
    contents.append({n: (folder / n).read_bytes() for n in names})
  count = len(contents[0]) // 2
  assert count > 3   # shards of 10 kB of the 50 kB text
  shards = ["data-%05d-of-%05d" % (i, count) for i in range(count)]
  assert sorted(contents[0]) == sorted(
      shards + [name + ".meta.json" for name in shards])
  assert contents[0] == contents[1]
  for name in shards:
    _check_sidecar(str(tmp_path / "w1" / name), uncased_vocab, 30522,
                   len(_parse(str(tmp_path / "w1" / name), 64, 10)),
                   mode="scalable", shard_size_mb=0.01)


def test_one_shard_gives_the_faithful_records(tmp_path, uncased_vocab,
                                              caplog):
  corpus = _small_corpus(tmp_path)
  common = ["--input_file=" + corpus, "--vocab_file=" + uncased_vocab,
            "--max_seq_length=32", "--max_predictions_per_seq=5"]
  cpd.run(_flags("--output_file=" + str(tmp_path / "f"), *common))
  # A shard of an earlier run with another shard count.
  (tmp_path / "s-00002-of-00003").write_bytes(b"")
  cpd.run(_flags("--output_file=" + str(tmp_path / "s"), "--mode=scalable",
                 "--num_workers=1", *common))
  assert (tmp_path / "s-00000-of-00001").read_bytes() == (
      tmp_path / "f").read_bytes()
  assert "1 other files match %s-*-of-*" % (tmp_path / "s") in caplog.text


def test_scalable_instance_statistics(tmp_path, uncased_vocab):
  # Long documents: few chunks are a document's last lone sentence, whose
  # next segment is always random (which pushes the fraction above 0.5).
  corpus = _synthetic_corpus(tmp_path / "c.txt", uncased_vocab, 40, 2,
                             sentences_per_document=(80, 120))
  output = str(tmp_path / "data")
  cpd.run(_flags(*_scalable_args(corpus, output, uncased_vocab,
                                 "--num_workers=2", "--shard_size_mb=0.05",
                                 "--masked_lm_prob=0.15")))
  vocab = tokenization.load_vocab(uncased_vocab)
  records = []
  shards = sorted(name for name in os.listdir(tmp_path)
                  if not name.endswith(".meta.json"))
  shards.remove("c.txt")
  assert len(shards) > 3 and all("-of-" in s for s in shards)
  for shard in shards:
    records += _parse(str(tmp_path / shard), 64, 10)
  assert len(records) > 1500
  random_next = np.mean([r["next_sentence_labels"][0] for r in records])
  assert abs(random_next - 0.5) < 0.05
  masked = kept = replaced = total = 0
  for r in records:
    n = int(r["input_mask"].sum())
    k = int(r["masked_lm_weights"].sum())
    assert k == min(10, max(1, round(n * 0.15)))
    masked += k
    total += n
    at = r["input_ids"][r["masked_lm_positions"][:k]]
    is_mask = at == vocab["[MASK]"]
    is_kept = at == r["masked_lm_ids"][:k]
    kept += int((is_kept & ~is_mask).sum())
    replaced += int((~is_kept & ~is_mask).sum())
  assert abs(masked / total - 0.15) < 0.01
  assert abs(kept / masked - 0.1) < 0.015       # 10% unchanged
  assert abs(replaced / masked - 0.1) < 0.015   # 10% random words


# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("extra,message", [
    (["--dupe_factor=-1"], "--dupe_factor=-1: must be at least 1."),
    (["--masked_lm_prob=1"], "--masked_lm_prob=1: must be between 0 and 1"),
    (["--masked_lm_prob=0"], "--masked_lm_prob=0: must be between 0 and 1"),
    (["--short_seq_prob=1.5"], "--short_seq_prob=1.5: must be between"),
    (["--max_seq_length=4"], "--max_seq_length=4: must be at least 5"),
    (["--max_seq_length=16"], "--max_predictions_per_seq=20: must be "
     "between 1 and 13"),
    (["--num_workers=2"], "--num_workers applies to --mode=scalable only."),
    (["--mode=scalable", "--num_workers=0"], "--num_workers=0: must be at "
     "least 1."),
    (["--mode=scalable", "--shard_size_mb=0"], "--shard_size_mb=0: must be "
     "positive."),
])
def test_bad_flags(tmp_path, uncased_vocab, extra, message):
  corpus = _small_corpus(tmp_path)
  with pytest.raises(cli.UserError) as raised:
    cpd.run(_flags("--input_file=" + corpus, "--vocab_file=" + uncased_vocab,
                   "--output_file=" + str(tmp_path / "o"), *extra))
  assert str(raised.value).startswith(message)
  assert os.listdir(tmp_path) == ["corpus.txt"]


@pytest.mark.parametrize("mode", ["faithful", "scalable"])
def test_bad_input(tmp_path, uncased_vocab, mode):
  good = _small_corpus(tmp_path)
  single = _write_corpus(tmp_path / "single.txt", [["One."], ["Two."]])
  no_mask = tmp_path / "vocab.txt"
  no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
  cases = [
      ([good + "," + str(tmp_path / "none*.txt")], "--input_file: " +
       str(tmp_path / "none*.txt") + " matches no file."),
      ([single], "No document in %s has two sentences" % single),
      ([good, "--vocab_file=" + str(no_mask)],
       "The vocabulary has no [MASK]"),
      ([good, "--output_file=" + str(tmp_path / "no" / "o")],
       "--output_file=%s: folder %s does not exist." % (
           tmp_path / "no" / "o", tmp_path / "no")),
      ([str(tmp_path)], "--input_file: %s is a directory" % tmp_path),
  ]
  before = sorted(os.listdir(tmp_path))
  for args, message in cases:
    flag_args = ["--input_file=" + args[0], "--mode=" + mode,
                 "--vocab_file=" + uncased_vocab,
                 "--output_file=" + str(tmp_path / "o")] + args[1:]
    with pytest.raises(cli.UserError) as raised:
      cpd.run(_flags(*flag_args))
    assert str(raised.value).startswith(message), str(raised.value)
    assert sorted(os.listdir(tmp_path)) == before


def test_casing_that_contradicts_the_vocabulary_is_refused(tmp_path,
                                                           assets_dir):
  """Google's cased vocabulary with --do_lower_case=True (the default), and
  the uncased one with False: refused before anything is written."""
  corpus = _small_corpus(tmp_path)
  for casing, value, fix in (("cased", "True", "False"),
                             ("uncased", "False", "True")):
    vocab_file = os.path.join(assets_dir, "bert_vocab", casing, "vocab.txt")
    with pytest.raises(cli.UserError) as raised:
      cpd.run(_flags("--input_file=" + corpus, "--vocab_file=" + vocab_file,
                     "--output_file=" + str(tmp_path / "o"),
                     "--do_lower_case=" + value))
    message = str(raised.value)
    assert message.startswith("--vocab_file=%s is %s" % (vocab_file, casing))
    assert "--do_lower_case=%s was given; set --do_lower_case=%s" % (
        value, fix) in message
    assert "\n" not in message
  assert os.listdir(tmp_path) == ["corpus.txt"]


def test_user_error_is_one_line_without_traceback(tmp_path, uncased_vocab,
                                                  run_script):
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"one.\ntwo \xc3( three.\n")
  result = run_script("create_pretraining_data.py", [
      "--input_file=%s" % bad, "--output_file=%s" % (tmp_path / "o"),
      "--vocab_file=" + uncased_vocab], 300)
  assert result.returncode == 2
  assert "Traceback" not in result.stderr + result.stdout
  assert result.stderr.strip().splitlines()[-1] == (
      "create_pretraining_data.py: error: %s:2: byte 0xc3 at column 5 is not "
      "UTF-8. Convert the file to UTF-8." % bad)
  assert sorted(os.listdir(tmp_path)) == ["bad.txt"]
