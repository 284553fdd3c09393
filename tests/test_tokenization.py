# coding=utf-8
"""Tests of tokenization.py against Google's real vocabularies.

Expected token lists are derived by hand from the rules (cleanup, CJK and
punctuation splitting, lowercasing and accent stripping, greedy
longest-match-first WordPiece) and written literally; where a WordPiece
split depends on the vocabulary, the test also asserts the vocabulary
facts the derivation used (which pieces exist and which longer ones don't).
"""

import collections
import csv
import json
import os

import pytest
import sentencepiece as spm

import tokenization


@pytest.fixture(scope="module")
def uncased(assets_dir):
  return tokenization.FullTokenizer(
      os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt"),
      do_lower_case=True)


@pytest.fixture(scope="module")
def cased(assets_dir):
  return tokenization.FullTokenizer(
      os.path.join(assets_dir, "bert_vocab", "cased", "vocab.txt"),
      do_lower_case=False)


@pytest.fixture(scope="module")
def mrpc_dev(assets_dir):
  """The MRPC dev rows (header dropped), read as Google's code reads TSV."""
  path = os.path.join(assets_dir, "glue", "MRPC", "dev.tsv")
  with open(path, encoding="utf-8") as f:
    return list(csv.reader(f, delimiter="\t", quotechar=None))[1:]


def test_vocab_sizes_and_special_ids(uncased, cased):
  assert len(uncased.vocab) == 30522
  assert len(cased.vocab) == 28996
  assert isinstance(uncased.vocab, collections.OrderedDict)
  assert uncased.convert_tokens_to_ids(
      ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]) == [0, 100, 101, 102, 103]
  assert uncased.inv_vocab[101] == "[CLS]"
  assert cased.vocab["[UNK]"] == 100


def test_hello_world_tokens_and_published_ids(uncased, cased):
  assert uncased.tokenize("Hello, World!") == ["hello", ",", "world", "!"]
  assert cased.tokenize("Hello, World!") == ["Hello", ",", "World", "!"]
  # The ids every BERT tutorial shows for "[CLS] hello, world! [SEP]".
  tokens = ["[CLS]"] + uncased.tokenize("Hello, World!") + ["[SEP]"]
  assert uncased.convert_tokens_to_ids(tokens) == [
      101, 7592, 1010, 2088, 999, 102]


def test_mrpc_sentences(uncased, cased, mrpc_dev):
  first = mrpc_dev[0][3]
  assert first.startswith("He said the foodservice pie business")
  # "foodservice" is not in the vocabulary; greedy longest match takes
  # "foods", then "##er", "##vic" (uncased has no "##vice"), then "##e".
  vocab = uncased.vocab
  for absent in ("foodservice", "foodservic", "foodservi", "foodserv",
                 "foodser", "foodse", "##ervice", "##ervic", "##ervi",
                 "##erv", "##vice"):
    assert absent not in vocab
  for present in ("foods", "##er", "##vic", "##e"):
    assert present in vocab
  assert "##vice" in cased.vocab
  assert uncased.tokenize(first) == [
      "he", "said", "the", "foods", "##er", "##vic", "##e", "pie",
      "business", "doesn", "'", "t", "fit", "the", "company", "'", "s",
      "long", "-", "term", "growth", "strategy", "."]
  assert cased.tokenize(first) == [
      "He", "said", "the", "foods", "##er", "##vice", "pie", "business",
      "doesn", "'", "t", "fit", "the", "company", "'", "s", "long", "-",
      "term", "growth", "strategy", "."]
  quoted = mrpc_dev[1][4]
  assert uncased.tokenize(quoted) == [
      "his", "wife", "said", "he", "was", "\"", "100", "percent", "behind",
      "george", "bush", "\"", "and", "looked", "forward", "to", "using",
      "his", "years", "of", "training", "in", "the", "war", "."]
  numbers = mrpc_dev[2][3]
  assert numbers.startswith("The dollar was at 116.92 yen")
  assert uncased.tokenize(numbers)[:9] == [
      "the", "dollar", "was", "at", "116", ".", "92", "yen", "against"]


def test_squad_context(uncased, cased, assets_dir):
  path = os.path.join(assets_dir, "squad", "v1.1", "dev-v1.1.json")
  with open(path, encoding="utf-8") as f:
    context = json.load(f)["data"][0]["paragraphs"][0]["context"]
  sentence = context.split(". ")[0]
  assert uncased.tokenize(sentence) == [
      "super", "bowl", "50", "was", "an", "american", "football", "game",
      "to", "determine", "the", "champion", "of", "the", "national",
      "football", "league", "(", "nfl", ")", "for", "the", "2015", "season"]
  assert cased.tokenize(sentence)[14:20] == [
      "National", "Football", "League", "(", "NFL", ")"]


def test_accents_stripped_only_when_lowercasing(uncased, cased):
  assert uncased.tokenize("Café") == ["cafe"]
  assert uncased.tokenize("Cafe\u0301") == ["cafe"]  # decomposed input
  assert uncased.tokenize("naïve résumé") == ["naive", "resume"]
  assert "Café" in cased.vocab
  assert cased.tokenize("Café") == ["Café"]
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  assert basic.tokenize("naïve Résumé") == ["naïve", "Résumé"]
  # A lone accent vanishes when stripped instead of leaving an empty token.
  assert tokenization.BasicTokenizer().tokenize("a \u0301 b") == ["a", "b"]


def test_cjk_characters_split(uncased):
  assert uncased.tokenize("中国人 hello") == ["中", "国", "人", "hello"]
  # Each ideograph is its own word; one missing from the vocab is [UNK].
  assert "爱" not in uncased.vocab
  assert uncased.tokenize("我爱BERT") == ["我", "[UNK]", "bert"]
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  # Hiragana is outside the ideograph blocks: not split.
  assert basic.tokenize("ひらがな漢字") == ["ひらがな", "漢", "字"]
  # Lowercasing strips accents: NFD turns "が" into "か" + U+3099, a
  # nonspacing mark (Mn), which is dropped (the original's behaviour too).
  assert tokenization.BasicTokenizer().tokenize("ひらがな") == ["ひらかな"]
  assert basic.tokenize("x\U00020000y") == ["x", "\U00020000", "y"]


def test_control_chars_removed_and_whitespace(uncased):
  text = "Hel\x00lo\u200b wor\x07ld\ufffd"
  assert uncased.tokenize(text) == ["hello", "world"]
  assert uncased.tokenize("a\u00a0b\tc\nd\re\u3000f\u2003g") == [
      "a", "b", "c", "d", "e", "f", "g"]
  assert uncased.tokenize(" \t\n ") == []
  assert tokenization._is_whitespace(" ")
  assert tokenization._is_whitespace("\u00a0")
  assert tokenization._is_whitespace("\t")
  assert not tokenization._is_whitespace("A")
  assert tokenization._is_control("\x07")
  assert tokenization._is_control("\u200b")
  assert not tokenization._is_control("\t")
  assert not tokenization._is_control("\r")
  assert not tokenization._is_control("A")


def test_only_control_and_format_characters_are_dropped(uncased):
  # Unicode categories: U+0007 Cc, U+200B Cf (dropped); U+E000 Co (private
  # use) and U+0378 Cn (unassigned) are kept as words of their own, which
  # the uncased vocabulary does not have.
  assert [tokenization._is_control(c) for c in "\x07\u200b\ue000\u0378"] == [
      True, True, False, False]
  assert "\ue000" not in uncased.vocab and "\u0378" not in uncased.vocab
  assert uncased.tokenize("a \ue000 b \u0378 c\u200bd") == [
      "a", "[UNK]", "b", "[UNK]", "cd"]


def test_punctuation():
  for char in "$^`~@[-¿«":
    assert tokenization._is_punctuation(char), char
  for char in "A5 €😀❤":
    assert not tokenization._is_punctuation(char), char
  basic = tokenization.BasicTokenizer()
  assert basic.tokenize("a$b^c`d ¿Qué?") == [
      "a", "$", "b", "^", "c", "`", "d", "¿", "que", "?"]
  assert basic.tokenize("...") == [".", ".", "."]


def test_emoji_is_unknown(uncased):
  vocab = uncased.vocab
  for absent in ("❤", "😀", "🍕", "##🍕"):
    assert absent not in vocab
  # Symbols (category So) are not punctuation: "pizza🍕" stays one word and
  # cannot be covered by pieces, so the whole word becomes [UNK].
  assert uncased.tokenize("I ❤ 😀 pizza🍕") == [
      "i", "[UNK]", "[UNK]", "[UNK]"]


def test_long_word_is_unknown(uncased):
  assert uncased.tokenize("x" * 201) == ["[UNK]"]
  pieces = uncased.tokenize("x" * 200)
  assert pieces == ["xx"] + ["##xx"] * 99


def test_wordpiece_continuations(uncased):
  vocab = uncased.vocab
  for absent in ("unaffable", "unaffabl", "unaffab", "unaffa", "unaff",
                 "unaf", "##ffable", "##ffabl", "##ffab"):
    assert absent not in vocab
  assert uncased.tokenize("unaffable") == ["una", "##ffa", "##ble"]


def test_wordpiece_tokenizer_with_small_vocab():
  vocab = {t: i for i, t in enumerate(
      ["[UNK]", "un", "##aff", "##able", "a", "##a"])}
  wordpiece = tokenization.WordpieceTokenizer(vocab)
  assert wordpiece.tokenize("unaffable") == ["un", "##aff", "##able"]
  assert wordpiece.tokenize("unaffablex a") == ["[UNK]", "a"]
  assert wordpiece.tokenize("aaa") == ["a", "##a", "##a"]
  assert wordpiece.tokenize("") == []
  short = tokenization.WordpieceTokenizer(
      vocab, unk_token="<oov>", max_input_chars_per_word=2)
  assert short.tokenize("aa aaa") == ["a", "##a", "<oov>"]


def test_round_trip_ids(uncased, mrpc_dev):
  tokens = uncased.tokenize(mrpc_dev[3][3])
  ids = uncased.convert_tokens_to_ids(tokens)
  assert all(isinstance(i, int) for i in ids)
  assert uncased.convert_ids_to_tokens(ids) == tokens
  assert tokenization.convert_ids_to_tokens(uncased.inv_vocab, ids) == tokens
  assert tokenization.convert_tokens_to_ids(uncased.vocab, tokens) == ids
  with pytest.raises(KeyError, match="notatoken"):
    uncased.convert_tokens_to_ids(["notatoken"])


def test_unicode_conversion(uncased):
  assert uncased.tokenize("Hello".encode("utf-8")) == ["hello"]
  assert tokenization.convert_to_unicode(b"caf\xc3\xa9") == "café"
  assert tokenization.printable_text(b"x") == "x"
  with pytest.raises(ValueError, match="int"):
    tokenization.convert_to_unicode(5)


def test_load_vocab_strips_lines(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_bytes(b"[PAD]\r\n  hello \nw\xc3\xb6rld\n##s")
  vocab = tokenization.load_vocab(str(path))
  assert list(vocab.items()) == [
      ("[PAD]", 0), ("hello", 1), ("wörld", 2), ("##s", 3)]


def test_missing_vocab_file(tmp_path):
  missing = str(tmp_path / "nope" / "vocab.txt")
  with pytest.raises(FileNotFoundError) as info:
    tokenization.FullTokenizer(missing)
  assert missing in str(info.value)
  assert "--vocab_file" in str(info.value)
  with pytest.raises(ValueError, match="--vocab_file"):
    tokenization.FullTokenizer(None)
  with pytest.raises(FileNotFoundError, match="--spm_model_file"):
    tokenization.FullTokenizer(None, spm_model_file=missing)


@pytest.mark.parametrize("do_lower_case,path,recognised", [
    (True, None, False),
    (False, "", False),
    (True, "/models/uncased_L-12_H-768_A-12/bert_model.ckpt", True),
    (False, "gs://b/cased_L-24_H-1024_A-16/bert_model.ckpt-1000", True),
    (True, "chinese_L-12_H-768_A-12/bert_model.ckpt", True),
    (False, "/m/minilm-l6-h384-uncased/bert_model.ckpt", False),
    (True, "/m/my_cased_model/bert_model.ckpt", False),
    (False, "/m/uncased_L-12_H-768_A-12/model.ckpt", False),
])
def test_case_check_passes(do_lower_case, path, recognised):
  """The matching casing passes. For a name of Google's models the other
  casing is refused, which shows the name was read; any other checkpoint
  (renamed, fine-tuned, not bert_model.ckpt) passes with either casing."""
  assert tokenization.validate_case_matches_checkpoint(do_lower_case,
                                                       path) is None
  if recognised:
    with pytest.raises(ValueError, match="--do_lower_case=%s" % (
        do_lower_case,)):
      tokenization.validate_case_matches_checkpoint(not do_lower_case, path)
  else:
    assert tokenization.validate_case_matches_checkpoint(
        not do_lower_case, path) is None


@pytest.mark.parametrize("do_lower_case,name,fix", [
    (False, "uncased_L-12_H-768_A-12", "True"),
    (False, "uncased_L-24_H-1024_A-16", "True"),
    (False, "multilingual_L-12_H-768_A-12", "True"),
    (False, "chinese_L-12_H-768_A-12", "True"),
    (True, "cased_L-12_H-768_A-12", "False"),
    (True, "cased_L-24_H-1024_A-16", "False"),
    (True, "multi_cased_L-12_H-768_A-12", "False"),
])
def test_case_check_refuses(do_lower_case, name, fix):
  path = "/data/%s/bert_model.ckpt" % name
  with pytest.raises(ValueError) as info:
    tokenization.validate_case_matches_checkpoint(do_lower_case, path)
  message = str(info.value)
  assert "`%s`" % name in message
  assert "--do_lower_case=%s was given" % do_lower_case in message
  assert "set --do_lower_case=%s" % fix in message


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, mrpc_dev):
  """A unigram SentencePiece model (100 pieces) trained on MRPC text."""
  folder = tmp_path_factory.mktemp("spm")
  corpus = folder / "corpus.txt"
  corpus.write_text(
      "\n".join(row[3] for row in mrpc_dev[:300]) + "\n", encoding="utf-8")
  prefix = str(folder / "tiny")
  spm.SentencePieceTrainer.train(
      input=str(corpus), model_prefix=prefix, vocab_size=100,
      model_type="unigram", num_threads=1, minloglevel=2)
  return prefix + ".model"


def test_sentencepiece(spm_model):
  tokenizer = tokenization.FullTokenizer(
      None, do_lower_case=True, spm_model_file=spm_model)
  assert len(tokenizer.vocab) == 100
  # SentencePiece's default special pieces come first, in id order.
  assert list(tokenizer.vocab)[:3] == ["<unk>", "<s>", "</s>"]
  assert tokenizer.inv_vocab[2] == "</s>"
  text = "The Dollar was at 116.92 yen"
  pieces = tokenizer.tokenize(text)
  assert all(piece in tokenizer.vocab for piece in pieces)
  # Pieces concatenate back to the lowercased text, spaces shown as U+2581.
  assert "".join(pieces).replace("\u2581", " ") == (
      " the dollar was at 116.92 yen")
  ids = tokenizer.convert_tokens_to_ids(pieces)
  assert ids == [tokenizer.vocab[piece] for piece in pieces]
  assert tokenizer.convert_ids_to_tokens(ids) == pieces
  # A character never seen in training maps to the unknown id 0.
  assert tokenizer.convert_tokens_to_ids(["中"]) == [0]


def test_sentencepiece_keeps_case(spm_model):
  tokenizer = tokenization.FullTokenizer(
      None, do_lower_case=False, spm_model_file=spm_model)
  pieces = tokenizer.tokenize("The dollar")
  assert "".join(pieces).replace("\u2581", " ") == " The dollar"
  assert "T" in pieces


def _tokens(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def test_casing_detected_from_google_vocabularies(assets_dir):
  vocab = os.path.join(assets_dir, "bert_vocab")
  assert tokenization.vocab_is_cased(
      _tokens(os.path.join(vocab, "uncased", "vocab.txt"))) is False
  assert tokenization.vocab_is_cased(
      _tokens(os.path.join(vocab, "cased", "vocab.txt"))) is True
  # No letter with case: nothing to tell.
  assert tokenization.vocab_is_cased(["[PAD]", "[UNK]", "1", "##2"]) is None
  assert tokenization.vocab_is_cased(["[CLS]", "[SEP]", "hello"]) is False


@pytest.mark.parametrize("do_lower_case, folder, fix", [
    (True, "cased", "False"), (False, "uncased", "True")])
def test_case_must_match_the_vocab(assets_dir, do_lower_case, folder, fix):
  path = os.path.join(assets_dir, "bert_vocab", folder, "vocab.txt")
  tokens = _tokens(path)
  with pytest.raises(ValueError) as info:
    tokenization.validate_case_matches_vocab(do_lower_case, tokens, path)
  message = str(info.value)
  assert path in message
  assert "--do_lower_case=%s was given" % do_lower_case in message
  assert "set --do_lower_case=%s" % fix in message
  tokenization.validate_case_matches_vocab(not do_lower_case, tokens, path)
