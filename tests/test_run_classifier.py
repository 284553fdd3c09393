"""Tests for run_classifier.py: processors, features, record reuse, runs.

The end-to-end runs go through `python run_classifier.py ...` with a tiny
model (2 layers, hidden 32) and small files the tests write; their metrics
are checked against values recomputed here from the run's own predictions
(the test set is the dev set, so every dev example has a prediction).
"""
import hashlib
import json
import os
import random
import signal
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import conftest  # pylint: disable=g-import-not-at-top
import run_classifier  # pylint: disable=g-import-not-at-top
from runner import feature_cache  # pylint: disable=g-import-not-at-top
from startup import run_setup  # pylint: disable=g-import-not-at-top
from startup import shared_flags  # pylint: disable=g-import-not-at-top
from tasks import classification  # pylint: disable=g-import-not-at-top
from tasks import classification_features  # pylint: disable=g-import-not-at-top
from tasks import glue  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

MRPC_HEADER = ["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
MRPC_TEST_HEADER = ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"]


def _write_tsv(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write("".join("\t".join(row) + "\n" for row in rows))


def _triples(examples):
  return [(e.text_a, e.text_b, e.label) for e in examples]


# --------------------------------------------------------------- processors

MNLI_HEADER = ["index", "promptID", "pairID", "genre",
               "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
XNLI_HEADER = ["language", "gold_label", "sentence1_binary_parse",
               "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
               "sentence1", "sentence2", "promptID", "pairID", "genre",
               "label1", "label2", "label3", "label4", "label5"]
STSB_HEADER = ["index", "genre", "filename", "year", "old_index", "source1",
               "source2", "sentence1", "sentence2"]


def _mnli_row(index, s1, s2, labels):
  return [index, "31193", "31193n", "fiction", "( ( a ) )", "( b )",
          "(ROOT a)", "(ROOT b)", s1, s2] + labels


def _xnli_row(language, label, s1, s2):
  return [language, label, "bp1", "bp2", "p1", "p2", s1, s2, "7", "7n",
          "travel", label, label, label, label, label]


def _stsb_row(index, s1, s2, score=None):
  row = [index, "main-captions", "MSRvid", "2012test", "0001", "none",
         "none", s1, s2]
  return row + ([score] if score is not None else [])


# Per task: {file: rows} in the published GLUE/XNLI layout, and the
# (text_a, text_b, label) each set must give. Test sets carry a placeholder
# label (the task's first label, "0" for the STS-B score).
TASK_CASES = {
    "mrpc": (
        {"train.tsv": [MRPC_HEADER,
                       ["1", "11", "12", "He left early.", "He went early."],
                       ["0", "13", "14", "It rained.", "It was dry."]],
         "dev.tsv": [MRPC_HEADER, ["1", "15", "16", "Hi there.", "Hello."]],
         "test.tsv": [MRPC_TEST_HEADER,
                      ["0", "17", "18", "A cat.", "The cat."]]},
        {"train": [("He left early.", "He went early.", "1"),
                   ("It rained.", "It was dry.", "0")],
         "dev": [("Hi there.", "Hello.", "1")],
         "test": [("A cat.", "The cat.", "0")]}),
    "cola": (
        {"train.tsv": [["gj04", "1", "", "The sailors rode the breeze."],
                       ["gj04", "0", "*", "The more you eat it."]],
         "dev.tsv": [["cj99", "1", "", "Bill whistled."]],
         "test.tsv": [["index", "sentence"], ["0", "The car honked."]]},
        {"train": [("The sailors rode the breeze.", None, "1"),
                   ("The more you eat it.", None, "0")],
         "dev": [("Bill whistled.", None, "1")],
         "test": [("The car honked.", None, "0")]}),
    "sst-2": (
        {"train.tsv": [["sentence", "label"],
                       ["a charming journey . ", "1"]],
         "dev.tsv": [["sentence", "label"], ["bleak and desperate ", "0"]],
         "test.tsv": [["index", "sentence"], ["0", "uneasy mishmash ."]]},
        {"train": [("a charming journey . ", None, "1")],
         "dev": [("bleak and desperate ", None, "0")],
         "test": [("uneasy mishmash .", None, "0")]}),
    "qqp": (
        {"train.tsv": [["id", "qid1", "qid2", "question1", "question2",
                        "is_duplicate"],
                       ["5", "9", "10", "How old is he?", "His age?", "1"]],
         "dev.tsv": [["id", "qid1", "qid2", "question1", "question2",
                      "is_duplicate"],
                     ["6", "11", "12", "Why?", "Where?", "0"]],
         "test.tsv": [["id", "question1", "question2"],
                      ["0", "Who is it?", "Who's that?"]]},
        {"train": [("How old is he?", "His age?", "1")],
         "dev": [("Why?", "Where?", "0")],
         "test": [("Who is it?", "Who's that?", "0")]}),
    "qnli": (
        {"train.tsv": [["index", "question", "sentence", "label"],
                       ["0", "What came?", "The law came.", "entailment"]],
         "dev.tsv": [["index", "question", "sentence", "label"],
                     ["0", "Who won?", "It rained.", "not_entailment"]],
         "test.tsv": [["index", "question", "sentence"],
                      ["0", "When?", "At noon."]]},
        {"train": [("What came?", "The law came.", "entailment")],
         "dev": [("Who won?", "It rained.", "not_entailment")],
         "test": [("When?", "At noon.", "entailment")]}),
    "rte": (
        {"train.tsv": [["index", "sentence1", "sentence2", "label"],
                       ["0", "No weapons found.", "Weapons found.",
                        "not_entailment"]],
         "dev.tsv": [["index", "sentence1", "sentence2", "label"],
                     ["0", "A dog barks.", "An animal barks.", "entailment"]],
         "test.tsv": [["index", "sentence1", "sentence2"],
                      ["0", "Mangla dam.", "A dam."]]},
        {"train": [("No weapons found.", "Weapons found.", "not_entailment")],
         "dev": [("A dog barks.", "An animal barks.", "entailment")],
         "test": [("Mangla dam.", "A dam.", "entailment")]}),
    "wnli": (
        {"train.tsv": [["index", "sentence1", "sentence2", "label"],
                       ["0", "I stuck a pin in it.", "It had a hole.", "1"]],
         "dev.tsv": [["index", "sentence1", "sentence2", "label"],
                     ["0", "John hid.", "Mary hid.", "0"]],
         "test.tsv": [["index", "sentence1", "sentence2"],
                      ["0", "The cup fell.", "It broke."]]},
        {"train": [("I stuck a pin in it.", "It had a hole.", "1")],
         "dev": [("John hid.", "Mary hid.", "0")],
         "test": [("The cup fell.", "It broke.", "0")]}),
    "sts-b": (
        {"train.tsv": [STSB_HEADER + ["score"],
                       _stsb_row("0", "A plane takes off.", "A jet leaves.",
                                 "5.000"),
                       _stsb_row("1", "A man plays.", "A man sings.",
                                 "0.750")],
         "dev.tsv": [STSB_HEADER + ["score"],
                     _stsb_row("0", "A boy runs.", "A kid runs.", "3.800")],
         "test.tsv": [STSB_HEADER, _stsb_row("0", "Two dogs.", "A dog.")]},
        {"train": [("A plane takes off.", "A jet leaves.", "5.000"),
                   ("A man plays.", "A man sings.", "0.750")],
         "dev": [("A boy runs.", "A kid runs.", "3.800")],
         "test": [("Two dogs.", "A dog.", "0")]}),
    "mnli": (
        {"train.tsv": [MNLI_HEADER + ["label1", "gold_label"],
                       _mnli_row("0", "Cream skims.", "Skim works.",
                                 ["neutral", "neutral"])],
         "dev_matched.tsv": [
             MNLI_HEADER + ["label1", "label2", "label3", "label4", "label5",
                            "gold_label"],
             _mnli_row("1", "He ran.", "He moved.",
                       ["neutral", "entailment", "entailment", "entailment",
                        "neutral", "entailment"])],
         "dev_mismatched.tsv": [
             MNLI_HEADER + ["label1", "label2", "label3", "label4", "label5",
                            "gold_label"],
             _mnli_row("2", "It is red.", "It is blue.",
                       ["contradiction"] * 6)],
         "test_matched.tsv": [MNLI_HEADER, _mnli_row("0", "Hi.", "Bye.", [])],
         "test_mismatched.tsv": [MNLI_HEADER,
                                 _mnli_row("0", "Up.", "Down.", [])]},
        {"train": [("Cream skims.", "Skim works.", "neutral")],
         "dev": [("He ran.", "He moved.", "entailment")],
         "test": [("Hi.", "Bye.", "contradiction")]}),
    "xnli": (
        {"multinli/multinli.train.zh.tsv": [
            ["premise", "hypo", "label"],
            ["我们走吧。", "我们离开。", "entailment"],
            ["他很高。", "他很矮。", "contradictory"]],
         "xnli.dev.tsv": [XNLI_HEADER,
                          _xnli_row("en", "neutral", "He ran.", "He won."),
                          _xnli_row("zh", "neutral", "他跑了。", "他赢了。")],
         "xnli.test.tsv": [XNLI_HEADER,
                           _xnli_row("zh", "entailment", "天亮了。", "是早上。"),
                           _xnli_row("de", "neutral", "Ja.", "Nein.")]},
        {"train": [("我们走吧。", "我们离开。", "entailment"),
                   ("他很高。", "他很矮。", "contradiction")],
         "dev": [("他跑了。", "他赢了。", "neutral")],
         "test": [("天亮了。", "是早上。", "entailment")]}),
}
# MNLI-mm reads the same folder: matched train, mismatched dev and test.
TASK_CASES["mnli-mm"] = (
    TASK_CASES["mnli"][0],
    {"train": TASK_CASES["mnli"][1]["train"],
     "dev": [("It is red.", "It is blue.", "contradiction")],
     "test": [("Up.", "Down.", "contradiction")]})


def _write_task_files(data_dir, files):
  for name, rows in files.items():
    _write_tsv(os.path.join(str(data_dir), name), rows)


@pytest.mark.parametrize("task", sorted(TASK_CASES))
def test_processor_reads_published_layout(task, tmp_path):
  files, expected = TASK_CASES[task]
  _write_task_files(tmp_path, files)
  processor = glue.PROCESSORS[task]()
  for set_type, triples in expected.items():
    examples = getattr(processor, "get_%s_examples" % set_type)(str(tmp_path))
    assert _triples(examples) == triples, (task, set_type)
    assert len({e.guid for e in examples}) == len(examples)


def test_processor_labels_and_task_names():
  binary = ["0", "1"]
  nli = ["contradiction", "entailment", "neutral"]
  expected = {"cola": binary, "mrpc": binary, "sst-2": binary, "qqp": binary,
              "wnli": binary, "qnli": ["entailment", "not_entailment"],
              "rte": ["entailment", "not_entailment"], "mnli": nli,
              "mnli-mm": nli, "xnli": nli, "sts-b": [None]}
  assert sorted(glue.PROCESSORS) == sorted(expected)
  for task, labels in expected.items():
    processor = glue.PROCESSORS[task]()
    assert processor.get_labels() == labels
    assert processor.is_regression == (task == "sts-b")


def test_real_glue_files_have_published_sizes(assets_dir):
  # Sizes from the assets' MANIFEST (GLUE's published splits).
  glue_dir = os.path.join(assets_dir, "glue")
  mrpc = run_classifier.MrpcProcessor()
  mrpc_dev = mrpc.get_dev_examples(os.path.join(glue_dir, "MRPC"))
  assert len(mrpc.get_train_examples(os.path.join(glue_dir, "MRPC"))) == 3668
  assert len(mrpc_dev) == 408
  assert len(mrpc.get_test_examples(os.path.join(glue_dir, "MRPC"))) == 1725
  # The BOM of the header must not leak into anything.
  assert mrpc_dev[0].label == "1"
  assert mrpc_dev[0].text_a.startswith("He said the foodservice pie business")
  cola = run_classifier.ColaProcessor()
  assert len(cola.get_dev_examples(os.path.join(glue_dir, "CoLA"))) == 1043
  assert len(cola.get_test_examples(os.path.join(glue_dir, "CoLA"))) == 1063
  sst = glue.Sst2Processor()
  assert len(sst.get_dev_examples(os.path.join(glue_dir, "SST-2"))) == 872
  assert len(sst.get_test_examples(os.path.join(glue_dir, "SST-2"))) == 1821
  qnli_dev = glue.QnliProcessor().get_dev_examples(
      os.path.join(glue_dir, "QNLI"))
  assert len(qnli_dev) == 5463
  assert {e.label for e in qnli_dev} == {"entailment", "not_entailment"}


def test_missing_data_file_names_it(tmp_path):
  with pytest.raises(ValueError) as error:
    run_classifier.MrpcProcessor().get_train_examples(str(tmp_path))
  message = str(error.value)
  assert os.path.join(str(tmp_path), "train.tsv") in message
  assert "--data_dir" in message


def test_wrong_column_count_names_file_and_line(tmp_path):
  _write_tsv(str(tmp_path / "train.tsv"), [
      MRPC_HEADER,
      ["1", "11", "12", "Fine.", "Fine too."],
      ["0", "13", "14", "A tab\tinside.", "Six columns."]])
  with pytest.raises(ValueError) as error:
    run_classifier.MrpcProcessor().get_train_examples(str(tmp_path))
  message = str(error.value)
  assert "train.tsv:3:" in message
  assert "found 6 columns, expected 5" in message


def test_wrong_column_count_without_header(tmp_path):
  _write_tsv(str(tmp_path / "dev.tsv"), [
      ["gj04", "1", "", "Good."], ["gj04", "1", "Missing a column."]])
  with pytest.raises(ValueError, match=r"dev\.tsv:2: found 3 columns, "
                     r"expected 4"):
    run_classifier.ColaProcessor().get_dev_examples(str(tmp_path))


def test_unknown_label_names_file_line_and_labels(tmp_path):
  _write_tsv(str(tmp_path / "dev.tsv"), [
      MRPC_HEADER, ["2", "11", "12", "One.", "Two."]])
  with pytest.raises(ValueError) as error:
    run_classifier.MrpcProcessor().get_dev_examples(str(tmp_path))
  message = str(error.value)
  assert "dev.tsv:2:" in message and "'2'" in message
  assert "['0', '1']" in message


def test_stsb_score_must_be_a_number(tmp_path):
  _write_tsv(str(tmp_path / "train.tsv"), [
      STSB_HEADER + ["score"], _stsb_row("0", "A.", "B.", "high")])
  with pytest.raises(ValueError, match=r"train\.tsv:2: label 'high' is not "
                     "a number"):
    glue.StsbProcessor().get_train_examples(str(tmp_path))


# ------------------------------------------------------------------ features


@pytest.fixture(scope="module")
def uncased_vocab(assets_dir):
  return os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(uncased_vocab):
  return tokenization.FullTokenizer(uncased_vocab, do_lower_case=True)


def test_hand_derived_ids_match_vocab_lines(uncased_vocab):
  # The ids used below are line numbers (0-based) of Google's uncased vocab.
  with open(uncased_vocab, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  tokens = ["[PAD]", "[CLS]", "[SEP]", "the", "cat", "sat", ".", "a", "snow",
            "##man", "!"]
  assert [lines.index(t) for t in tokens] == [
      0, 101, 102, 1996, 4937, 2938, 1012, 1037, 4586, 2386, 999]
  # Why "Snowman" splits into snow ##man: the whole word is not a token.
  assert "snowman" not in lines


def test_convert_pair_with_padding(tokenizer):
  example = run_classifier.InputExample("g", "The cat sat.", "A Snowman!", "1")
  feature = run_classifier.convert_single_example(
      0, example, ["0", "1"], 14, tokenizer)
  # [CLS] the cat sat . [SEP] a snow ##man ! [SEP] + 3 padding.
  assert feature.input_ids == [101, 1996, 4937, 2938, 1012, 102,
                               1037, 4586, 2386, 999, 102, 0, 0, 0]
  assert feature.input_mask == [1] * 11 + [0] * 3
  assert feature.segment_ids == [0] * 6 + [1] * 5 + [0] * 3
  assert feature.label_id == 1
  assert feature.is_real_example


def test_convert_pair_truncates_longest_first(tokenizer):
  example = run_classifier.InputExample("g", "The cat sat.", "A Snowman!", "0")
  feature = run_classifier.convert_single_example(
      0, example, ["0", "1"], 8, tokenizer)
  # Budget 8 - 3 = 5 for a (4 tokens) + b (4 tokens): pop b's "!" (a is not
  # longer), then a's "." (4 > 3), then b's "##man" (3 = 3 -> b).
  # Left: a = the cat sat, b = a snow.
  assert feature.input_ids == [101, 1996, 4937, 2938, 102, 1037, 4586, 102]
  assert feature.input_mask == [1] * 8
  assert feature.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1]
  assert feature.label_id == 0


def test_convert_single_sentence_truncates_to_fit(tokenizer):
  example = run_classifier.InputExample("g", "The cat sat.", None, "1")
  feature = run_classifier.convert_single_example(
      0, example, ["0", "1"], 4, tokenizer)
  assert feature.input_ids == [101, 1996, 4937, 102]
  assert feature.segment_ids == [0, 0, 0, 0]


def test_convert_padding_example_is_all_zero(tokenizer):
  feature = run_classifier.convert_single_example(
      0, run_classifier.PaddingInputExample(), ["0", "1"], 5, tokenizer)
  assert feature.input_ids == [0] * 5
  assert feature.input_mask == [0] * 5
  assert feature.segment_ids == [0] * 5
  assert feature.label_id == 0
  assert not feature.is_real_example


def test_convert_regression_label_is_float(tokenizer):
  example = run_classifier.InputExample("g", "A cat.", "A cat.", "3.800")
  feature = run_classifier.convert_single_example(0, example, [None], 8,
                                                  tokenizer)
  assert feature.label_id == pytest.approx(3.8)
  assert isinstance(feature.label_id, float)


def test_convert_refuses_unknown_label(tokenizer):
  example = run_classifier.InputExample("train-7", "A cat.", None, "maybe")
  with pytest.raises(ValueError, match="train-7 has label 'maybe'"):
    run_classifier.convert_single_example(0, example, ["0", "1"], 8,
                                          tokenizer)


def _read_records(path):
  records = []
  for raw in tf.data.TFRecordDataset(path):
    example = tf.train.Example.FromString(raw.numpy())
    records.append(example.features.feature)
  return records


def test_tfrecord_features_names_and_values(tokenizer, tmp_path):
  output_file = str(tmp_path / "train.tf_record")
  examples = [run_classifier.InputExample("a", "The cat sat.", None, "1"),
              run_classifier.PaddingInputExample()]
  run_classifier.file_based_convert_examples_to_features(
      examples, ["0", "1"], 6, tokenizer, output_file,
      fingerprint={"k": 1})
  real, padding = _read_records(output_file)
  assert sorted(real.keys()) == ["input_ids", "input_mask", "is_real_example",
                                 "label_ids", "segment_ids"]
  assert list(real["input_ids"].int64_list.value) == [101, 1996, 4937, 2938,
                                                      1012, 102]
  assert list(real["input_mask"].int64_list.value) == [1] * 6
  assert list(real["segment_ids"].int64_list.value) == [0] * 6
  assert list(real["label_ids"].int64_list.value) == [1]
  assert list(real["is_real_example"].int64_list.value) == [1]
  assert list(padding["input_ids"].int64_list.value) == [0] * 6
  assert list(padding["is_real_example"].int64_list.value) == [0]
  with open(output_file + ".meta.json") as f:
    sidecar = json.load(f)
  # The fingerprint, and what vouches for the file: size, sha256, records.
  with open(output_file, "rb") as f:
    content = f.read()
  assert sidecar == {"k": 1, "file": {
      "bytes": len(content), "sha256": hashlib.sha256(content).hexdigest(),
      "records": 2}}
  assert sorted(os.listdir(str(tmp_path))) == ["train.tf_record",
                                               "train.tf_record.meta.json"]


def test_tfrecord_regression_label_is_float_and_decodes(tokenizer, tmp_path):
  output_file = str(tmp_path / "train.tf_record")
  examples = [run_classifier.InputExample("a", "A cat.", "A cat.", "4.25"),
              run_classifier.InputExample("b", "A cat.", "Snow.", "0.5")]
  run_classifier.file_based_convert_examples_to_features(
      examples, [None], 8, tokenizer, output_file)
  records = _read_records(output_file)
  assert [list(r["label_ids"].float_list.value) for r in records] == [
      [4.25], [0.5]]
  input_fn = run_classifier.file_based_input_fn_builder(
      output_file, 8, is_training=False, drop_remainder=False,
      is_regression=True)
  batch = next(iter(input_fn({"batch_size": 2})))
  assert batch["label_ids"].dtype == tf.float32
  assert batch["input_ids"].dtype == tf.int32
  assert batch["input_ids"].shape == (2, 8)
  np.testing.assert_allclose(batch["label_ids"].numpy(), [4.25, 0.5])


# ------------------------------------------------------- record reuse rule


@pytest.fixture
def reuse_setup(tokenizer, uncased_vocab, tmp_path):
  """MRPC files, a record path, and a counter of feature-file writes."""
  _write_task_files(tmp_path, TASK_CASES["mrpc"][0])
  data_file = run_classifier.MrpcProcessor().get_data_files(
      str(tmp_path), "train")[0]
  output_file = str(tmp_path / "train.tf_record")

  def prepare(do_lower_case=True, max_seq_length=16):
    mrpc = classification.ClassificationTask(
        run_classifier.MrpcProcessor(), str(tmp_path), "MRPC",
        train_example_order="file")
    mrpc.start(shared_flags.SharedFlags(
        output_dir=str(tmp_path), vocab_file=uncased_vocab,
        do_lower_case=do_lower_case, max_seq_length=max_seq_length, seed=1,
        do_train=True), None, tokenizer)
    mrpc.read_data()
    mrpc.train_input_fn()
    return len(list(_read_records(output_file))[0]["input_ids"]
               .int64_list.value)

  return prepare, output_file, data_file


@pytest.fixture
def write_counter(monkeypatch):
  calls = []
  original = classification_features.file_based_convert_examples_to_features

  def counting(*args, **kwargs):
    calls.append(args[-1])
    return original(*args, **kwargs)

  monkeypatch.setattr(classification_features,
                      "file_based_convert_examples_to_features", counting)
  return calls


def test_records_reused_when_fingerprint_matches(reuse_setup, write_counter):
  prepare, _, _ = reuse_setup
  prepare()
  prepare()
  assert len(write_counter) == 1


def test_records_rebuilt_when_casing_or_length_changes(reuse_setup,
                                                       write_counter):
  prepare, _, _ = reuse_setup
  assert prepare() == 16
  prepare(do_lower_case=False)
  assert len(write_counter) == 2
  assert prepare(do_lower_case=False, max_seq_length=24) == 24
  assert len(write_counter) == 3
  prepare(do_lower_case=False, max_seq_length=24)
  assert len(write_counter) == 3


def test_records_rebuilt_when_data_file_changes(reuse_setup, write_counter):
  prepare, _, data_file = reuse_setup
  prepare()
  with open(data_file, "a", encoding="utf-8") as f:
    f.write("1\t31\t32\tOne more.\tAnother one.\n")
  prepare()
  assert len(write_counter) == 2


def test_records_rebuilt_after_interrupted_write(reuse_setup, write_counter):
  prepare, output_file, _ = reuse_setup
  prepare()
  # A write killed before the sidecar leaves a record file without it.
  os.remove(output_file + ".meta.json")
  prepare()
  assert len(write_counter) == 2
  with open(output_file + ".meta.json", "w") as f:
    f.write("{truncated")
  prepare()
  assert len(write_counter) == 3
  assert os.path.exists(output_file + ".meta.json")


# ------------------------------------------------------------ end to end

WORDS = ("river stone quiet bright market garden window yellow teacher "
         "letter morning travel winter summer island forest silver engine "
         "doctor music paper planet").split()
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
}


def _sentence(rng):
  return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) + "."


def _write_model_files(directory):
  """A vocab of WORDS and a matching tiny config; returns their paths."""
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + list(WORDS)
  vocab_file = os.path.join(directory, "vocab.txt")
  with open(vocab_file, "w") as f:
    f.write("".join(token + "\n" for token in vocab))
  config_file = os.path.join(directory, "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(dict(TINY_CONFIG, vocab_size=len(vocab)), f)
  return vocab_file, config_file


def _write_mrpc_data(data_dir, seed, num_train=40, num_dev=10):
  """MRPC files; test.tsv holds the dev pairs. Returns the dev labels."""
  rng = random.Random(seed)
  def rows(n):
    return [[str(i % 2), str(2 * i), str(2 * i + 1), _sentence(rng),
             _sentence(rng)] for i in range(n)]
  dev = rows(num_dev)
  _write_tsv(os.path.join(data_dir, "train.tsv"), [MRPC_HEADER] + rows(
      num_train))
  _write_tsv(os.path.join(data_dir, "dev.tsv"), [MRPC_HEADER] + dev)
  _write_tsv(os.path.join(data_dir, "test.tsv"), [MRPC_TEST_HEADER] + [
      [str(i)] + row[1:] for i, row in enumerate(dev)])
  return [int(row[0]) for row in dev]


def _write_stsb_data(data_dir, seed, num_train=12, num_dev=6):
  """STS-B files; test.tsv holds the dev pairs. Returns the dev scores."""
  rng = random.Random(seed)
  def rows(n):
    return [_stsb_row(str(i), _sentence(rng), _sentence(rng),
                      "%.3f" % (5.0 * i / n)) for i in range(n)]
  dev = rows(num_dev)
  _write_tsv(os.path.join(data_dir, "train.tsv"),
             [STSB_HEADER + ["score"]] + rows(num_train))
  _write_tsv(os.path.join(data_dir, "dev.tsv"), [STSB_HEADER + ["score"]] + dev)
  _write_tsv(os.path.join(data_dir, "test.tsv"),
             [STSB_HEADER] + [row[:-1] for row in dev])
  return [float(row[-1]) for row in dev]


def _command(task, data_dir, vocab_file, config_file, output_dir, epochs,
             actions):
  """run_classifier.py's arguments (without the script) for a tiny run."""
  return ["--task_name=%s" % task, "--data_dir=%s" % data_dir,
          "--vocab_file=%s" % vocab_file,
          "--bert_config_file=%s" % config_file,
          "--output_dir=%s" % output_dir, "--max_seq_length=32",
          "--train_batch_size=4", "--eval_batch_size=4",
          "--predict_batch_size=4", "--learning_rate=1e-3",
          "--num_train_epochs=%s" % epochs, "--save_checkpoints_steps=10",
          "--log_step_count_steps=50", "--seed=7"] + [
              "--" + action for action in actions]


def _run(run_script, args, log_path):
  return conftest.run_logged(run_script, "run_classifier.py", args, log_path)


def _read_eval_results(output_dir):
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, value = line.rstrip("\n").split(" = ")
      results[key] = float(value)
  return results


def _read_rows(path):
  with open(path) as f:
    return [line.rstrip("\n").split("\t") for line in f]


# 40 train examples / batch 4 * 20 epochs = 200 updates: long enough for
# the resume test to kill a run between its first checkpoint and its end.
MRPC_EPOCHS = 20
MRPC_STEPS = 200


def _mrpc_settings(root):
  """Where the MRPC run's files go under `root`, and its command."""
  data_dir = os.path.join(root, "data")
  vocab_file, config_file = (os.path.join(root, name) for name in
                             ("vocab.txt", "bert_config.json"))

  def command(out, actions):
    return _command("MRPC", data_dir, vocab_file, config_file, out,
                    MRPC_EPOCHS, actions)

  return {"root": root, "data_dir": data_dir, "vocab_file": vocab_file,
          "config_file": config_file, "command": command,
          "output_dir": os.path.join(root, "out"),
          "export_dir": os.path.join(root, "export")}


def _mrpc_end_to_end(run_script, root):
  settings = _mrpc_settings(root)
  dev_labels = _write_mrpc_data(settings["data_dir"], seed=3)
  with open(os.path.join(root, "dev_labels.json"), "w") as f:
    json.dump(dev_labels, f)
  assert (settings["vocab_file"], settings["config_file"]) == (
      _write_model_files(root))
  _run(run_script, settings["command"](settings["output_dir"], [
      "do_train", "do_eval", "do_predict",
      "export_dir=" + settings["export_dir"]]), os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def mrpc_run(shared_dir, run_script):
  """An uninterrupted MRPC train/eval/predict run; returns its settings."""
  root = conftest.build_once(shared_dir, "mrpc_e2e",
                             lambda root: _mrpc_end_to_end(run_script, root))
  settings = _mrpc_settings(root)
  with open(os.path.join(root, "dev_labels.json")) as f:
    settings["dev_labels"] = json.load(f)
  return settings


@pytest.mark.slow
def test_mrpc_end_to_end_outputs(mrpc_run):
  output_dir = mrpc_run["output_dir"]
  labels = np.array(mrpc_run["dev_labels"])
  results = _read_eval_results(output_dir)
  assert sorted(results) == ["eval_accuracy", "eval_f1", "eval_loss",
                             "global_step", "loss"]
  assert results["global_step"] == MRPC_STEPS

  probabilities = np.array(_read_rows(os.path.join(output_dir,
                                                   "test_results.tsv")),
                           dtype=np.float64)
  # One row per real test example (10), not per padded one (12).
  assert probabilities.shape == (10, 2)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)

  submission = _read_rows(os.path.join(output_dir, "MRPC.tsv"))
  assert submission[0] == ["index", "prediction"]
  assert [row[0] for row in submission[1:]] == [str(i) for i in range(10)]
  predicted = probabilities.argmax(axis=1)
  assert [row[1] for row in submission[1:]] == [str(p) for p in predicted]

  # test.tsv holds the dev pairs, so the eval metrics must equal those
  # recomputed from the predictions: the 2 padding examples do not count.
  assert results["eval_accuracy"] == pytest.approx(
      np.mean(predicted == labels), abs=1e-6)
  nll = -np.log(probabilities[np.arange(10), labels])
  assert results["eval_loss"] == pytest.approx(nll.mean(), rel=1e-4)
  tp = np.sum((predicted == 1) & (labels == 1))
  fp = np.sum((predicted == 1) & (labels == 0))
  fn = np.sum((predicted == 0) & (labels == 1))
  expected_f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
  assert results["eval_f1"] == pytest.approx(expected_f1)

  with open(os.path.join(output_dir, "run_info.json")) as f:
    run_info = json.load(f)
  assert run_info["task"] == "mrpc" and run_info["max_seq_length"] == 32
  for name in ("train", "eval", "predict"):
    assert os.path.exists(os.path.join(output_dir,
                                       name + ".tf_record.meta.json"))


def _predict_records(path, count):
  """The first `count` records of a predict.tf_record, as int32 arrays."""
  records = _read_records(path)[:count]
  return {name: np.array([record[name].int64_list.value
                          for record in records], np.int32)
          for name in ("input_ids", "input_mask", "segment_ids")}


def test_exported_saved_model_serves_the_predictions(mrpc_run):
  """--export_dir: a SavedModel whose serving signature gives
  test_results.tsv's probabilities, for a batch and for one example."""
  (model_dir,) = os.listdir(mrpc_run["export_dir"])
  assert model_dir.isdigit()  # no ".incomplete" left behind
  loaded = tf.saved_model.load(os.path.join(mrpc_run["export_dir"],
                                            model_dir))
  serve = loaded.signatures["serving_default"]
  assert sorted(serve.structured_input_signature[1]) == [
      "input_ids", "input_mask", "segment_ids"]
  inputs = _predict_records(
      os.path.join(mrpc_run["output_dir"], "predict.tf_record"), 10)
  expected = np.array(_read_rows(os.path.join(mrpc_run["output_dir"],
                                              "test_results.tsv")),
                      dtype=np.float64)
  served = serve(**{k: tf.constant(v) for k, v in inputs.items()})
  np.testing.assert_allclose(served["probabilities"].numpy(), expected,
                             atol=1e-5)
  one = serve(**{k: tf.constant(v[3:4]) for k, v in inputs.items()})
  np.testing.assert_allclose(one["probabilities"].numpy(), expected[3:4],
                             atol=1e-5)


def test_exported_model_serves_shorter_requests_and_stands_alone(mrpc_run):
  """A request need not pad to --max_seq_length: an example cut to its 7
  real tokens gets the probabilities of its padded form. The model's
  assets.extra carry the config, the vocabulary and run_info.json."""
  (model_dir,) = os.listdir(mrpc_run["export_dir"])
  path = os.path.join(mrpc_run["export_dir"], model_dir)
  serve = tf.saved_model.load(path).signatures["serving_default"]
  vocab = [line.rstrip("\n") for line in open(mrpc_run["vocab_file"])]
  tokens = ["[CLS]", "river", "stone", "[SEP]", "quiet", ".", "[SEP]"]
  ids = [vocab.index(token) for token in tokens]
  padded = {"input_ids": [ids + [0] * 25], "input_mask": [[1] * 7 + [0] * 25],
            "segment_ids": [[0] * 4 + [1] * 3 + [0] * 25]}
  short = {name: [row[:7] for row in value]
           for name, value in padded.items()}
  want = serve(**{k: tf.constant(v, tf.int32) for k, v in padded.items()})
  got = serve(**{k: tf.constant(v, tf.int32) for k, v in short.items()})
  np.testing.assert_allclose(got["probabilities"].numpy(),
                             want["probabilities"].numpy(), atol=1e-6)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="at most --max_seq_length=32"):
    serve(**{k: tf.zeros([1, 33], tf.int32) for k in padded})
  extra = os.path.join(path, "assets.extra")
  assert sorted(os.listdir(extra)) == ["bert_config.json", "run_info.json",
                                       "vocab.txt"]
  with open(os.path.join(extra, "run_info.json")) as f:
    info = json.load(f)
  assert (info["task"], info["labels"], info["do_lower_case"],
          info["max_seq_length"]) == ("mrpc", ["0", "1"], True, 32)
  with open(os.path.join(extra, "vocab.txt")) as f:
    assert [line.rstrip("\n") for line in f] == vocab


def test_export_without_a_checkpoint_names_the_fix(tmp_path):
  from runner import estimator  # pylint: disable=import-outside-toplevel
  est = estimator.Estimator(lambda *args: None,
                            estimator.RunConfig(str(tmp_path / "empty")))
  with pytest.raises(ValueError, match="no checkpoint in .*Train first"):
    est.export_saved_model(str(tmp_path / "export"), None)
  assert not os.path.exists(str(tmp_path / "export"))


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(mrpc_run, tmp_path,
                                                    run_script, script_runner):
  output_dir = str(tmp_path / "killed")
  args = mrpc_run["command"](output_dir, ["do_train"])
  returncode = conftest.signal_after_first_update_saved(
      script_runner, "run_classifier.py", args, output_dir,
      str(tmp_path / "killed.log"), signal.SIGKILL)
  killed_at = conftest.checkpoint_step(output_dir)
  assert returncode == -signal.SIGKILL, "run ended before the kill"
  assert killed_at is not None and 10 <= killed_at < MRPC_STEPS

  log = _run(run_script, args, str(tmp_path / "resumed.log"))
  assert "Resuming from" in log
  assert conftest.checkpoint_step(output_dir) == MRPC_STEPS

  final = "model.ckpt-%d" % MRPC_STEPS
  resumed = tf.train.load_checkpoint(os.path.join(output_dir, final))
  reference = tf.train.load_checkpoint(
      os.path.join(mrpc_run["output_dir"], final))
  names = sorted(reference.get_variable_to_shape_map())
  assert names == sorted(resumed.get_variable_to_shape_map())
  assert "output_weights" in names and "output_weights/adam_m" in names
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name),
                               reference.get_tensor(name), rtol=1e-6,
                               atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_skip_padding_gives_the_same_results(tmp_path, run_script):
  """--skip_padding (the default) against --noskip_padding: 10 updates with
  dropout on, then eval and predict; sentences of 3-7 words padded to 32,
  so most positions are padding. Same checkpoint, metrics and outputs."""
  data_dir = str(tmp_path / "data")
  _write_mrpc_data(data_dir, seed=4)
  vocab_file, config_file = _write_model_files(str(tmp_path))
  outputs = {}
  for flag in ("skip_padding", "noskip_padding"):
    output_dir = str(tmp_path / flag)
    _run(run_script,
         _command("MRPC", data_dir, vocab_file, config_file, output_dir, 1,
                  ["do_train", "do_eval", "do_predict", flag]),
         str(tmp_path / (flag + ".log")))
    outputs[flag] = (
        _read_eval_results(output_dir),
        np.array(_read_rows(os.path.join(output_dir, "test_results.tsv")),
                 dtype=np.float64),
        tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir)))
  (results, probabilities, checkpoint), (ref_results, ref_probabilities,
                                         ref_checkpoint) = (
                                             outputs["skip_padding"],
                                             outputs["noskip_padding"])
  assert results["global_step"] == ref_results["global_step"] == 10
  for name in ("eval_loss", "eval_accuracy", "eval_f1", "loss"):
    assert results[name] == pytest.approx(ref_results[name], rel=1e-5), name
  np.testing.assert_allclose(probabilities, ref_probabilities, atol=1e-6)
  names = sorted(ref_checkpoint.get_variable_to_shape_map())
  assert "bert/encoder/layer_1/output/dense/kernel/adam_v" in names
  for name in names:
    np.testing.assert_allclose(checkpoint.get_tensor(name),
                               ref_checkpoint.get_tensor(name), rtol=1e-5,
                               atol=1e-7, err_msg=name)


@pytest.mark.parametrize("skip_padding,use_xla,expected", [
    (True, False, True), (False, False, False), (True, True, False)])
def test_skip_padding_flag_is_off_under_xla(skip_padding, use_xla, expected):
  flag_values = flags.FlagValues()
  run_classifier.define_flags(flag_values)
  flag_values(["run_classifier.py",
               "--%sskip_padding" % ("" if skip_padding else "no"),
               "--%suse_xla" % ("" if use_xla else "no")])
  assert run_setup.skip_padding(flag_values.skip_padding,
                              flag_values.use_xla) is expected


@pytest.mark.slow
def test_stsb_regression_end_to_end(tmp_path, run_script):
  data_dir = str(tmp_path / "data")
  scores = np.array(_write_stsb_data(data_dir, seed=5))
  vocab_file, config_file = _write_model_files(str(tmp_path))
  output_dir = str(tmp_path / "out")
  # 12 examples / batch 4 * 1 epoch = 3 updates.
  _run(run_script,
       _command("STS-B", data_dir, vocab_file, config_file, output_dir, 1,
                ["do_train", "do_eval", "do_predict"]),
       str(tmp_path / "run.log"))

  results = _read_eval_results(output_dir)
  assert sorted(results) == ["eval_loss", "eval_pearson", "eval_spearman",
                             "global_step", "loss"]
  assert results["global_step"] == 3
  rows = _read_rows(os.path.join(output_dir, "test_results.tsv"))
  assert all(len(row) == 1 for row in rows)
  predictions = np.array([float(row[0]) for row in rows])
  assert predictions.shape == (6,)  # 6 real examples of 8 padded

  submission = _read_rows(os.path.join(output_dir, "STS-B.tsv"))
  assert submission[0] == ["index", "prediction"]
  np.testing.assert_allclose([float(row[1]) for row in submission[1:]],
                             predictions, atol=1e-3)

  # Metrics recomputed from the predictions (test.tsv = dev pairs).
  assert results["eval_loss"] == pytest.approx(
      np.mean((predictions - scores) ** 2), rel=1e-4)
  assert results["eval_pearson"] == pytest.approx(
      np.corrcoef(predictions, scores)[0, 1], abs=1e-4)
  # Scores and predictions have no ties: ranks are plain argsort positions.
  ranks = lambda v: np.argsort(np.argsort(v))
  assert results["eval_spearman"] == pytest.approx(
      np.corrcoef(ranks(predictions), ranks(scores))[0, 1], abs=1e-4)


# ------------------------------------------------------ bad flags (in-process)


@pytest.fixture
def main_flags(tmp_path):
  """Returns set_flags(**overrides) -> runs main with valid MRPC defaults."""
  data_dir = str(tmp_path / "data")
  _write_task_files(data_dir, TASK_CASES["mrpc"][0])
  vocab_file, config_file = _write_model_files(str(tmp_path))
  defaults = {"task_name": "MRPC", "data_dir": data_dir,
              "vocab_file": vocab_file, "bert_config_file": config_file,
              "output_dir": str(tmp_path / "out"), "max_seq_length": 32,
              "do_train": True}

  def run_main(**overrides):
    values = dict(defaults, **overrides)
    flag_values = flags.FlagValues()
    run_classifier.define_flags(flag_values)
    flag_values(["run_classifier.py"] + [
        "--%s=%s" % (key, value) for key, value in values.items()])
    run_classifier.main([], flag_values=flag_values)

  return run_main


def test_main_requires_an_action(main_flags):
  with pytest.raises(ValueError, match="at least one of --do_train"):
    main_flags(do_train=False)


def test_main_refuses_tpu(main_flags):
  with pytest.raises(ValueError, match="--use_tpu"):
    main_flags(use_tpu=True)


def test_main_unknown_task_lists_known_tasks(main_flags):
  with pytest.raises(ValueError) as error:
    main_flags(task_name="MRCP")
  message = str(error.value)
  assert "Unknown --task_name=MRCP" in message
  assert "mrpc" in message and "sts-b" in message and "mnli-mm" in message


def test_main_missing_data_file_with_mixed_case_task(main_flags, tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  # "mRpC" must be found as MRPC to get as far as reading its train.tsv.
  with pytest.raises(ValueError, match=r"empty/train\.tsv does not exist"):
    main_flags(task_name="mRpC", data_dir=str(empty))


def test_main_missing_vocab_or_config(main_flags, tmp_path):
  with pytest.raises(ValueError, match="--vocab_file"):
    main_flags(vocab_file=str(tmp_path / "missing_vocab.txt"))
  with pytest.raises(ValueError, match="--bert_config_file"):
    main_flags(bert_config_file=str(tmp_path / "missing_config.json"))


def test_main_max_seq_length_beyond_positions(main_flags):
  with pytest.raises(ValueError) as error:
    main_flags(max_seq_length=128)
  message = str(error.value)
  assert "--max_seq_length=128" in message
  assert "max_position_embeddings=64" in message


def test_main_lower_case_contradicts_cased_checkpoint(main_flags, tmp_path):
  checkpoint = str(tmp_path / "cased_L-12_H-768_A-12" / "bert_model.ckpt")
  with pytest.raises(ValueError, match="do_lower_case"):
    main_flags(init_checkpoint=checkpoint, do_lower_case=True)


def test_main_missing_data_dir(main_flags, tmp_path):
  with pytest.raises(ValueError, match="--data_dir=.*is not a directory"):
    main_flags(data_dir=str(tmp_path / "nowhere"))


def test_main_refuses_output_dir_of_another_task(main_flags, mrpc_run):
  with pytest.raises(ValueError) as error:
    main_flags(task_name="CoLA", output_dir=mrpc_run["output_dir"])
  message = str(error.value)
  assert mrpc_run["output_dir"] in message
  assert "another task" in message and "run_info.json" in message
  assert "--output_dir" in message


# ------------------------------------------------- training example order


def _row_ids(row, vocab):
  """Input ids of an MRPC row, derived from the WORDS vocab by hand."""
  def tokens(sentence):
    return sentence.replace(".", " .").split()
  ids = ([vocab.index("[CLS]")] + [vocab.index(t) for t in tokens(row[3])] +
         [vocab.index("[SEP]")] + [vocab.index(t) for t in tokens(row[4])] +
         [vocab.index("[SEP]")])
  return tuple(ids + [0] * (32 - len(ids)))


@pytest.fixture
def order_setup(main_flags, tmp_path):
  """Runs main for one training step; returns (write_train, rows)."""
  data_dir = str(tmp_path / "data")
  _write_mrpc_data(data_dir, seed=11, num_train=30)
  rows = _read_rows(os.path.join(data_dir, "train.tsv"))[1:]
  with open(str(tmp_path / "vocab.txt")) as f:
    vocab = [line.rstrip("\n") for line in f]
  row_of_ids = {_row_ids(row, vocab): i for i, row in enumerate(rows)}
  assert len(row_of_ids) == len(rows)
  record_file = str(tmp_path / "out" / "train.tf_record")

  def write_train(**overrides):
    """The train.tf_record order as row indices, and its sidecar."""
    # 30 examples, batch 32: one update (a run of zero steps is refused).
    main_flags(num_train_epochs=1.1, **overrides)
    order = [row_of_ids[tuple(r["input_ids"].int64_list.value)]
             for r in _read_records(record_file)]
    with open(record_file + ".meta.json") as f:
      return order, json.load(f)

  return write_train, rows


def test_shuffled_order_is_the_seeds_permutation(order_setup):
  write_train, rows = order_setup
  for seed in (5, 6):
    expected = list(range(len(rows)))
    random.Random(seed).shuffle(expected)
    order, sidecar = write_train(seed=seed)
    assert order == expected
    assert sidecar["example_order"] == "shuffled"
    assert sidecar["shuffle_seed"] == seed
  assert write_train(seed=5)[0] != write_train(seed=6)[0]


def test_default_order_is_shuffled_and_file_order_keeps_the_file(
    order_setup):
  write_train, rows = order_setup
  expected = list(range(len(rows)))
  random.Random(12345).shuffle(expected)
  assert write_train()[0] == expected
  order, sidecar = write_train(train_example_order="file", seed=5)
  assert order == list(range(len(rows)))
  assert sidecar["example_order"] == "file"
  assert "shuffle_seed" not in sidecar


def test_changed_seed_or_order_rewrites_train_records(order_setup,
                                                      write_counter):
  write_train, _ = order_setup
  write_train(seed=5)
  write_train(seed=5)
  assert write_counter.count(write_counter[0]) == 1
  write_train(seed=6)
  write_train(train_example_order="file", seed=6)
  # The file order does not depend on the seed: no rewrite.
  write_train(train_example_order="file", seed=7)
  train_writes = [path for path in write_counter
                  if path.endswith("train.tf_record")]
  assert len(train_writes) == 3


def test_train_example_order_fingerprints_differ(tmp_path):
  data_file = tmp_path / "train.tsv"
  data_file.write_text("x\n")
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("[PAD]\n")
  def fingerprint(**order):
    return feature_cache.fingerprint(
        [str(data_file)], str(vocab_file), True, 32, "mrpc", 1,
        record_format=classification_features.RECORD_FORMAT_VERSION, **order)
  variants = [fingerprint(), fingerprint(example_order="shuffled",
                                         shuffle_seed=1),
              fingerprint(example_order="shuffled", shuffle_seed=2)]
  assert len({json.dumps(v, sort_keys=True) for v in variants}) == 3
