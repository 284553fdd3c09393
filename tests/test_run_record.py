"""Tests for checkpoints/run_info.py (what made an output_dir) and checkpoints/checkpoint_checks.py
(a checkpoint is complete and fits the config)."""
import json
import logging as std_logging
import os
import shutil

import pytest
import tensorflow as tf

from checkpoints import checkpoint_checks
from userio import cli
import modeling
from checkpoints import run_info

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CONFIG = os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json")


@pytest.fixture
def vocab(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
  return str(path)


def _record(vocab, **changes):
  values = dict(task="mrpc", labels=["0", "1"], do_lower_case=True,
                max_seq_length=32, bert_config_file=TINY_CONFIG,
                vocab_file=vocab)
  values.update(changes)
  return run_info.make_record(**values)


def test_record_fields_and_copies(tmp_path, vocab):
  out = str(tmp_path / "out")
  os.makedirs(out)
  record = _record(vocab)
  run_info.write(out, record, TINY_CONFIG, vocab)
  with open(os.path.join(out, "run_info.json")) as f:
    stored = json.load(f)
  # Keys other tools read (a Hugging Face converter reads the first three).
  assert stored["task"] == "mrpc" and stored["labels"] == ["0", "1"]
  assert stored["do_lower_case"] is True and stored["max_seq_length"] == 32
  assert stored["vocab_file"] == "vocab.txt"
  with open(vocab, "rb") as f:
    assert stored["vocab_sha256"] == __import__("hashlib").sha256(
        f.read()).hexdigest()
  for name in ("bert_config.json", "vocab.txt"):
    with open(os.path.join(out, name), "rb") as copy, open(
        TINY_CONFIG if name == "bert_config.json" else vocab, "rb") as orig:
      assert copy.read() == orig.read()
  assert sorted(run_info.assets(out)) == ["bert_config.json",
                                            "run_info.json", "vocab.txt"]


@pytest.mark.parametrize("changes, field", [
    (dict(task="cola"), "task"),
    (dict(labels=["0", "1", "2"]), "labels"),
    (dict(do_lower_case=False), "do_lower_case"),
    (dict(max_seq_length=64), "max_seq_length"),
])
def test_a_mismatching_resume_is_refused_naming_the_field(tmp_path, vocab,
                                                          changes, field):
  out = str(tmp_path)
  run_info.write(out, _record(vocab), TINY_CONFIG, vocab)
  with pytest.raises(cli.UserError) as error:
    run_info.check(out, _record(vocab, **changes), has_checkpoint=True,
                     do_train=True)
  message = str(error.value)
  assert "%s=" % field in message and "run_info.json" in message
  assert "Pass a new --output_dir, or delete that directory" in message


def test_evaluating_at_another_length_is_allowed(tmp_path, vocab):
  """Evaluation may read a run at another --max_seq_length; training on may
  not, so the allowance comes from do_train, not from an ignored field."""
  out = str(tmp_path)
  run_info.write(out, _record(vocab), TINY_CONFIG, vocab)
  stored = (tmp_path / "run_info.json").read_text()
  assert run_info.check(out, _record(vocab, max_seq_length=64),
                        has_checkpoint=True, do_train=False) is None
  with pytest.raises(cli.UserError, match="max_seq_length="):
    run_info.check(out, _record(vocab, max_seq_length=64),
                   has_checkpoint=True, do_train=True)
  assert (tmp_path / "run_info.json").read_text() == stored


def test_a_run_without_checkpoint_is_replaced_not_called_another_task(
    tmp_path, vocab, caplog):
  """A record whose run stopped before its first checkpoint is taken over
  with a log line; the same record with a checkpoint is refused."""
  out = str(tmp_path)
  run_info.write(out, _record(vocab, task="sst-2"), TINY_CONFIG, vocab)
  caplog.set_level(std_logging.INFO)
  assert run_info.check(out, _record(vocab), has_checkpoint=False,
                        do_train=True) is None
  replaced = [r.getMessage() for r in caplog.records
              if "this run replaces it" in r.getMessage()]
  assert len(replaced) == 1
  assert "run_info.json" in replaced[0] and "task='sst-2'" in replaced[0]
  with pytest.raises(cli.UserError, match="task="):
    run_info.check(out, _record(vocab), has_checkpoint=True, do_train=True)


def test_a_damaged_record_is_named(tmp_path, vocab):
  (tmp_path / "run_info.json").write_text("{\"task\": ")
  with pytest.raises(cli.UserError, match="run_info.json is not valid JSON"):
    run_info.check(str(tmp_path), _record(vocab), has_checkpoint=True,
                     do_train=True)


def test_variable_shapes_are_those_bert_model_makes():
  config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  with tf.Graph().as_default():
    ids = tf.compat.v1.placeholder(tf.int32, [1, 2])
    modeling.BertModel(config, False, ids)
    made = [(v.op.name, v.shape.as_list())
            for v in tf.compat.v1.global_variables()]
  assert sorted(checkpoint_checks.bert_variable_shapes(config)) == sorted(made)


def test_minilm_checkpoint_reads_and_fits_its_config(minilm_dir, tmp_path):
  prefix = os.path.join(minilm_dir, "bert_model.ckpt")
  config = modeling.BertConfig.from_json_file(
      os.path.join(minilm_dir, "bert_config.json"))
  shapes = checkpoint_checks.load_readable(prefix)
  checkpoint_checks.check_matches_config(shapes, config, prefix, "cfg")
  deeper = modeling.BertConfig.from_dict(dict(config.to_dict(),
                                              num_hidden_layers=7))
  with pytest.raises(cli.UserError,
                     match="no variable bert/encoder/layer_6/attention/self/"
                     "query/kernel, which --bert_config_file=cfg "
                     r"\(7 layers"):
    checkpoint_checks.check_matches_config(shapes, deeper, prefix, "cfg")
  # The last 100 bytes of the data file missing.
  copy = os.path.join(str(tmp_path), "bert_model.ckpt")
  shutil.copy(prefix + ".index", copy + ".index")
  data = prefix + ".data-00000-of-00001"
  with open(data, "rb") as f:
    content = f.read()
  with open(copy + ".data-00000-of-00001", "wb") as f:
    f.write(content[:-100])
  with pytest.raises(cli.UserError, match=r"bert_model\.ckpt\.data-00000-of-"
                     r"00001.* damaged or incomplete; download or copy"):
    checkpoint_checks.load_readable(copy)


def test_record_without_vocabulary(tmp_path):
  """run_pretraining.py's record: no casing, no vocabulary (it reads token
  ids), and the masked positions, compared only when training goes on."""
  out = str(tmp_path / "out")
  os.makedirs(out)
  record = run_info.make_record("pretraining", None, None, 128,
                                  TINY_CONFIG, None,
                                  max_predictions_per_seq=20)
  assert "vocab_file" not in record and "do_lower_case" not in record
  run_info.write(out, record, TINY_CONFIG, None)
  assert sorted(os.listdir(out)) == ["bert_config.json", "run_info.json"]
  assert sorted(run_info.assets(out)) == ["bert_config.json",
                                            "run_info.json"]
  longer = dict(record, max_predictions_per_seq=80)
  run_info.check(out, longer, has_checkpoint=True, do_train=False)
  with pytest.raises(cli.UserError, match="max_predictions_per_seq=20"):
    run_info.check(out, longer, has_checkpoint=True, do_train=True)
