"""Tests for run_swag.py and tasks/swag.py: SWAG as the BERT paper ran it.

Independent references: CSV files written here in the layout of SWAG's
release (its header, the unnamed first column, quoted fields) and read
back field by field; the multiple-choice head and its loss re-derived in
NumPy (the choices flattened to one batch of sequences, the pooled vector
of each times the weights plus the bias, a softmax over each question's
choices), the training-time dropout mask drawn again in NumPy as
tests/test_heads.py does; the published numbers of the paper's Table 4 and
Section 4.4 typed here; the eval metrics recomputed from the predictions.
"""
import csv
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

from checkpoints import conversion
from checkpoints import hf_mapping
import conftest
import modeling
import predictor
from reproduction import plan
from reproduction import report
from memory import memory_model
from runner import estimator
import run_swag
import script_runner
from tasks import multiple_choice
from tasks import swag
import test_convert_checkpoint
import test_heads
from test_heads import built_models  # pylint: disable=unused-import
import test_modeling
import tokenization
from userio import cli

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2",
          "gold-source", "ending0", "ending1", "ending2", "ending3", "label"]
UNCASED_VOCAB = os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                             "vocab.txt")


def _write_csv(path, rows):
  with open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)
  return str(path)


# ------------------------------------------------------------ the files


def test_reads_the_released_layout(tmp_path):
  """A row as SWAG's train.csv has it (quoted fields, a comma and a line
  break inside them), read into segment A = sent1 and segment B = sent2
  and the ending; test.csv's header has no label."""
  rows = [HEADER,
          ["0", "lsmdc1052_Harry_Potter-94857", "18313",
           "Students lower their eyes nervously. She",
           "Students lower their eyes nervously.", "She", "gold",
           "pats her shoulder, then saunters toward someone.",
           "turns with two students.", "walks slowly towards someone.",
           "wheels around\nas her dog thunders out.", "2"],
          ["7", "anetv_dm5WXFiQZUQ", "18419", "He rides the motorcycle.",
           "He rides the motorcycle.", "", "gen", "a", "b", "c", "d", "0"]]
  path = _write_csv(tmp_path / "train.csv", rows)
  first, second = swag.read_examples(path, "train", needs_label=True)
  assert (first.guid, first.example_id, first.label) == ("train-0", "0", 2)
  assert first.context == "Students lower their eyes nervously."
  assert first.continuations() == [
      "She pats her shoulder, then saunters toward someone.",
      "She turns with two students.", "She walks slowly towards someone.",
      "She wheels around\nas her dog thunders out."]
  # An empty sent2 adds nothing to the endings; ids come from column 0.
  assert (second.example_id, second.continuations(), second.label) == (
      "7", ["a", "b", "c", "d"], 0)
  test = _write_csv(tmp_path / "test.csv",
                    [HEADER[:-1]] + [row[:-1] for row in rows[1:]])
  assert [e.label for e in swag.read_examples(test, "test", False)] == [
      None, None]


def test_header_without_the_numbering_column_numbers_rows(tmp_path):
  path = _write_csv(tmp_path / "val.csv", [
      HEADER[1:], ["v", "1", "A b", "A", "b", "gold", "e0", "e1", "e2", "e3",
                   "3"], ["w", "2", "C d", "C", "d", "gold", "f0", "f1",
                          "f2", "f3", "1"]])
  examples = swag.read_examples(path, "dev", needs_label=True)
  assert [(e.example_id, e.guid, e.label) for e in examples] == [
      ("0", "dev-0", 3), ("1", "dev-1", 1)]


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(UNCASED_VOCAB, do_lower_case=True)


def test_choice_layout_by_hand(tokenizer):
  """[CLS] A [SEP] B [SEP] per choice, segments 0 then 1; a long pair is
  cut longest first, A kept whole for the other choices."""
  layouts = swag.choice_layouts(
      "Students lower their eyes.", ["She turns.", "She walks slowly "
                                     "towards someone who smiles back."],
      12, tokenizer)
  assert layouts[0] == (
      ["[CLS]", "students", "lower", "their", "eyes", ".", "[SEP]", "she",
       "turns", ".", "[SEP]"], [0] * 7 + [1] * 4)
  # 5 + 9 tokens cut to 9: B gives up its tail until it is as long as A,
  # then one more (B goes first on a tie).
  assert layouts[1] == (
      ["[CLS]", "students", "lower", "their", "eyes", ".", "[SEP]", "she",
       "walks", "slowly", "towards", "[SEP]"], [0] * 7 + [1] * 5)


@pytest.mark.parametrize("edit, message", [
    (lambda rows: rows[2].pop(), r"train.csv:3: found 11 fields, expected "
     r"12 as in the header\. Use SWAG's CSV files"),
    (lambda rows: [row.pop(10) for row in rows],
     r"train.csv:1: the header lacks the column ending3"),
    (lambda rows: rows[1].__setitem__(9, " "),
     r"train.csv:2: ending2 is empty; each question needs 4 endings"),
    (lambda rows: rows[2].__setitem__(11, "4"),
     r"train.csv:3: label '4' is not an ending's index \(0 to 3\)"),
    (lambda rows: rows[1].__setitem__(11, "x"),
     r"train.csv:2: label 'x' is not an ending's index"),
    (lambda rows: [row.pop() for row in rows],
     r"train.csv:1: the header lacks the column label"),
])
def test_bad_rows_are_named_by_file_and_line(tmp_path, edit, message):
  rows = [list(HEADER)] + [
      [str(i), "v", "1", "A b", "A", "b", "gold", "e0", "e1", "e2", "e3",
       "1"] for i in range(3)]
  edit(rows)
  path = _write_csv(tmp_path / "train.csv", rows)
  with pytest.raises(cli.UserError, match=message):
    swag.read_examples(path, "train", needs_label=True)


def test_unreadable_files_are_named(tmp_path):
  missing = str(tmp_path / "val.csv")
  with pytest.raises(cli.UserError, match="val.csv does not exist"):
    swag.read_examples(missing, "dev", True)
  broken = tmp_path / "test.csv"
  broken.write_text(",".join(HEADER[:-1]) + '\n0,v,1,"unclosed\n')
  with pytest.raises(cli.UserError, match=r"test.csv:2: not valid CSV"):
    swag.read_examples(str(broken), "test", False)
  broken.write_bytes(b",".join(h.encode() for h in HEADER) + b"\n\xff\n")
  with pytest.raises(cli.UserError, match=r"test.csv:2: byte 0xff"):
    swag.read_examples(str(broken), "test", False)


# --------------------------------------------------------------- the head


QUESTIONS, SEQ = 3, 12


def _choice_inputs():
  """int32 [QUESTIONS, NUM_CHOICES, SEQ] ids, mask, segments; some padded."""
  rng = np.random.RandomState(5)
  shape = (QUESTIONS, swag.NUM_CHOICES, SEQ)
  ids = rng.randint(1, test_heads.CONFIG["vocab_size"], shape).astype(
      np.int32)
  mask = np.ones(shape, np.int32)
  mask[0, 1, 8:] = 0
  mask[2, 3, 6:] = 0
  ids[mask == 0] = 0
  types = np.zeros(shape, np.int32)
  types[..., 5:] = 1
  types[mask == 0] = 0
  return ids, mask, types


def np_multiple_choice(pooled, weights, bias, labels, keep=None,
                       dropout_prob=0.0):
  """The paper's head in float64: pooled [questions * choices, hidden]
  (choice-major within a question), dropout by the bool mask `keep`,
  score = pooled . weights[0] + bias[0], softmax over each question's
  choices, cross-entropy of the true choice and its mean."""
  inputs = np.asarray(pooled, np.float64)
  if keep is not None:
    inputs = np.where(keep, inputs / (1.0 - dropout_prob), 0.0)
  scores = inputs @ np.asarray(weights, np.float64)[0] + bias[0]
  logits = scores.reshape(len(labels), -1)
  shifted = logits - logits.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  per_example = -log_probs[np.arange(len(labels)), labels]
  return per_example.mean(), per_example, logits, np.exp(log_probs)


@pytest.mark.parametrize("is_training", [False, True],
                         ids=["eval", "training"])
def test_head_and_loss_match_numpy(built_models, is_training):
  """create_model: one BERT batch of all choices (checked against
  tests/test_modeling.py's NumPy forward pass of the flattened inputs
  outside training), the head's two variables, the scores, softmax and
  loss in NumPy; in training after dropout at the config's
  hidden_dropout_prob (0.2 here, not Google's classifier's fixed 0.1),
  its mask drawn again in NumPy."""
  dropout_prob = 0.2
  config = modeling.BertConfig(**dict(test_heads.CONFIG,
                                      hidden_dropout_prob=dropout_prob))
  ids, mask, types = _choice_inputs()
  labels = np.array([2, 0, 3], np.int32)
  with tf.Graph().as_default():
    test_heads._start_graph()
    head = multiple_choice.create_model(
        config, is_training, tf.constant(ids), tf.constant(mask),
        tf.constant(types), tf.constant(labels), False)
    (model,) = built_models
    shapes = test_heads._head_shapes()
    arrays = test_heads._head_arrays(shapes, seed=3)
    arrays.update(test_modeling._random_weights(config, seed=1))
    got, pooled = test_heads._run((head, model.get_pooled_output()), arrays)
  assert shapes == {multiple_choice.OUTPUT_WEIGHTS: [1, config.hidden_size],
                    multiple_choice.OUTPUT_BIAS: [1]}
  flat = [a.reshape(-1, SEQ) for a in (ids, mask, types)]
  if not is_training:
    _, want_pooled = test_modeling._np_bert(arrays, config, *flat)
    np.testing.assert_allclose(pooled, want_pooled, atol=1e-4)
  keep = None
  if is_training:
    keep = test_heads.np_keep_mask(pooled.shape, dropout_prob,
                                   "loss/dropout")
    assert 0 < (~keep).sum() < keep.size
  want = np_multiple_choice(pooled, arrays[multiple_choice.OUTPUT_WEIGHTS],
                            arrays[multiple_choice.OUTPUT_BIAS], labels, keep,
                            dropout_prob)
  loss, per_example, logits, probabilities = got
  assert logits.shape == (QUESTIONS, swag.NUM_CHOICES)
  for value, reference in zip((loss, per_example, logits, probabilities),
                              want):
    np.testing.assert_allclose(value, reference, **test_heads.TOLERANCE)
  if is_training:
    without = np_multiple_choice(pooled, arrays[multiple_choice.OUTPUT_WEIGHTS],
                                 arrays[multiple_choice.OUTPUT_BIAS], labels)
    assert np.abs(without[2] - logits).max() > 1e-2


def test_memory_model_counts_every_choice(minilm_dir):
  """An example is 4 sequences: its estimate is that of 4 one-sequence
  examples, and --micro_batch_size=auto picks the largest divisor of the
  batch whose 4x sequences fit (checked by trying every divisor)."""
  config = modeling.BertConfig.from_json_file(
      os.path.join(minilm_dir, "bert_config.json"))
  choices = memory_model.BertMemory(config, 128, sequences_per_example=4)
  single = memory_model.BertMemory(config, 128)
  for micro in (1, 3, 8):
    assert choices.estimate_bytes(micro, "fp32", False, 2) == (
        single.estimate_bytes(4 * micro, "fp32", False, 2))

  def planned(sequences):  # What the planner requires, with its margin.
    return memory_model.planned_bytes(memory_model.estimate_bytes(
        config, 128, sequences, num_accumulation_steps=2))

  budget = planned(10)
  want = max(m for m in range(1, 17) if 16 % m == 0 and
             planned(4 * m) <= budget)
  found = choices.plan(16, budget, "fp32", allow_checkpointing=False)
  assert (found.micro_batch, found.accumulation_steps) == (want, 16 // want)
  assert want == 2
  assert "4 sequences per example" in choices.describe()


# -------------------------------------------------------------- end to end

WORDS = ("river stone quiet bright market garden window yellow teacher "
         "letter morning travel winter summer island forest silver engine "
         "doctor music paper planet").split()
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2}
NUM_TRAIN, NUM_DEV, EPOCHS, BATCH = 40, 10, 5, 4
STEPS = NUM_TRAIN * EPOCHS // BATCH


def _questions(rng, count):
  """Rows whose true ending repeats the sentence's first word and says
  "again": a task a tiny model learns in a few epochs."""
  rows = []
  for i in range(count):
    sentence = " ".join(rng.choice(WORDS) for _ in range(4))
    start = "The " + rng.choice(WORDS)
    endings = [" ".join(rng.choice(WORDS) for _ in range(3))
               for _ in range(swag.NUM_CHOICES)]
    label = rng.randrange(swag.NUM_CHOICES)
    endings[label] = sentence.split()[0] + " again ."
    rows.append([str(i), "video%d" % i, str(100 + i), sentence + " " + start,
                 sentence, start, "gold"] + endings + [str(label)])
  return rows


def _write_swag_data(data_dir):
  """train.csv, val.csv and test.csv (val's questions without labels)."""
  os.makedirs(data_dir)
  rng = random.Random(3)
  dev = _questions(rng, NUM_DEV)
  _write_csv(os.path.join(data_dir, "train.csv"),
             [HEADER] + _questions(rng, NUM_TRAIN))
  _write_csv(os.path.join(data_dir, "val.csv"), [HEADER] + dev)
  _write_csv(os.path.join(data_dir, "test.csv"),
             [HEADER[:-1]] + [row[:-1] for row in dev])


def _write_model_files(root):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "the",
           "again"] + WORDS
  with open(os.path.join(root, "vocab.txt"), "w") as f:
    f.write("".join(token + "\n" for token in vocab))
  with open(os.path.join(root, "bert_config.json"), "w") as f:
    json.dump(dict(TINY_CONFIG, vocab_size=len(vocab)), f)


def _command(root, output_dir, actions):
  return ["--data_dir=" + os.path.join(root, "data"),
          "--vocab_file=" + os.path.join(root, "vocab.txt"),
          "--bert_config_file=" + os.path.join(root, "bert_config.json"),
          "--output_dir=" + output_dir, "--max_seq_length=24",
          "--train_batch_size=%d" % BATCH, "--micro_batch_size=2",
          "--eval_batch_size=4", "--predict_batch_size=4",
          "--learning_rate=1e-3", "--num_train_epochs=%d" % EPOCHS,
          "--save_checkpoints_steps=10", "--seed=7"] + [
              "--" + action for action in actions]


def _build_run(run_script, root):
  _write_swag_data(os.path.join(root, "data"))
  _write_model_files(root)
  conftest.run_logged(run_script, "run_swag.py", _command(
      root, os.path.join(root, "out"), [
          "do_train", "do_eval", "do_predict",
          "export_dir=" + os.path.join(root, "export")]),
                      os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def swag_run(shared_dir, run_script):
  """The root of one uninterrupted train/eval/predict/export run."""
  return conftest.build_once(shared_dir, "swag_e2e",
                             lambda root: _build_run(run_script, root))


def _eval_results(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return {key: float(value) for key, value in
            (line.rstrip("\n").split(" = ") for line in f)}


@pytest.mark.slow
def test_end_to_end_outputs(swag_run):
  """Accuracy and loss in eval_results.txt equal those recomputed from the
  test predictions (test.csv holds val.csv's questions); the prediction
  files list each question once with its id; the head learned the toy
  task (chance: 25%); run_info.json records the four choices; gradient
  accumulation ran on questions of four sequences."""
  out = os.path.join(swag_run, "out")
  results = _eval_results(out)
  assert sorted(results) == ["eval_accuracy", "eval_loss", "global_step",
                             "loss"]
  assert results["global_step"] == STEPS
  with open(os.path.join(out, "test_results.tsv")) as f:
    probabilities = np.array([line.split("\t") for line in f], np.float64)
  assert probabilities.shape == (NUM_DEV, 4)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
  labels = np.array([e.label for e in swag.read_examples(
      os.path.join(swag_run, "data", "val.csv"), "dev", True)])
  predicted = probabilities.argmax(axis=1)
  assert results["eval_accuracy"] == pytest.approx(
      np.mean(predicted == labels), abs=1e-6)
  assert results["eval_loss"] == pytest.approx(
      -np.log(probabilities[np.arange(NUM_DEV), labels]).mean(), rel=1e-4)
  assert results["eval_accuracy"] >= 0.8
  with open(os.path.join(out, multiple_choice.PREDICTIONS_FILE)) as f:
    table = list(csv.reader(f))
  assert table[0] == ["id", "ending0", "ending1", "ending2", "ending3",
                      "pred"]
  assert [row[0] for row in table[1:]] == [str(i) for i in range(NUM_DEV)]
  assert [int(row[5]) for row in table[1:]] == list(predicted)
  np.testing.assert_allclose(np.array([row[1:5] for row in table[1:]],
                                      np.float64), probabilities, atol=1e-7)
  with open(os.path.join(out, "run_info.json")) as f:
    record = json.load(f)
  assert (record["task"], record["labels"], record["num_choices"],
          record["max_seq_length"]) == ("swag", None, 4, 24)
  # --micro_batch_size=2 of 4: two micro-batches per update, accumulated.
  checkpoint = tf.train.load_checkpoint(os.path.join(
      out, "model.ckpt-%d" % STEPS))
  assert checkpoint.get_tensor("micro_step") == 2 * STEPS
  assert checkpoint.has_tensor(multiple_choice.OUTPUT_WEIGHTS + "/accum_grad")


@pytest.mark.slow
def test_default_run_is_a_short_progress_report(swag_run):
  """The fixture's run, without -v: settings, a progress line per phase,
  the results; the one warning is about the run (no --init_checkpoint),
  and Google's per-example and per-input dumps are left out."""
  with open(os.path.join(swag_run, "run.log")) as f:
    lines = f.read().splitlines()
  assert len(lines) <= 45, "\n".join(lines)
  warnings = script_runner.warning_lines("\n".join(lines))
  assert len(warnings) == 1 and "No --init_checkpoint" in warnings[0], (
      warnings)
  text = "\n".join(lines)
  for phase in ("Settings: max_seq_length=24", "Running training",
                "step %d/%d (100.0%%)" % (STEPS, STEPS), "Eval results",
                "eval_accuracy = ", "Running prediction", "Exported "):
    assert phase in text, phase
  for detail in ("*** Example ***", "*** Features ***", "choice 0:",
                 "Trainable Variables", "INFO:tensorflow",
                 "WARNING:tensorflow", "deprecated"):
    assert detail not in text, detail


def test_output_dir_is_locked_for_the_run_and_features_are_reused(
    tmp_path, monkeypatch, caplog):
  """In-process: the lock of --output_dir is held while the run trains (a
  garbage collection does not drop it) and released when main returns;
  train.tf_record gets a sidecar naming what it was made from, is reused
  by the next run and written again when its order changes."""
  root = str(tmp_path)
  _write_swag_data(os.path.join(root, "data"))
  _write_model_files(root)
  out = os.path.join(root, "out")
  lock_file = os.path.join(out, "run.lock")
  owners = []

  def train(unused_self, input_fn, max_steps, saving_listeners=None):
    del input_fn, max_steps, saving_listeners
    gc.collect()
    with open(lock_file) as f:
      owners.append(json.load(f)["pid"])

  def run_main(*extra):
    flag_values = flags.FlagValues()
    run_swag.define_flags(flag_values)
    flag_values(["run_swag.py"] + _command(root, out, ["do_train"]) +
                list(extra))
    run_swag.main([], flag_values=flag_values)

  monkeypatch.setattr(estimator.Estimator, "train", train)
  caplog.set_level(logging.INFO)
  run_main()
  assert owners == [os.getpid()]
  gc.collect()
  assert not os.path.exists(lock_file)
  train_file = os.path.join(out, "train.tf_record")
  with open(train_file + ".meta.json") as f:
    sidecar = json.load(f)
  assert (sidecar["task"], sidecar["example_order"], sidecar["shuffle_seed"],
          sidecar["max_seq_length"], sidecar["file"]["records"]) == (
              "swag", "shuffled", 7, 24, NUM_TRAIN)
  run_main()
  assert "Reusing features in %s" % train_file in caplog.text
  run_main("--train_example_order=file")
  assert ("Writing features to %s again: it was made with another "
          "example_order, shuffle_seed" % train_file) in caplog.text


@pytest.mark.slow
def test_export_and_predictor_give_the_test_predictions(swag_run, run_script):
  """The SavedModel serves [batch, choices, length] inputs; the predictor,
  given each test question's sentence and continuations, returns
  test_results.tsv's probabilities (its own layout, padding only to the
  batch's longest choice), in Python and as a command."""
  with open(os.path.join(swag_run, "out", "test_results.tsv")) as f:
    want = np.array([line.split("\t") for line in f], np.float64)
  examples = swag.read_examples(os.path.join(swag_run, "data", "test.csv"),
                                "test", False)
  model = predictor.load(os.path.join(swag_run, "export"), batch_size=3)
  assert isinstance(model, predictor.MultipleChoicePredictor)
  got = model.predict_batch([(e.context, e.continuations())
                             for e in examples])
  np.testing.assert_allclose([g["probabilities"] for g in got], want,
                             atol=1e-5)
  assert [g["choice"] for g in got] == list(want.argmax(axis=1))
  first = examples[0]
  lines = "\t".join([first.context] + first.continuations()) + "\n" + (
      json.dumps({"id": "q", "sentence": first.context,
                  "endings": first.continuations()[:3]}) + "\n")
  result = run_script("predictor.py", [
      "--export_dir=" + os.path.join(swag_run, "export"), "--input=-"],
                      stdin=lines)
  assert result.returncode == 0, result.stderr[-2000:]
  one, three = [json.loads(line) for line in result.stdout.splitlines()]
  np.testing.assert_allclose(one["probabilities"], want[0], atol=1e-5)
  assert one["ending"] == first.continuations()[one["choice"]]
  # Three endings: the softmax over the first three scores of question 0.
  np.testing.assert_allclose(three["probabilities"],
                             want[0][:3] / want[0][:3].sum(), atol=1e-5)
  assert three["id"] == "q"
  result = run_script("predictor.py", [
      "--export_dir=" + os.path.join(swag_run, "export"), "--input=-"],
                      stdin="just a sentence\n")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      "predictor.py: error: stdin:1: endings must be a list of at least 2 "
      "candidate endings (in a text line: the sentence, then each ending, "
      "separated by tabs), not [].")


@pytest.mark.slow
def test_sigterm_saves_and_the_rerun_resumes_to_the_same_weights(
    swag_run, tmp_path, run_script, script_runner):
  output_dir = str(tmp_path / "stopped")
  args = _command(swag_run, output_dir, ["do_train"])
  status = conftest.signal_after_first_update_saved(
      script_runner, "run_swag.py", args, output_dir,
      str(tmp_path / "stopped.log"), signal.SIGTERM)
  assert status == 128 + signal.SIGTERM
  stopped_at = conftest.checkpoint_step(output_dir)
  assert stopped_at is not None and 0 < stopped_at < STEPS
  log = conftest.run_logged(run_script, "run_swag.py", args,
                            str(tmp_path / "resumed.log"))
  assert "Resuming from" in log
  final = "model.ckpt-%d" % STEPS
  resumed = tf.train.load_checkpoint(os.path.join(output_dir, final))
  reference = tf.train.load_checkpoint(os.path.join(swag_run, "out", final))
  names = sorted(reference.get_variable_to_shape_map())
  assert names == sorted(resumed.get_variable_to_shape_map())
  assert multiple_choice.OUTPUT_WEIGHTS + "/adam_m" in names
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name),
                               reference.get_tensor(name), rtol=1e-6,
                               atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_bad_label_ends_in_one_line(swag_run, tmp_path, run_script):
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  with open(os.path.join(swag_run, "data", "val.csv"), newline="") as f:
    rows = list(csv.reader(f))
  rows[3][-1] = "7"
  _write_csv(data_dir / "val.csv", rows)
  result = run_script("run_swag.py", [
      "--data_dir=%s" % data_dir, "--vocab_file=" + os.path.join(
          swag_run, "vocab.txt"),
      "--bert_config_file=" + os.path.join(swag_run, "bert_config.json"),
      "--init_checkpoint=" + os.path.join(swag_run, "out",
                                          "model.ckpt-%d" % STEPS),
      "--output_dir=%s" % (tmp_path / "out"), "--max_seq_length=24",
      "--do_eval"])
  assert result.returncode == 2
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "run_swag.py: error: %s:4: label '7' is not an ending's index (0 to "
      "3). Repair that line: the label names the true ending, 0 for "
      "ending0." % (data_dir / "val.csv"))


# ------------------------------------------------------------ conversion


def _multiple_choice(bert_config, ids):
  choices = tf.stack([ids, ids], axis=1)
  multiple_choice.create_model(bert_config, False, choices, tf.ones_like(choices),
                        tf.zeros_like(choices), tf.constant([0]), False)


def test_hf_round_trip_is_exact(tmp_path):
  """Google -> BertForMultipleChoice -> Google, bit for bit: the head is
  Hugging Face's classifier.weight [1, hidden] and classifier.bias [1],
  the config declares BertForMultipleChoice and names no labels."""
  folder = test_convert_checkpoint._fine_tuned_folder(
      str(tmp_path / "swag"), "swag", None, _multiple_choice)
  hf, config, back, record = test_convert_checkpoint._round_trip(folder,
                                                                 tmp_path)
  original = test_convert_checkpoint._model_tensors(folder)
  test_convert_checkpoint._assert_same_tensors(back, original)
  np.testing.assert_array_equal(hf["classifier.weight"],
                                original[multiple_choice.OUTPUT_WEIGHTS])
  np.testing.assert_array_equal(hf["classifier.bias"],
                                original[multiple_choice.OUTPUT_BIAS])
  assert hf["classifier.weight"].shape == (1, 64)
  assert config["architectures"] == ["BertForMultipleChoice"]
  assert "id2label" not in config and config["finetuning_task"] == "swag"
  assert (record["task"], record["labels"]) == ("swag", None)


def test_declared_architecture_tells_the_heads_apart(tmp_path):
  """A [1, hidden] classifier is a regression classifier unless config.json
  declares BertForMultipleChoice."""
  folder = test_convert_checkpoint._fine_tuned_folder(
      str(tmp_path / "swag"), "swag", None, _multiple_choice)
  hf_dir = str(tmp_path / "hf")
  conversion.convert(folder, hf_dir)
  config_path = os.path.join(hf_dir, "config.json")
  with open(config_path) as f:
    config = json.load(f)
  config["architectures"] = ["BertForSequenceClassification"]
  config["problem_type"] = "regression"
  config.pop("finetuning_task")
  with open(config_path, "w") as f:
    json.dump(config, f)
  model = conversion.read_hf_model(hf_dir)
  assert model.architecture == "BertForSequenceClassification"
  assert model.labels == [None]
  assert "output_weights" in model.tensors
  assert hf_mapping.head_tensor_names("BertForMultipleChoice") == [
      multiple_choice.OUTPUT_WEIGHTS, multiple_choice.OUTPUT_BIAS]


# ------------------------------------------------------------ reproduce.py


def test_paper_recipe_and_table_4():
  """Section 4.4: 3 epochs, learning rate 2e-5, batch 16, for every preset
  but custom; Table 4: BERT-Base dev 81.6, BERT-Large dev 86.6 and test
  86.3."""
  references = plan.load_references()
  for preset in ("paper", "appendix", "small_models"):
    assert plan.grid_for("SWAG", preset, plan.NO_GRID, references) == (
        (16,), (2e-5,), (3.0,))
  assert plan.grid_for("SWAG", "custom", plan.NO_GRID, references) == (
      (), (), ())
  published = {(e["model"], e["split"]): e["value"]
               for e in references["results"] if e["task"] == "SWAG"}
  assert published == {("BERT-Base", "dev"): 81.6,
                       ("BERT-Large", "dev"): 86.6,
                       ("BERT-Large", "test"): 86.3}
  assert "SWAG" not in plan.ALL_TASKS


def test_swag_cell_runs_run_swag_and_is_compared_with_table_4(tmp_path):
  references = plan.load_references()
  setup = plan.Setup("/repo", plan.Model("c.json", "v.txt", "", True),
                     {"SWAG": "/data/swag"}, str(tmp_path), 128, 384, ())
  cell = plan.Cell("SWAG", 16, 2e-5, 3.0, "shuffled", 1)
  step = plan.cell_step(setup, cell)
  assert step.args[:3] == ("/repo/run_swag.py", "--data_dir=/data/swag",
                           "--do_eval=true")
  assert "--train_batch_size=16" in step.args
  assert step.done_files == ("eval_results.txt",)
  os.makedirs(step.output_dir)
  with open(os.path.join(step.output_dir, "eval_results.txt"), "w") as f:
    f.write("eval_accuracy = 0.8\neval_loss = 0.5\nglobal_step = 3\n")
  metrics = report.read_cell_metrics(cell, step.output_dir)
  assert metrics == {"accuracy": pytest.approx(80.0)}
  summary = report.summarize_task("SWAG", [cell], {cell.name: metrics})
  (row,) = report.comparison_rows({"SWAG": summary}, references,
                                  "BERT-Base")
  assert row["difference"]["against"]["value"] == 81.6
  assert row["difference"]["value"] == pytest.approx(80.0 - 81.6)


def test_swag_subset_keeps_rows_whole(tmp_path):
  source = tmp_path / "swag"
  source.mkdir()
  rows = [HEADER] + [[str(i), "v", "1", "s", "A,\nline", "b", "gold", "e0",
                      "e1", "e2", "e3", str(i % 4)] for i in range(6)]
  _write_csv(source / "train.csv", rows)
  _write_csv(source / "val.csv", rows)
  target = tmp_path / "subset"
  plan.subset_csv_dir(str(source), str(target), "train.csv", 4)
  kept = swag.read_examples(str(target / "train.csv"), "train", True)
  assert len(kept) == 4 and all(e.context == "A,\nline" for e in kept)
  ids = [int(e.example_id) for e in kept]
  assert ids == sorted(ids)
  assert os.path.islink(str(target / "val.csv"))
