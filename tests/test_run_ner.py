"""Tests for run_ner.py: windows and first sub-tokens on worked examples,
the token head and its loss against NumPy, the frozen feature modes and
their BiLSTM against NumPy, an end-to-end run (scores recomputed from its
CoNLL-format predictions), export + predictor, Hugging Face conversion, and
one-line errors for bad input."""
import gc
import json
import logging
import os
import random
import signal

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

import conftest
import modeling
import predictor
import run_ner
import script_runner
from runner import estimator
from tasks import feature_modes
from tasks import ner
import tokenization
from checkpoints import conversion
from tasks import conll

WORDS = "river stone quiet apple window garden doctor music paper".split()
NAMES = ["anna", "boris", "clara"]
PLACES = ["paris", "tokyo", "lima"]
# Word pieces for the worked examples: "johanson" -> jo ##han ##son,
# "visited" -> vis ##ited.
PIECES = ["jo", "##han", "##son", "vis", "##ited", "went", "to"]
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS + NAMES +
         PLACES + PIECES)
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 16, "initializer_range": 0.02,
    "intermediate_size": 32, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 4, "type_vocab_size": 2,
    "vocab_size": len(VOCAB)}


def _write_model_files(directory):
  vocab_file = os.path.join(directory, "vocab.txt")
  with open(vocab_file, "w") as f:
    f.write("".join(token + "\n" for token in VOCAB))
  config_file = os.path.join(directory, "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(TINY_CONFIG, f)
  return vocab_file, config_file


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  vocab_file, _ = _write_model_files(str(tmp_path_factory.mktemp("vocab")))
  return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


# ---------------------------------------------------------------- windows


def test_first_sub_tokens_and_max_context_worked_example(tokenizer):
  # Pieces: anna(0) jo(1) ##han(2) ##son(3) vis(4) ##ited(5) paris(6) .(7);
  # words start at 0, 1, 4, 6, 7. max_seq_length 6 leaves 4 tokens per
  # window; stride 2 gives windows [0, 4), [2, 6), [4, 8). Owners by
  # min(left, right) + 0.01 * 4: positions 0-2 -> window 0, 3-4 -> 1,
  # 5-7 -> 2. So anna and johanson are read from window 0, visited from
  # window 1, paris and "." from window 2.
  words = ["Anna", "Johanson", "visited", "Paris", "."]
  labels = [3, 4, 0, 1, 0]
  predict = ner.text_windows(words, tokenizer, 6, 2, label_ids=labels)
  assert [w.tokens for w in predict] == [
      ["[CLS]", "anna", "jo", "##han", "##son", "[SEP]"],
      ["[CLS]", "##han", "##son", "vis", "##ited", "[SEP]"],
      ["[CLS]", "vis", "##ited", "paris", ".", "[SEP]"]]
  assert [w.word_positions for w in predict] == [
      [(1, 0), (2, 1)], [(3, 2)], [(3, 3), (4, 4)]]
  assert [w.label_mask for w in predict] == [
      [0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 0]]
  assert [w.label_ids for w in predict] == [
      [0, 3, 4, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0]]
  # Training labels every word's first sub-token in every window.
  train = ner.text_windows(words, tokenizer, 6, 2, label_ids=labels,
                               is_training=True)
  assert [w.word_positions for w in train] == [
      [(1, 0), (2, 1)], [(3, 2)], [(1, 2), (3, 3), (4, 4)]]


def test_file_windows_document_and_sentence_context(tmp_path, tokenizer):
  path = tmp_path / "valid.txt"
  path.write_text("-DOCSTART- -X- O O\n\nanna B-PER\nwent O\n\nto O\n"
                  "paris B-LOC\n\n-DOCSTART- -X- O O\n\nlima B-LOC\n")
  documents, _ = conll.read_file(str(path), "iob2")
  labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  document = ner.file_windows(documents, labels, tokenizer, 16, 7,
                                  "document", False)
  assert [(w.tokens, first) for w, first in document] == [
      (["[CLS]", "anna", "went", "to", "paris", "[SEP]"], 0),
      (["[CLS]", "lima", "[SEP]"], 4)]
  assert document[0][0].label_ids == [0, 3, 0, 0, 1, 0]
  sentence = ner.file_windows(documents, labels, tokenizer, 16, 7,
                                  "sentence", False)
  assert [(w.tokens, first) for w, first in sentence] == [
      (["[CLS]", "anna", "went", "[SEP]"], 0),
      (["[CLS]", "to", "paris", "[SEP]"], 2),
      (["[CLS]", "lima", "[SEP]"], 4)]
  sentences = conll.sentences_of(documents)
  results = [np.array([0, 3, 0, 0, 1, 0]), np.array([0, 1, 0])]
  assert ner.predicted_tags(document, results, labels, sentences) == [
      ["B-PER", "O"], ["O", "B-LOC"], ["B-LOC"]]
  with pytest.raises(RuntimeError, match="predictions for 4 of 5 words"):
    ner.predicted_tags(document[:1], results, labels, sentences)


def test_word_the_tokenizer_drops_is_unk(tokenizer):
  pieces, first = ner.word_pieces(["anna", "\u200b", "lima"], tokenizer)
  assert (pieces, first) == (["anna", "[UNK]", "lima"], [0, 1, 2])


def test_split_text_keeps_offsets():
  text = "Anna Smith-Jones visited Paris,\u00a0(France)."
  words = tokenization.split_words_with_offsets(text)
  assert [w for w, _, _ in words] == ["Anna", "Smith", "-", "Jones",
                                      "visited", "Paris", ",", "(", "France",
                                      ")", "."]
  assert all(text[start:end] == word for word, start, end in words)


# --------------------------------------------------------- head and loss


def _bert_config():
  return modeling.BertConfig.from_dict(TINY_CONFIG)


def _inputs():
  """Two windows of 7: the second has 3 padding positions; label_ids hold
  junk where label_mask is 0, which the loss must ignore. A third window
  has no labeled position."""
  ids = np.array([[2, 19, 22, 23, 20, 5, 3], [2, 15, 16, 3, 0, 0, 0],
                  [2, 6, 3, 0, 0, 0, 0]], np.int32)
  mask = (ids > 0).astype(np.int32)
  labels = np.array([[4, 3, 2, 2, 1, 0, 4], [3, 3, 0, 1, 2, 2, 2],
                     [1, 1, 1, 1, 1, 1, 1]], np.int32)
  label_mask = np.array([[0, 1, 1, 0, 1, 1, 0], [0, 1, 1, 0, 0, 0, 0],
                         [0, 0, 0, 0, 0, 0, 0]], np.int32)
  return ids, mask, labels, label_mask


def _log_softmax(x):
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("loss_average", ["window", "word"])
def test_token_head_and_loss_against_numpy(loss_average):
  ids, mask, labels, label_mask = _inputs()
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(1)
    loss, per_example, logits, probabilities = ner.create_model(
        _bert_config(), False, tf.constant(ids), tf.constant(mask),
        tf.zeros_like(ids), tf.constant(labels), tf.constant(label_mask), 5,
        False, loss_average=loss_average)
    with tf.compat.v1.variable_scope("", reuse=True):
      sequence = modeling.BertModel(
          _bert_config(), False, tf.constant(ids), tf.constant(mask),
          scope="bert").get_sequence_output()
      weights = tf.compat.v1.get_variable("cls/ner/output_weights")
      bias = tf.compat.v1.get_variable("cls/ner/output_bias")
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      # A non-zero bias, so that its use is checked too.
      sess.run(bias.assign([0.3, -0.2, 0.1, 0.0, 0.5]))
      got = sess.run([loss, per_example, logits, probabilities, sequence,
                      weights, bias])
  loss, per_example, logits, probabilities, sequence, weights, bias = got
  want_logits = sequence @ weights.T + bias
  np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-6)
  log_probs = _log_softmax(want_logits.astype(np.float64))
  np.testing.assert_allclose(probabilities, np.exp(log_probs), atol=1e-6)
  want, every_word = [], []
  for window in range(3):
    positions = np.flatnonzero(label_mask[window])
    nll = [-log_probs[window, p, labels[window, p]] for p in positions]
    want.append(np.mean(nll) if nll else 0.0)
    every_word += nll
  np.testing.assert_allclose(per_example, want, rtol=1e-5)
  # window: 3 windows weigh alike (the third, with no word, as 0); word:
  # the 6 labeled words weigh alike, whichever window holds them.
  expected = np.mean(want) if loss_average == "window" else np.mean(
      every_word)
  assert loss == pytest.approx(expected, rel=1e-5)


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(inputs, length, kernel, bias, reverse):
  """One direction of an LSTM over the first `length` rows of [S, D]."""
  units = bias.shape[0] // 4
  c, h = np.zeros(units), np.zeros(units)
  out = np.zeros((inputs.shape[0], units))
  steps = range(length - 1, -1, -1) if reverse else range(length)
  for t in steps:
    gates = np.concatenate([inputs[t], h]) @ kernel + bias
    i, j, f, o = np.split(gates, 4)
    c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
    h = _sigmoid(o) * np.tanh(c)
    out[t] = h
  return out


def test_bilstm_against_numpy_with_padding():
  rng = np.random.RandomState(0)
  inputs = rng.randn(2, 5, 3).astype(np.float32)
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.int32)
  with tf.Graph().as_default():
    outputs = ner.bilstm(tf.constant(inputs), tf.constant(mask), 4)
    names = ["lstm_%d/%s/%s" % (layer, direction, kind) for layer in (0, 1)
             for direction in ("forward", "backward")
             for kind in ("kernel", "bias")]
    with tf.compat.v1.variable_scope("", reuse=True):
      variables = [tf.compat.v1.get_variable(name) for name in names]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      # Biases away from 0, so that they are checked too.
      for variable in variables[1::2]:
        sess.run(variable.assign(rng.randn(16) * 0.5))
      got, values = sess.run([outputs, variables])
  values = dict(zip(names, values))
  for row in range(2):
    length = int(mask[row].sum())
    layer_input = inputs[row].astype(np.float64)
    for layer in (0, 1):
      directions = [_numpy_lstm(
          layer_input, length, values["lstm_%d/%s/kernel" % (layer, d)],
          values["lstm_%d/%s/bias" % (layer, d)], d == "backward")
                    for d in ("forward", "backward")]
      layer_input = np.concatenate(directions, axis=1)
    np.testing.assert_allclose(got[row], layer_input, atol=1e-5)
    assert not got[row, length:].any()


@pytest.mark.parametrize("mode", feature_modes.FEATURE_MODES[1:])
def test_feature_modes_read_their_layers(mode):
  ids, mask, _, _ = _inputs()
  with tf.Graph().as_default():
    model = modeling.BertModel(_bert_config(), False, tf.constant(ids),
                               tf.constant(mask))
    features = ner.frozen_features(model, mode)
    layers = [model.get_embedding_output()] + model.get_all_encoder_layers()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got, layers = sess.run([features, layers])
  # Layers: 0 = embeddings, 1-4 = the encoder's. The learned weighted sums
  # start with equal weights and scale 1: the mean.
  want = {"embeddings": layers[0], "second_to_last": layers[3],
          "last": layers[4], "sum_last_four": np.mean(layers[1:5], axis=0),
          "concat_last_four": np.concatenate(layers[1:5], axis=-1),
          "sum_all": np.mean(layers[1:5], axis=0)}[mode]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", feature_modes.FEATURE_MODES)
def test_head_variable_shapes_are_the_models(mode):
  ids, mask, labels, label_mask = _inputs()
  with tf.Graph().as_default():
    ner.create_model(_bert_config(), True, tf.constant(ids),
                         tf.constant(mask), tf.zeros_like(ids),
                         tf.constant(labels), tf.constant(label_mask), 5,
                         False, feature_mode=mode, lstm_size=6)
    made = {v.op.name: v.shape.as_list() for v in ner.head_variables(
        tf.compat.v1.trainable_variables())}
  assert made == dict(ner.head_variable_shapes(_bert_config(), 5, mode,
                                                   6))


@pytest.mark.parametrize("mode", [feature_modes.FINE_TUNING, "sum_all"])
def test_skip_padding_gives_the_same_outputs(mode):
  """The model with --skip_padding (the encoder's feed-forward layers on the
  real tokens only) gives the same logits at every real position, and the
  same losses, as the model that runs them on the padding too; with the
  BiLSTM of a feature mode as well."""
  ids, mask, labels, label_mask = _inputs()
  values, outputs = {}, []
  for skip in (False, True):
    with tf.Graph().as_default():
      tf.compat.v1.set_random_seed(1)
      got = ner.create_model(
          _bert_config(), False, tf.constant(ids), tf.constant(mask),
          tf.zeros_like(ids), tf.constant(labels), tf.constant(label_mask), 5,
          False, feature_mode=mode, lstm_size=6, skip_padding=skip)
      variables = tf.compat.v1.global_variables()
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        if values:  # The first graph's weights, by name.
          for variable in variables:
            variable.load(values[variable.op.name], sess)
        else:
          values.update((v.op.name, sess.run(v)) for v in variables)
        outputs.append(sess.run(got[:3]))
  (loss, per_example, logits), (skip_loss, skip_per_example, skip_logits) = (
      outputs)
  real = mask.astype(bool)
  assert real.sum() < real.size  # the inputs have padding
  np.testing.assert_allclose(skip_logits[real], logits[real], rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(skip_per_example, per_example, rtol=1e-5,
                             atol=1e-6)
  assert skip_loss == pytest.approx(loss, rel=1e-5)


# -------------------------------------------------------------- the runs


def _document(rng):
  lines = ["-DOCSTART- -X- O O", ""]
  for _ in range(rng.randint(2, 4)):
    for _ in range(rng.randint(3, 8)):
      draw = rng.random()
      if draw < 0.15:
        lines.append("%s NNP I-NP I-PER" % rng.choice(NAMES))
      elif draw < 0.3:
        lines.append("%s NNP I-NP I-LOC" % rng.choice(PLACES))
      else:
        lines.append("%s NN I-NP O" % rng.choice(WORDS))
    lines.append("")
  return lines


def _write_data(data_dir, seed=1):
  """IOB1 files where names are persons and places locations: learnable in
  a few dozen updates."""
  rng = random.Random(seed)
  os.makedirs(data_dir, exist_ok=True)
  for name, count in (("train.txt", 30), ("valid.txt", 5), ("test.txt", 5)):
    lines = sum((_document(rng) for _ in range(count)), [])
    with open(os.path.join(data_dir, name), "w") as f:
      f.write("\n".join(lines) + "\n")


def _command(root, output_dir, actions, extra=()):
  return ["--data_dir=" + os.path.join(root, "data"),
          "--vocab_file=" + os.path.join(root, "vocab.txt"),
          "--bert_config_file=" + os.path.join(root, "bert_config.json"),
          "--output_dir=" + output_dir, "--max_seq_length=24",
          "--train_batch_size=8", "--learning_rate=3e-3",
          "--num_train_epochs=20", "--save_checkpoints_steps=20",
          "--seed=3"] + ["--" + a for a in actions] + list(extra)


def _build_run(run_script, root):
  _write_model_files(root)
  _write_data(os.path.join(root, "data"))
  conftest.run_logged(run_script, "run_ner.py", _command(
      root, os.path.join(root, "out"),
      ["do_train", "do_eval", "do_predict",
       "export_dir=" + os.path.join(root, "export")]),
                      os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def ner_run(shared_dir, run_script):
  return conftest.build_once(shared_dir, "ner_e2e",
                             lambda root: _build_run(run_script, root))


def _read_results(path):
  with open(path) as f:
    return {key: float(value) for key, value in
            (line.rstrip("\n").split(" = ") for line in f)}


def _spans(tags):
  """Entities of IOB tags written out independently: an entity starts at
  B-X, or at I-X unless the tag before is B-X or I-X; it goes on over I-X."""
  spans, start, kind = set(), None, None
  for i, tag in enumerate(tags + ["O"]):
    prefix, _, entity_type = tag.partition("-")
    continues = prefix == "I" and kind == entity_type
    if start is not None and not continues:
      spans.add((kind, start, i))
      start = kind = None
    if prefix in ("B", "I") and not continues:
      start, kind = i, entity_type
  return spans


@pytest.mark.slow
def test_end_to_end_scores_equal_its_predictions(ner_run):
  out = os.path.join(ner_run, "out")
  for name, data_file in (("eval", "valid.txt"), ("test", "test.txt")):
    with open(os.path.join(out, name + "_predictions.txt")) as f:
      sentences = [[line.split(" ") for line in block.split("\n")]
                   for block in f.read().strip("\n").split("\n\n")]
    documents, _ = conll.read_file(os.path.join(ner_run, "data", data_file),
                                   "iob1")
    assert [[(w.text, w.tag) for w in s]
            for s in conll.sentences_of(documents)] == [
                [(token, gold) for token, gold, _ in s] for s in sentences]
    gold, guess = set(), set()
    for index, sentence in enumerate(sentences):
      gold |= {(index,) + span for span in _spans([g for _, g, _ in sentence])}
      guess |= {(index,) + span for span in _spans([p for _, _, p in
                                                    sentence])}
    results = _read_results(os.path.join(out, name + "_results.txt"))
    precision = len(gold & guess) / len(guess)
    recall = len(gold & guess) / len(gold)
    assert results[name + "_precision"] == pytest.approx(precision)
    assert results[name + "_recall"] == pytest.approx(recall)
    assert results[name + "_f1"] == pytest.approx(
        2 * precision * recall / (precision + recall))
    assert results["global_step"] == conftest.checkpoint_step(out)
    # The task is learnable: far above the all-O baseline's F1 of 0.
    assert results[name + "_f1"] > 0.9
    (events,) = tf.io.gfile.glob(os.path.join(out, name, "events.*"))
    scalars = {(e.step, v.tag): v.simple_value
               for e in tf.compat.v1.train.summary_iterator(events)
               for v in e.summary.value}
    assert scalars[(results["global_step"], name + "_f1")] == pytest.approx(
        results[name + "_f1"])
  with open(os.path.join(out, "run_info.json")) as f:
    record = json.load(f)
  assert (record["task"], record["labels"], record["tag_scheme"],
          record["feature_mode"], record["context"], record["doc_stride"]) == (
              "ner", ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"], "iob1", "none",
              "document", 11)


@pytest.mark.slow
def test_default_run_is_a_short_progress_report(ner_run):
  """The fixture's run, without -v: its settings, a progress line per
  phase and the scores; the one warning is about the run (no
  --init_checkpoint), and Google's per-example dumps are left out."""
  with open(os.path.join(ner_run, "run.log")) as f:
    lines = f.read().splitlines()
  assert len(lines) <= 50, "\n".join(lines)
  warnings = script_runner.warning_lines("\n".join(lines))
  assert len(warnings) == 1 and "No --init_checkpoint" in warnings[0], (
      warnings)
  text = "\n".join(lines)
  for phase in ("Settings: max_seq_length=24", "Writing features to",
                "Running training", "step 80/80 (100.0%)",
                "eval results (conlleval)", "test results (conlleval)",
                "Exported "):
    assert phase in text, phase
  for detail in ("*** Example ***", "*** Features ***", "Trainable Variables",
                 "INFO:tensorflow", "WARNING:tensorflow", "deprecated"):
    assert detail not in text, detail


@pytest.mark.slow
def test_predictor_entities_and_offsets(ner_run):
  model = predictor.load(os.path.join(ner_run, "export"))
  assert isinstance(model, predictor.NerPredictor)
  # Words of the training data only; a double space keeps offsets honest.
  text = "Anna river quiet  Paris stone Boris"
  (result,) = model.predict_batch([text])
  entities = [(e["text"], e["type"], e["start"], e["end"])
              for e in result["entities"]]
  assert entities == [("Anna", "PER", 0, 4), ("Paris", "LOC", 18, 23),
                      ("Boris", "PER", 30, 35)]
  assert all(0.5 < e["score"] <= 1.0 for e in result["entities"])
  # The same tags as the bare signature on the padded window.
  serve = tf.saved_model.load(os.path.join(
      ner_run, "export", os.listdir(os.path.join(ner_run, "export"))[0])
                              ).signatures["serving_default"]
  ids = [2] + [VOCAB.index(word) for word in (
      "anna", "river", "quiet", "paris", "stone", "boris")] + [3]
  padded = ids + [0] * 16
  tags = serve(input_ids=tf.constant([padded]),
               input_mask=tf.constant([[1] * 8 + [0] * 16]),
               segment_ids=tf.zeros([1, 24], tf.int32))[ner.TAG_IDS]
  labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  assert [labels[t] for t in tags.numpy()[0][1:7]] == [
      "I-PER", "O", "O", "I-LOC", "O", "I-PER"]


@pytest.mark.slow
def test_predictor_command_reads_text_and_json_lines(ner_run, run_script):
  result = run_script("predictor.py", [
      "--export_dir=" + os.path.join(ner_run, "export")],
                      stdin='lima\n{"id": 3, "text": "clara"}\n')
  assert result.returncode == 0, result.stderr[-2000:]
  lines = [json.loads(line) for line in result.stdout.splitlines()]
  assert [[e["text"] for e in line["entities"]] for line in lines] == [
      ["lima"], ["clara"]]
  assert lines[1]["id"] == 3
  bad = run_script("predictor.py", [
      "--export_dir=" + os.path.join(ner_run, "export")], stdin="a\tb\n")
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1].endswith(
      "stdin:1: the NER model tags one text: give text alone (a text line "
      "holds no tab).")


@pytest.mark.slow
def test_hugging_face_round_trip_is_exact(ner_run, tmp_path):
  out = os.path.join(ner_run, "out")
  conversion.convert(out, str(tmp_path / "hf"))
  with open(str(tmp_path / "hf" / "config.json")) as f:
    config = json.load(f)
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["id2label"] == {"0": "O", "1": "B-LOC", "2": "I-LOC",
                                "3": "B-PER", "4": "I-PER"}
  hf = conversion.read_safetensors([str(tmp_path / "hf" /
                                        "model.safetensors")])
  checkpoint = tf.train.load_checkpoint(tf.train.latest_checkpoint(out))
  np.testing.assert_array_equal(hf["classifier.weight"],
                                checkpoint.get_tensor("cls/ner/output_weights"))
  conversion.convert(str(tmp_path / "hf"), str(tmp_path / "back"))
  back = tf.train.load_checkpoint(str(tmp_path / "back" / "bert_model.ckpt"))
  names = sorted(back.get_variable_to_shape_map())
  assert names == sorted(
      name for name in checkpoint.get_variable_to_shape_map()
      if not name.endswith(("adam_m", "adam_v")) and
      name not in ("global_step", "micro_step"))
  for name in names:
    np.testing.assert_array_equal(back.get_tensor(name),
                                  checkpoint.get_tensor(name), err_msg=name)
  with open(str(tmp_path / "back" / "run_info.json")) as f:
    record = json.load(f)
  assert (record["task"], record["labels"]) == (
      "ner", ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])


@pytest.mark.slow
def test_feature_mode_trains_no_bert_variable(ner_run, tmp_path, run_script):
  init = tf.train.latest_checkpoint(os.path.join(ner_run, "out"))
  output_dir = str(tmp_path / "features")
  conftest.run_logged(run_script, "run_ner.py", _command(
      ner_run, output_dir, ["do_train", "do_eval"],
      ["--init_checkpoint=" + init, "--feature_mode=concat_last_four",
       "--lstm_size=8", "--num_train_epochs=2"]), str(tmp_path / "run.log"))
  trained = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
  start = tf.train.load_checkpoint(init)
  names = trained.get_variable_to_shape_map()
  bert = [n for n in names if n.startswith("bert/")]
  assert bert and not [n for n in bert if n.endswith(("adam_m", "adam_v"))]
  for name in bert:
    np.testing.assert_array_equal(trained.get_tensor(name),
                                  start.get_tensor(name), err_msg=name)
  head = dict(ner.head_variable_shapes(_bert_config(), 5,
                                           "concat_last_four", 8))
  assert head["cls/ner/lstm_0/forward/kernel"] == [4 * 16 + 8, 32]
  for name, shape in head.items():
    assert names[name] == shape and name + "/adam_m" in names
  # The classifier (of the fine-tuned run's shape here, so loaded from it)
  # is trained with the BiLSTM.
  assert not np.array_equal(trained.get_tensor("cls/ner/output_weights"),
                            start.get_tensor("cls/ner/output_weights"))
  with open(os.path.join(output_dir, "run_info.json")) as f:
    record = json.load(f)
  assert (record["feature_mode"], record["lstm_size"]) == (
      "concat_last_four", 8)
  assert os.path.exists(os.path.join(output_dir, "eval_results.txt"))


@pytest.mark.slow
def test_sigterm_saves_and_resume_finishes(ner_run, tmp_path, run_script,
                                           script_runner):
  output_dir = str(tmp_path / "stopped")
  args = _command(ner_run, output_dir, ["do_train"])
  returncode = conftest.signal_after_first_update_saved(
      script_runner, "run_ner.py", args, output_dir,
      str(tmp_path / "stopped.log"), signal.SIGTERM)
  assert returncode == 128 + signal.SIGTERM
  final = conftest.checkpoint_step(os.path.join(ner_run, "out"))
  stopped_at = conftest.checkpoint_step(output_dir)
  assert stopped_at is not None and 0 < stopped_at < final
  log = conftest.run_logged(run_script, "run_ner.py", args,
                            str(tmp_path / "resumed.log"))
  assert "Resuming from" in log
  assert conftest.checkpoint_step(output_dir) == final


# ----------------------------------------------------- your own tag set


def _own_sentence(rng):
  """(words, BIOES tags): persons of a name, or a name and the surname
  johanson; one-word places; types named in lower case."""
  words, tags = [], []
  for _ in range(rng.randint(3, 8)):
    draw = rng.random()
    if draw < 0.1:
      words += [rng.choice(NAMES), "johanson"]
      tags += ["B-person", "E-person"]
    elif draw < 0.2:
      words.append(rng.choice(NAMES))
      tags.append("S-person")
    elif draw < 0.3:
      words.append(rng.choice(PLACES))
      tags.append("S-place")
    else:
      words.append(rng.choice(WORDS))
      tags.append("O")
  return words, tags


def _write_own_files(root):
  """Tab-separated token and tag (the test file without tags), no
  -DOCSTART- lines, Windows line ends."""
  rng = random.Random(4)
  for name, count, tagged in (("train.conll", 120, True),
                              ("dev.conll", 20, True),
                              ("test.conll", 20, False)):
    lines = []
    for _ in range(count):
      words, tags = _own_sentence(rng)
      lines += [word + ("\t" + tag if tagged else "")
                for word, tag in zip(words, tags)] + [""]
    with open(os.path.join(root, name), "w", newline="") as f:
      f.write("\r\n".join(lines))


def _build_own_run(run_script, root):
  _write_model_files(root)
  _write_own_files(root)
  args = _command(root, os.path.join(root, "out"), [
      "do_train", "do_eval", "do_predict",
      "export_dir=" + os.path.join(root, "export")], [
          "--train_file=" + os.path.join(root, "train.conll"),
          "--dev_file=" + os.path.join(root, "dev.conll"),
          "--predict_file=" + os.path.join(root, "test.conll"),
          "--tag_scheme=bioes", "--loss_average=word", "--context=sentence",
          "--num_train_epochs=20"])
  conftest.run_logged(run_script, "run_ner.py",
                      [a for a in args if not a.startswith("--data_dir=")],
                      os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def own_run(shared_dir, run_script):
  return conftest.build_once(shared_dir, "ner_own_files",
                             lambda root: _build_own_run(run_script, root))


@pytest.mark.slow
def test_own_bioes_files_train_score_predict_and_serve(own_run):
  out = os.path.join(own_run, "out")
  with open(os.path.join(out, "run_info.json")) as f:
    record = json.load(f)
  assert (record["tag_scheme"], record["labels"]) == ("bioes", [
      "O", "B-person", "I-person", "E-person", "S-person",
      "B-place", "I-place", "E-place", "S-place"])
  results = _read_results(os.path.join(out, "eval_results.txt"))
  assert results["eval_f1"] > 0.9
  assert results["eval_gold_person"] > results["eval_gold_place"] > 0
  # The test file has no tags: predictions only, a token and a tag a line.
  assert not os.path.exists(os.path.join(out, "test_results.txt"))
  with open(os.path.join(out, "test_predictions.txt")) as f:
    predicted = [line.split(" ") for line in f.read().split("\n") if line]
  with open(os.path.join(own_run, "test.conll"), newline="") as f:
    tokens = [line for line in f.read().split("\r\n") if line]
  assert [fields[0] for fields in predicted] == tokens
  assert {fields[1] for fields in predicted} >= {"O", "S-place", "B-person",
                                                 "E-person"}
  model = predictor.load(os.path.join(own_run, "export"))
  (result,) = model.predict_batch(["river anna johanson stone lima clara"])
  assert [(e["text"], e["type"]) for e in result["entities"]] == [
      ("anna johanson", "person"), ("lima", "place"), ("clara", "person")]


# -------------------------------------------------------------- bad input


@pytest.fixture
def main_flags(monkeypatch, tmp_path):
  """run_main(**overrides): main() with valid flags for a tiny run."""
  data_dir = str(tmp_path / "data")
  os.makedirs(data_dir)
  for name in ("train.txt", "valid.txt", "test.txt"):
    with open(os.path.join(data_dir, name), "w") as f:
      f.write("anna NNP I-NP I-PER\nwent VBD I-VP O\n")
  vocab_file, config_file = _write_model_files(str(tmp_path))
  defaults = {"data_dir": data_dir, "vocab_file": vocab_file,
              "bert_config_file": config_file,
              "output_dir": str(tmp_path / "out"), "max_seq_length": 16,
              "do_train": True}

  def run_main(**overrides):
    values = dict(defaults, **overrides)
    flag_values = flags.FlagValues()
    run_ner.define_flags(flag_values)
    flag_values(["run_ner.py"] + ["--%s=%s" % kv for kv in values.items()])
    run_ner.main([], flag_values=flag_values)

  return run_main


def _write(path, text):
  with open(path, "w") as f:
    f.write(text)


def test_output_dir_is_locked_for_the_run_and_windows_are_reused(
    main_flags, monkeypatch, tmp_path, caplog):
  """The lock of --output_dir is held while the run trains (and still after
  a garbage collection: the run keeps it) and released when it ends; the
  windows' file is written with a sidecar naming what it was made from,
  reused by the next run and written again when one of those changes."""
  out = str(tmp_path / "out")
  lock_file = os.path.join(out, "run.lock")
  owners = []

  def train(unused_self, input_fn, max_steps, saving_listeners=None):
    del input_fn, max_steps, saving_listeners
    gc.collect()
    with open(lock_file) as f:
      owners.append(json.load(f)["pid"])

  monkeypatch.setattr(estimator.Estimator, "train", train)
  caplog.set_level(logging.INFO)
  main_flags(train_batch_size=1)
  assert owners == [os.getpid()]
  gc.collect()
  assert not os.path.exists(lock_file)
  train_file = os.path.join(out, "train.tf_record")
  with open(train_file + ".meta.json") as f:
    sidecar = json.load(f)
  assert (sidecar["task"], sidecar["labels"], sidecar["window_stride"],
          sidecar["context"], sidecar["example_order"],
          sidecar["file"]["records"]) == (
              "ner", ["O", "B-PER", "I-PER"], 7, "document", "shuffled", 1)
  main_flags(train_batch_size=1)
  assert "Reusing windows in %s" % train_file in caplog.text
  main_flags(train_batch_size=1, doc_stride=3)
  assert ("Writing windows to %s again: it was made with another "
          "window_stride" % train_file) in caplog.text


@pytest.mark.parametrize("overrides,message", [
    ({"do_train": False}, "Nothing to do: pass at least one of --do_train"),
    ({"doc_stride": 0}, "--doc_stride=0 must be at least 1"),
    ({"feature_mode": "last", "lstm_size": 0}, "--lstm_size=0 must be at "
     "least 1"),
    ({"max_seq_length": 2}, "--max_seq_length=2 leaves no room"),
    ({"tag_scheme": "iob2"}, r"train.txt:1: an entity starts with I-PER, "
     r"but under IOB2 it starts with B-PER \(--tag_scheme=iob2\)\. If the "
     r"file is IOB1, pass --tag_scheme=iob1"),
])
def test_bad_flags_are_one_line_errors(main_flags, overrides, message):
  with pytest.raises(ValueError, match=message) as error:
    main_flags(**overrides)
  assert "\n" not in str(error.value)


def test_own_files_flags_are_one_line_errors(main_flags, tmp_path):
  train = str(tmp_path / "data" / "train.txt")
  cases = [
      ({"train_file": train}, r"Pass --data_dir \(CoNLL-2003's folder\) or "
       r"--train_file / --dev_file / --predict_file .*, not both"),
      ({"data_dir": ""}, r", not neither"),
      ({"data_dir": "", "train_file": train, "do_eval": True},
       r"--do_eval needs --dev_file \(a CoNLL file\)"),
      ({"data_dir": "", "train_file": str(tmp_path / "missing.conll")},
       r"missing.conll: file not found"),
      ({"data_dir": "", "train_file": train, "tag_scheme": "bioes"},
       r"train.txt:1: I-PER follows O or a sentence start, but under BIOES"),
  ]
  for overrides, message in cases:
    with pytest.raises(ValueError, match=message) as error:
      main_flags(**overrides)
    assert "\n" not in str(error.value)


def test_feature_mode_needs_its_layers(main_flags, tmp_path):
  config_file = str(tmp_path / "two_layers.json")
  with open(config_file, "w") as f:
    json.dump(dict(TINY_CONFIG, num_hidden_layers=2), f)
  with pytest.raises(ValueError, match="--feature_mode=concat_last_four "
                     "reads 4 encoder layers, but --bert_config_file=.* has 2"):
    main_flags(feature_mode="concat_last_four", bert_config_file=config_file)


def test_bad_data_lines_are_one_line_errors(main_flags, tmp_path):
  data_dir = tmp_path / "data"
  _write(str(data_dir / "valid.txt"), "anna I-PER\nwent\n")
  with pytest.raises(ValueError, match=r"valid.txt:2: found 1 fields, but "
                     r"line 1 has 2"):
    main_flags(do_eval=True)
  _write(str(data_dir / "valid.txt"), "anna I-DATE\n")
  with pytest.raises(ValueError, match=r"valid.txt:1: tag I-DATE is not one "
                     r"the model knows \(O, B-PER, I-PER\)"):
    main_flags(do_eval=True)
  _write(str(data_dir / "valid.txt"), "anna\nwent\n")
  with pytest.raises(ValueError, match=r"valid.txt has no tags .*--do_eval "
                     r"needs the gold tags"):
    main_flags(do_eval=True)
  os.remove(str(data_dir / "test.txt"))
  with pytest.raises(ValueError, match=r"holds no test file \(looked for "
                     r"test.txt, eng.testb\)"):
    main_flags(do_predict=True)


def test_eval_without_training_needs_a_ner_run(main_flags, tmp_path):
  # A checkpoint prefix beside no run_info.json: nothing names the labels.
  os.makedirs(str(tmp_path / "model"))
  _write(str(tmp_path / "model" / "ckpt.index"), "")
  with pytest.raises(ValueError, match="Cannot tell the model's labels"):
    main_flags(do_train=False, do_eval=True,
               init_checkpoint=str(tmp_path / "model" / "ckpt"))


@pytest.mark.slow
def test_bad_file_ends_the_script_with_one_line(tmp_path, run_script):
  root = str(tmp_path)
  _write_model_files(root)
  os.makedirs(os.path.join(root, "data"))
  _write(os.path.join(root, "data", "train.txt"), "anna B-PER\nwent O\n")
  result = run_script("run_ner.py", _command(root, os.path.join(root, "out"),
                                             ["do_train"]))
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("run_ner.py: error: ")
  assert "train.txt:1: B-PER follows O or a sentence start" in last
  assert "pass --tag_scheme=iob2" in last
  assert "Traceback" not in result.stderr


# ----------------------------------------------------------- reproduction


def test_table7_as_published():
  from reproduction import plan  # pylint: disable=import-outside-toplevel
  references = plan.load_references()
  table = {(e["model"], e["task"], e["split"]): e["value"]
           for e in references["results"]
           if e["where"] == "Table 7 (Section 5.3)"}
  assert table[("BERT-Base", "CoNLL-2003", "test")] == 92.4
  assert table[("BERT-Large", "CoNLL-2003", "test")] == 92.8
  # Section 5.3: the best feature-based row (concatenating the last four
  # layers) is "only 0.3 F1 behind fine-tuning the entire model".
  best = max((value, task) for (model, task, split), value in table.items()
             if task.startswith("CoNLL-2003-"))
  assert best[1] == "CoNLL-2003-concat_last_four"
  assert table[("BERT-Base", "CoNLL-2003", "dev")] - best[0] == (
      pytest.approx(0.3))
  assert {e["statistic"] for e in references["results"]
          if e["where"].startswith("Table 7")} == {"mean"}
  # Every Table 7 row is a task reproduce.py runs.
  assert {task for _, task, _ in table} == set(plan.TABLE7_TASKS)


def test_ner_cells_grid_and_metrics(tmp_path):
  from reproduction import plan  # pylint: disable=import-outside-toplevel
  from reproduction import report  # pylint: disable=import-outside-toplevel
  references = plan.load_references()
  grid = plan.grid_for("CoNLL-2003-last", "paper", plan.NO_GRID, references)
  # Appendix A.3's ranges: Section 5.3 gives no grid of its own.
  assert grid == ((16, 32), (5e-5, 3e-5, 2e-5), (2.0, 3.0, 4.0))
  model = plan.Model("c.json", "v.txt", "m.ckpt", False)
  setup = plan.Setup("/root", model, {"CoNLL-2003-last": "/conll"},
                     str(tmp_path), 128, 384, (), 256, "iob2")
  cell = plan.Cell("CoNLL-2003-last", 32, 3e-5, 3.0, "shuffled", 4)
  step = plan.cell_step(setup, cell)
  assert step.args[:8] == (
      "/root/run_ner.py", "--data_dir=/conll", "--tag_scheme=iob2",
      "--do_eval=true", "--do_predict=true", "--context=document",
      "--feature_mode=last", "--max_seq_length=256")
  assert "--do_lower_case=false" in step.args
  assert step.done_files == ("eval_results.txt", "test_results.txt")
  os.makedirs(step.output_dir)
  _write(os.path.join(step.output_dir, "eval_results.txt"),
         "eval_f1 = 0.95\neval_f1_PER = 0.5\nglobal_step = 9\n")
  _write(os.path.join(step.output_dir, "test_results.txt"),
         "test_f1 = 0.9\n")
  metrics = report.read_cell_metrics(cell, step.output_dir)
  assert metrics == pytest.approx({"f1": 95.0, "test_f1": 90.0})
  test_refs = report.matching_references(references, "BERT-Base",
                                         "CoNLL-2003", "test_f1")
  assert [(e["split"], e["value"]) for e in test_refs] == [("test", 92.4)]
  dev_first = report.matching_references(references, "BERT-Base",
                                         "CoNLL-2003", "f1")
  assert [e["split"] for e in dev_first] == ["dev", "test"]


def test_conll_subset_keeps_whole_documents(tmp_path):
  from reproduction import plan  # pylint: disable=import-outside-toplevel
  source = tmp_path / "conll"
  source.mkdir()
  _write(str(source / "train.txt"),
         "-DOCSTART- O\n\na O\n\nb O\n\n-DOCSTART- O\n\nc O\n\n"
         "-DOCSTART- O\n\nd O\n")
  _write(str(source / "valid.txt"), "e O\n")
  target = str(tmp_path / "subset")
  plan.subset_conll_dir(str(source), target, "train.txt", 3)
  with open(os.path.join(target, "train.txt")) as f:
    # Two sentences, then the second document takes it to 3.
    assert f.read() == ("-DOCSTART- O\n\na O\n\nb O\n\n-DOCSTART- O\n\n"
                        "c O\n\n")
  assert os.path.islink(os.path.join(target, "valid.txt"))


@pytest.mark.slow
def test_reproduce_dry_run_lists_table7_cells(tmp_path, run_script):
  root = str(tmp_path)
  vocab_file, config_file = _write_model_files(root)
  conll_dir = os.path.join(root, "conll")
  os.makedirs(conll_dir)
  for name in ("train.txt", "valid.txt", "test.txt"):
    _write(os.path.join(conll_dir, name), "anna I-PER\nwent O\n")
  result = run_script("reproduce.py", [
      "--bert_config_file=" + config_file, "--vocab_file=" + vocab_file,
      "--init_checkpoint=", "--do_lower_case=true", "--conll_dir=" + conll_dir,
      "--tasks=table7", "--seeds=1,2", "--batch_sizes=32",
      "--learning_rates=3e-5", "--epochs=3", "--dry_run",
      "--ner_max_seq_length=64", "--output_dir=" + os.path.join(root, "out")])
  assert result.returncode == 0, result.stderr[-2000:]
  commands = [line for line in result.stdout.splitlines()
              if "run_ner.py" in line]
  # 7 tasks (fine-tuning and six feature modes) x 2 restarts.
  assert len(commands) == 14
  assert sum("--feature_mode=none" in c for c in commands) == 2
  assert sum("--feature_mode=concat_last_four" in c for c in commands) == 2
  result = run_script("reproduce.py", [
      "--bert_config_file=" + config_file, "--vocab_file=" + vocab_file,
      "--init_checkpoint=", "--do_lower_case=true", "--tasks=CoNLL-2003",
      "--dry_run", "--ner_max_seq_length=64",
      "--output_dir=" + os.path.join(root, "out")])
  assert result.returncode != 0
  assert "set --conll_dir" in result.stderr.strip().splitlines()[-1]
