"""The documented workflow from raw text to a fine-tuned model, on real text,
and the one-line refusals of each step's mismatches.

The corpus is the context text of SQuAD v1.1's dev set (../shared/assets),
one sentence per line, a paragraph per document: about 300 KB. Then, as
docs/vocabulary.md tells a user:

  create_vocab.py             a 2000-line vocabulary learned from it
  create_pretraining_data.py  records made with that vocabulary
  run_pretraining.py          a tiny model (vocab_size 2000) trained from
                              random weights for a few updates
  run_classifier.py           MRPC (a slice of its real files) fine-tuned
                              from that checkpoint

Independent references: Google's vocab.txt layout (ids 0 and 100-103); the
corpus's own words, split by tokenization.BasicTokenizer, for what the
vocabulary covers and what the records spell; the sha256 of the
vocabulary's bytes, computed here, for what the sidecars and run_info.json
name; and Adam's update bound (|m| / sqrt(v) <= (1 - beta1) / sqrt(1 -
beta2) * sum_j (beta1 / sqrt(beta2))^j), which a model fine-tuned from the
pre-trained weights must stay within and one started from fresh weights
would not.
"""
import hashlib
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import conftest
import tokenization

SQUAD_DEV = os.path.join(conftest.ASSETS_DIR, "squad", "v1.1",
                         "dev-v1.1.json")
MRPC = os.path.join(conftest.ASSETS_DIR, "glue", "MRPC")
GOOGLE_VOCAB = os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                            "vocab.txt")
CORPUS_BYTES = 300000
VOCAB_SIZE = 2000
SEQ_LENGTH = 32
PREDICTIONS = 5
PRETRAINING_STEPS = 4
TRAIN_ROWS, DEV_ROWS, BATCH = 48, 16, 8
FINE_TUNING_STEPS = TRAIN_ROWS // BATCH
FINE_TUNING_RATE = 2e-5
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": VOCAB_SIZE}
# A sentence ends at ., ! or ? followed by a space and a capital or digit.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")


def _write_corpus(path):
  """SQuAD dev's paragraphs, a sentence per line, until CORPUS_BYTES."""
  with open(SQUAD_DEV, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  written = 0
  with open(path, "w", encoding="utf-8") as out:
    for article in articles:
      for paragraph in article["paragraphs"]:
        lines = [s.strip() for s in _SENTENCE_END.split(paragraph["context"])
                 if s.strip()]
        text = "\n".join(lines) + "\n\n"
        out.write(text)
        written += len(text.encode("utf-8"))
        if written >= CORPUS_BYTES:
          return


def _write_mrpc_slice(folder):
  """The header and the first rows of MRPC's real train and dev files."""
  os.makedirs(folder)
  for name, rows in (("train.tsv", TRAIN_ROWS), ("dev.tsv", DEV_ROWS)):
    with open(os.path.join(MRPC, name), encoding="utf-8") as f:
      lines = f.read().splitlines(keepends=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
      f.write("".join(lines[:rows + 1]))


def _run(run_script, script, args, root, name):
  return conftest.run_logged(run_script, script, args,
                             os.path.join(root, name + ".log"))


def _make_data(run_script, root):
  _write_corpus(os.path.join(root, "corpus.txt"))
  _run(run_script, "create_vocab.py", [
      "--input_file=" + os.path.join(root, "corpus.txt"),
      "--output_file=" + os.path.join(root, "vocab.txt"),
      "--vocab_size=%d" % VOCAB_SIZE, "--num_unused=99",
      "--do_lower_case=True"], root, "create_vocab")
  _run(run_script, "create_pretraining_data.py", [
      "--input_file=" + os.path.join(root, "corpus.txt"),
      "--output_file=" + os.path.join(root, "records.tfrecord"),
      "--vocab_file=" + os.path.join(root, "vocab.txt"),
      "--do_lower_case=True", "--max_seq_length=%d" % SEQ_LENGTH,
      "--max_predictions_per_seq=%d" % PREDICTIONS, "--dupe_factor=1"],
       root, "create_pretraining_data")
  with open(os.path.join(root, "bert_config.json"), "w") as f:
    json.dump(TINY_CONFIG, f)


@pytest.fixture(scope="module")
def data(shared_dir, run_script):
  """The corpus, the learned vocab.txt, the records and a config."""
  return conftest.build_once(shared_dir, "vocab_workflow_data",
                             lambda root: _make_data(run_script, root))


def _pretraining_args(data, output_dir, *extra):
  return ["--input_file=" + os.path.join(data, "records.tfrecord"),
          "--bert_config_file=" + os.path.join(data, "bert_config.json"),
          "--output_dir=" + output_dir, "--do_train",
          "--train_batch_size=8", "--max_seq_length=%d" % SEQ_LENGTH,
          "--max_predictions_per_seq=%d" % PREDICTIONS,
          "--num_train_steps=%d" % PRETRAINING_STEPS, "--num_warmup_steps=1",
          "--learning_rate=1e-3"] + list(extra)


def _train(run_script, data, root):
  pretrained = os.path.join(root, "pretrained")
  _run(run_script, "run_pretraining.py", _pretraining_args(
      data, pretrained, "--vocab_file=" + os.path.join(data, "vocab.txt")),
       root, "run_pretraining")
  _write_mrpc_slice(os.path.join(root, "mrpc"))
  _run(run_script, "run_classifier.py", [
      "--task_name=MRPC", "--data_dir=" + os.path.join(root, "mrpc"),
      "--vocab_file=" + os.path.join(pretrained, "vocab.txt"),
      "--bert_config_file=" + os.path.join(pretrained, "bert_config.json"),
      "--init_checkpoint=" + os.path.join(
          pretrained, "model.ckpt-%d" % PRETRAINING_STEPS),
      "--do_lower_case=True", "--output_dir=" + os.path.join(
          root, "classifier"), "--do_train", "--do_eval",
      "--max_seq_length=%d" % SEQ_LENGTH, "--train_batch_size=%d" % BATCH,
      "--learning_rate=%g" % FINE_TUNING_RATE, "--num_train_epochs=1"],
       root, "run_classifier")


@pytest.fixture(scope="module")
def trained(data, shared_dir, run_script):
  """run_pretraining.py's output_dir and run_classifier.py's, made from
  `data`."""
  root = conftest.build_once(shared_dir, "vocab_workflow_trained",
                             lambda root: _train(run_script, data, root))
  return os.path.join(root, "pretrained"), os.path.join(root, "classifier")


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _corpus_lines(data):
  with open(os.path.join(data, "corpus.txt"), encoding="utf-8") as f:
    return [line for line in f.read().splitlines() if line]


# ------------------------------------------------------------------ steps


@pytest.mark.slow
def test_vocabulary_has_googles_layout_and_covers_the_corpus(data):
  with open(os.path.join(data, "vocab.txt"), encoding="utf-8") as f:
    tokens = f.read().splitlines()
  assert len(tokens) == VOCAB_SIZE == len(set(tokens))
  assert tokens[0] == "[PAD]" and tokens[1:100] == [
      "[unused%d]" % i for i in range(99)]
  assert tokens[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  # Learned from lower-cased text: no piece has a capital letter.
  assert not [t for t in tokens[104:] if t != t.lower()]
  assert tokenization.vocab_is_cased(tokens) is False
  # Every word of the corpus is made of its pieces, none [UNK].
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  tokenizer = tokenization.FullTokenizer(os.path.join(data, "vocab.txt"))
  words = {word for line in _corpus_lines(data)
           for word in basic.tokenize(line)}
  assert len(words) > 5000
  unknown = [w for w in words if "[UNK]" in tokenizer.tokenize(w)]
  assert not unknown, unknown[:10]


def _records(path):
  spec = {name: tf.io.FixedLenFeature([length], tf.int64) for name, length in
          (("input_ids", SEQ_LENGTH), ("segment_ids", SEQ_LENGTH),
           ("input_mask", SEQ_LENGTH), ("masked_lm_positions", PREDICTIONS),
           ("masked_lm_ids", PREDICTIONS))}
  spec["masked_lm_weights"] = tf.io.FixedLenFeature([PREDICTIONS],
                                                    tf.float32)
  return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec)
           .items()} for r in tf.data.TFRecordDataset(path)]


@pytest.mark.slow
def test_records_spell_the_corpus_with_the_vocabulary(data):
  """Every record's segment A, its masked tokens put back, is a run of the
  corpus's words; its sidecar names the vocabulary by its bytes' sha256."""
  path = os.path.join(data, "records.tfrecord")
  records = _records(path)
  assert len(records) > 1000
  vocab = tokenization.load_vocab(os.path.join(data, "vocab.txt"))
  inverse = {i: token for token, i in vocab.items()}
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  corpus_words = " %s " % " ".join(
      word for line in _corpus_lines(data) for word in basic.tokenize(line))
  for record in records[:200]:
    ids = record["input_ids"].copy()
    assert ids.max() < VOCAB_SIZE
    count = int(record["masked_lm_weights"].sum())
    ids[record["masked_lm_positions"][:count]] = (
        record["masked_lm_ids"][:count])
    length = int(record["input_mask"].sum())
    first_sep = int(np.flatnonzero(record["segment_ids"][:length])[0]) - 1
    pieces = [inverse[i] for i in ids[1:first_sep]]
    assert [inverse[ids[0]], inverse[ids[first_sep]]] == ["[CLS]", "[SEP]"]
    # Truncation may cut a word: its continuing pieces at the start and
    # its last piece at the end are left out of the comparison.
    while pieces and pieces[0].startswith("##"):
      pieces.pop(0)
    text = " ".join(pieces).replace(" ##", "")
    inner = text.split(" ")[:-1]
    if inner:
      assert " %s " % " ".join(inner) in corpus_words, text
  with open(path + ".meta.json") as f:
    sidecar = json.load(f)
  assert sidecar["vocab_sha256"] == _sha256(os.path.join(data, "vocab.txt"))
  assert (sidecar["vocab_size"], sidecar["do_lower_case"],
          sidecar["file"]["records"]) == (VOCAB_SIZE, True, len(records))


@pytest.mark.slow
def test_pretraining_trains_the_vocabularys_embeddings(data, trained):
  pretrained, _ = trained
  checkpoint = tf.train.load_checkpoint(
      os.path.join(pretrained, "model.ckpt-%d" % PRETRAINING_STEPS))
  assert checkpoint.get_variable_to_shape_map()[
      "bert/embeddings/word_embeddings"] == [VOCAB_SIZE, 32]
  with open(os.path.join(pretrained, "run_info.json")) as f:
    record = json.load(f)
  assert record["vocab_sha256"] == _sha256(os.path.join(data, "vocab.txt"))
  # The vocabulary travels with the checkpoints, byte for byte.
  assert _sha256(os.path.join(pretrained, "vocab.txt")) == record[
      "vocab_sha256"]


def _adam_bound(steps, learning_rate, beta_1=0.9, beta_2=0.999):
  """The most `steps` updates of Google's Adam (no bias correction) can move
  a weight, weight decay aside: each update's |m| / sqrt(v) is at most
  (1 - beta_1) / sqrt(1 - beta_2) times the sum of (beta_1 /
  sqrt(beta_2))^j over the steps so far."""
  ratio = beta_1 / np.sqrt(beta_2)
  per_step = [(1 - beta_1) / np.sqrt(1 - beta_2) *
              sum(ratio ** j for j in range(t)) for t in range(1, steps + 1)]
  return learning_rate * sum(per_step)


@pytest.mark.slow
def test_fine_tuning_starts_from_the_pretrained_weights(trained):
  pretrained, classifier = trained
  start = tf.train.load_checkpoint(
      os.path.join(pretrained, "model.ckpt-%d" % PRETRAINING_STEPS))
  tuned = tf.train.load_checkpoint(
      os.path.join(classifier, "model.ckpt-%d" % FINE_TUNING_STEPS))
  bound = _adam_bound(FINE_TUNING_STEPS, FINE_TUNING_RATE)
  # Weight decay adds at most 0.01 * lr * |w| per step.
  bound += FINE_TUNING_STEPS * 0.01 * FINE_TUNING_RATE
  moved = 0.0
  for name in ("bert/embeddings/word_embeddings",
               "bert/encoder/layer_0/attention/self/query/kernel"):
    change = np.abs(tuned.get_tensor(name) - start.get_tensor(name)).max()
    assert change <= bound, (name, change, bound)
    moved = max(moved, change)
  assert moved > 0
  with open(os.path.join(classifier, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  assert int(results["global_step"]) == FINE_TUNING_STEPS
  correct = float(results["eval_accuracy"]) * DEV_ROWS
  assert correct == pytest.approx(round(correct), abs=1e-4)


# ------------------------------------------------------------- refusals


def _refusal(run_script, script, args):
  result = run_script(script, args)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  return result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_records_with_a_casing_that_contradicts_the_vocabulary(
    data, tmp_path, run_script):
  vocab_file = os.path.join(data, "vocab.txt")
  last = _refusal(run_script, "create_pretraining_data.py", [
      "--input_file=" + os.path.join(data, "corpus.txt"),
      "--output_file=" + str(tmp_path / "records"),
      "--vocab_file=" + vocab_file, "--do_lower_case=False"])
  assert last.startswith(
      "create_pretraining_data.py: error: --vocab_file=%s is uncased (it "
      "holds no uppercase pieces), but --do_lower_case=False was given; set "
      "--do_lower_case=True" % vocab_file)
  assert os.listdir(str(tmp_path)) == []


@pytest.mark.slow
def test_pretraining_a_config_smaller_than_the_records_vocabulary(
    data, tmp_path, run_script):
  config = str(tmp_path / "bert_config.json")
  with open(config, "w") as f:
    json.dump(dict(TINY_CONFIG, vocab_size=1500), f)
  args = _pretraining_args(data, str(tmp_path / "out"))
  args[1] = "--bert_config_file=" + config
  last = _refusal(run_script, "run_pretraining.py", args)
  assert last.startswith(
      "run_pretraining.py: error: --input_file: %s was made with a "
      "vocabulary of %d tokens (its sidecar says), more than the "
      "vocab_size=1500 of --bert_config_file=%s" % (
          os.path.join(data, "records.tfrecord"), VOCAB_SIZE, config))
  # Told the vocabulary, the run refuses it against the config first.
  last = _refusal(run_script, "run_pretraining.py", args + [
      "--vocab_file=" + os.path.join(data, "vocab.txt")])
  assert "has %d tokens, more than the vocab_size=1500" % VOCAB_SIZE in last


@pytest.mark.slow
def test_pretraining_records_of_another_vocabulary(data, tmp_path,
                                                   run_script):
  """A vocabulary of the same size with two pieces swapped is another one:
  the records' ids would mean other pieces."""
  with open(os.path.join(data, "vocab.txt"), encoding="utf-8") as f:
    tokens = f.read().splitlines()
  tokens[500], tokens[501] = tokens[501], tokens[500]
  other = str(tmp_path / "other_vocab.txt")
  with open(other, "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in tokens))
  last = _refusal(run_script, "run_pretraining.py", _pretraining_args(
      data, str(tmp_path / "out"), "--vocab_file=" + other))
  assert last == (
      "run_pretraining.py: error: --input_file: %s was made with another "
      "vocabulary than --vocab_file=%s (sha256 %s... in its sidecar, %s... "
      "here); pass the vocabulary create_pretraining_data.py was run with, "
      "or make the records again with this one." % (
          os.path.join(data, "records.tfrecord"), other,
          _sha256(os.path.join(data, "vocab.txt"))[:12],
          _sha256(other)[:12]))


@pytest.mark.slow
def test_resuming_on_records_of_another_vocabulary(data, tmp_path,
                                                   run_script):
  """Without --vocab_file the run records the records' vocabulary, and a
  resume on records made with another one is refused."""
  out = str(tmp_path / "out")
  args = _pretraining_args(data, out)
  args[args.index("--num_train_steps=%d" % PRETRAINING_STEPS)] = (
      "--num_train_steps=1")
  args[args.index("--num_warmup_steps=1")] = "--num_warmup_steps=0"
  _run(run_script, "run_pretraining.py", args, str(tmp_path), "first")
  with open(os.path.join(out, "run_info.json")) as f:
    assert json.load(f)["vocab_sha256"] == _sha256(
        os.path.join(data, "vocab.txt"))
  # The same records, their sidecar saying another vocabulary made them.
  moved = str(tmp_path / "records.tfrecord")
  shutil.copy(os.path.join(data, "records.tfrecord"), moved)
  with open(os.path.join(data, "records.tfrecord.meta.json")) as f:
    sidecar = json.load(f)
  sidecar["vocab_sha256"] = _sha256(GOOGLE_VOCAB)
  with open(moved + ".meta.json", "w") as f:
    json.dump(sidecar, f)
  args[0] = "--input_file=" + moved
  args[args.index("--num_train_steps=1")] = "--num_train_steps=2"
  last = _refusal(run_script, "run_pretraining.py", args)
  assert last.startswith(
      "run_pretraining.py: error: --output_dir=%s holds checkpoints of "
      "another vocabulary" % out)


@pytest.mark.slow
def test_fine_tuning_with_a_vocabulary_larger_than_the_models(
    trained, tmp_path, run_script):
  pretrained, _ = trained
  last = _refusal(run_script, "run_classifier.py", [
      "--task_name=MRPC", "--data_dir=" + MRPC,
      "--vocab_file=" + GOOGLE_VOCAB,
      "--bert_config_file=" + os.path.join(pretrained, "bert_config.json"),
      "--init_checkpoint=" + os.path.join(
          pretrained, "model.ckpt-%d" % PRETRAINING_STEPS),
      "--output_dir=" + str(tmp_path / "out"), "--do_train",
      "--max_seq_length=%d" % SEQ_LENGTH])
  assert "--vocab_file=%s has 30522 tokens, more than the vocab_size=%d" % (
      GOOGLE_VOCAB, VOCAB_SIZE) in last
