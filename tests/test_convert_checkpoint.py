"""Tests for convert_checkpoint.py: Google's layout <-> Hugging Face's.

The references are independent of the converter: the two published copies
of MiniLM in ../shared/assets (one per layout, the same numbers), the
NumPy transpose of Google's kernels for Hugging Face's [out, in] weights,
and fine-tuned checkpoints made here with the scripts' own create_model.
"""
import json
import logging
import os
import shutil

import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy
import tensorflow as tf

from checkpoints import checkpoint_checks
from userio import cli
import conftest
from checkpoints import conversion
from checkpoints import hf_mapping
import modeling
import run_classifier
from checkpoints import run_info
import run_squad
import tokenization

REPO_ROOT = conftest.REPO_ROOT
HF_MINILM_DIR = os.path.join(conftest.ASSETS_DIR, "models",
                             "all-minilm-l6-v2-hf")
GOOGLE_MINILM = os.path.join(conftest.MINILM_DIR, "bert_model.ckpt")
TINY_CONFIG = os.path.join(REPO_ROOT, "sample_data", "tiny_bert_config.json")
UNCASED_VOCAB = os.path.join(conftest.ASSETS_DIR, "bert_vocab", "uncased",
                             "vocab.txt")
# Fields of bert_config.json that Hugging Face's config.json has too.
SHARED_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
                 "num_attention_heads", "intermediate_size",
                 "hidden_dropout_prob", "attention_probs_dropout_prob",
                 "max_position_embeddings", "type_vocab_size",
                 "initializer_range")


def _google_tensors(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def _read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _assert_same_tensors(got, want):
  assert sorted(got) == sorted(want)
  for name in want:
    assert got[name].dtype == want[name].dtype, name
    assert np.array_equal(got[name], want[name]), name


# ------------------------------------------------------- the real MiniLM


def test_minilm_hf_to_google_equals_the_published_google_copy(tmp_path):
  out = str(tmp_path / "google")
  assert conversion.convert(HF_MINILM_DIR, out) == (
      conversion.GOOGLE)
  _assert_same_tensors(_google_tensors(os.path.join(out, "bert_model.ckpt")),
                       _google_tensors(GOOGLE_MINILM))
  got = _read_json(os.path.join(out, "bert_config.json"))
  want = _read_json(os.path.join(conftest.MINILM_DIR, "bert_config.json"))
  # Hugging Face's "gelu" is the erf form: "gelu_exact" here. The Google
  # copy in the assets says "gelu" (tanh), though MiniLM was trained with
  # erf (MANIFEST.md).
  assert got.pop("hidden_act") == "gelu_exact"
  assert want.pop("hidden_act") == "gelu"
  assert got == want
  with open(os.path.join(out, "vocab.txt"), "rb") as f:
    with open(os.path.join(HF_MINILM_DIR, "vocab.txt"), "rb") as g:
      assert f.read() == g.read()
  record = _read_json(os.path.join(out, "run_info.json"))
  assert record["do_lower_case"] is True
  assert record["task"] is None and record["labels"] is None
  assert not os.path.exists(out + ".tmp")


def test_minilm_google_to_hf_equals_the_published_hf_copy(tmp_path):
  out = str(tmp_path / "hf")
  conversion.convert(GOOGLE_MINILM, out)
  got = safetensors_numpy.load_file(os.path.join(out, "model.safetensors"))
  want = safetensors_numpy.load_file(
      os.path.join(HF_MINILM_DIR, "model.safetensors"))
  # position_ids is a buffer (0..511) that old transformers saved.
  np.testing.assert_array_equal(want.pop("embeddings.position_ids"),
                                np.arange(512)[None])
  _assert_same_tensors(got, want)
  config = _read_json(os.path.join(out, "config.json"))
  published = _read_json(os.path.join(HF_MINILM_DIR, "config.json"))
  for field in SHARED_FIELDS + ("model_type", "layer_norm_eps",
                                "position_embedding_type", "pad_token_id",
                                "architectures"):
    assert config[field] == published[field], field
  # bert_config.json's "gelu" is Google's tanh form: Hugging Face's
  # "gelu_new" (the published copy says "gelu", the erf form it was trained
  # with; the Google copy's config does not record that).
  assert config["hidden_act"] == "gelu_new"
  tokenizer = _read_json(os.path.join(out, "tokenizer_config.json"))
  assert tokenizer["do_lower_case"] is True
  assert tokenizer["tokenizer_class"] == "BertTokenizer"


def _minilm_outputs(init_checkpoint, bert_config):
  """MiniLM's sequence and pooled outputs for two real MRPC pairs."""
  tokenizer = tokenization.FullTokenizer(
      os.path.join(conftest.MINILM_DIR, "vocab.txt"), do_lower_case=True)
  pairs = [("Amrozi accused his brother , whom he called \" the witness \" , "
            "of deliberately distorting his evidence .",
            "Referring to him as only \" the witness \" , Amrozi accused his "
            "brother of deliberately distorting his evidence ."),
           ("Yucaipa owned Dominick 's before selling the chain to Safeway "
            "in 1998 for $ 2.5 billion .", "Yucaipa bought Dominick 's in "
            "1995 for $ 693 million and sold it to Safeway for $ 1.8 billion "
            "in 1998 .")]
  ids, segments = np.zeros([2, 64], np.int32), np.zeros([2, 64], np.int32)
  for row, (a, b) in enumerate(pairs):
    a, b = tokenizer.tokenize(a), tokenizer.tokenize(b)
    tokens = ["[CLS]"] + a + ["[SEP]"] + b + ["[SEP]"]
    ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    segments[row, len(a) + 2:len(tokens)] = 1
  with tf.Graph().as_default():
    model = modeling.BertModel(bert_config, is_training=False,
                               input_ids=tf.constant(ids),
                               input_mask=tf.constant((ids > 0).astype(
                                   np.int32)),
                               token_type_ids=tf.constant(segments))
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        tf.compat.v1.trainable_variables(), init_checkpoint)
    assert len(assignment_map) == 103
    tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return sess.run([model.get_sequence_output(),
                       model.get_pooled_output()])


def test_hf_folder_as_init_checkpoint_gives_the_google_outputs(tmp_path,
                                                              caplog):
  caplog.set_level(logging.INFO)
  work_dir = str(tmp_path / "work")
  prefix = conversion.resolve_init_checkpoint(HF_MINILM_DIR, work_dir)
  # The log names the folder the conversion ends in, not its temporary one.
  (wrote,) = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("Wrote ")]
  assert wrote.startswith("Wrote %s (" % os.path.dirname(prefix)), wrote
  config_file = conversion.bert_config_file_of(prefix)
  bert_config = modeling.BertConfig.from_json_file(config_file)
  assert bert_config.hidden_act == "gelu_exact"
  from_hf = _minilm_outputs(prefix, bert_config)
  from_google = _minilm_outputs(GOOGLE_MINILM, bert_config)
  for got, want in zip(from_hf, from_google):
    assert np.array_equal(got, want)
  assert np.abs(from_hf[1]).max() > 0.1   # a real output, not zeros

  # The same files again: the conversion is reused, not written anew.
  index = prefix + ".index"
  written = os.stat(index).st_mtime_ns
  assert conversion.resolve_init_checkpoint(
      HF_MINILM_DIR, work_dir) == prefix
  assert os.stat(index).st_mtime_ns == written
  assert os.listdir(work_dir) == [os.path.basename(os.path.dirname(prefix))]
  # A Google prefix passes through unchanged.
  assert conversion.resolve_init_checkpoint(
      GOOGLE_MINILM, work_dir) == GOOGLE_MINILM


def test_hf_config_json_serves_as_bert_config_file(tmp_path):
  hf_config = os.path.join(HF_MINILM_DIR, "config.json")
  config = conversion.load_bert_config(hf_config)
  assert config.hidden_act == "gelu_exact"
  assert (config.hidden_size, config.num_hidden_layers,
          config.type_vocab_size) == (384, 6, 2)
  converted = conversion.resolve_bert_config_file(
      HF_MINILM_DIR, str(tmp_path))
  assert modeling.BertConfig.from_json_file(converted).to_dict() == (
      config.to_dict())
  google_config = os.path.join(conftest.MINILM_DIR, "bert_config.json")
  assert conversion.resolve_bert_config_file(
      google_config, str(tmp_path)) == google_config
  assert conversion.load_bert_config(google_config).hidden_act == (
      "gelu")


def test_activation_names_map_both_ways():
  to_hf = {g: hf_mapping.hf_activation(g, "x")
           for g in ("gelu", "gelu_exact", "relu", "tanh")}
  assert to_hf == {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu",
                   "tanh": "tanh"}
  to_google = {h: hf_mapping.google_activation(h, "x")
               for h in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")}
  assert to_google == {"gelu": "gelu_exact", "gelu_new": "gelu",
                       "gelu_pytorch_tanh": "gelu", "relu": "relu"}
  with pytest.raises(cli.UserError, match="hidden_act 'silu'"):
    hf_mapping.google_activation("silu", "config.json")


# --------------------------------------------- fine-tuned checkpoints here


def _randomize_and_save(folder, extra_state=True):
  """Gives every variable of the default graph random values and saves
  them as folder/model.ckpt-7, as a fine-tuning run would (with training
  state: global_step and Adam slots)."""
  if extra_state:
    tf.compat.v1.train.get_or_create_global_step()
    for var in list(tf.compat.v1.trainable_variables())[:3]:
      tf.compat.v1.get_variable(var.op.name + "/adam_m", var.shape,
                                trainable=False)
  rng = np.random.default_rng(7)
  with tf.compat.v1.Session() as sess:
    for var in tf.compat.v1.global_variables():
      if var.dtype.base_dtype == tf.float32:
        var.load(rng.normal(size=var.shape).astype(np.float32), sess)
      else:
        var.load(np.zeros(var.shape, var.dtype.as_numpy_dtype), sess)
    tf.compat.v1.train.Saver().save(sess, os.path.join(folder, "model.ckpt"),
                                    global_step=7)


def _fine_tuned_folder(folder, task, labels, build_head, **extra):
  """A fine-tuning output folder: checkpoint, bert_config.json, vocab.txt,
  run_info.json (with `extra` fields); the head made by
  `build_head(bert_config, ids)`."""
  os.makedirs(folder)
  bert_config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  with tf.Graph().as_default():
    ids = tf.constant([[101, 2023, 102, 0]])
    build_head(bert_config, ids)
    _randomize_and_save(folder)
  record = run_info.make_record(task, labels, True, 64, TINY_CONFIG,
                                  UNCASED_VOCAB, **extra)
  run_info.write(folder, record, TINY_CONFIG, UNCASED_VOCAB)
  return folder


def _classifier(bert_config, ids, num_labels=3):
  run_classifier.create_model(bert_config, False, ids, tf.ones_like(ids),
                              tf.zeros_like(ids), tf.constant([0]),
                              num_labels, False)


def _squad(bert_config, ids):
  run_squad.create_model(bert_config, False, ids, tf.ones_like(ids),
                         tf.zeros_like(ids), False)


def _round_trip(folder, tmp_path):
  """(HF tensors, HF config, Google tensors back, run_info back)."""
  hf_dir, back = str(tmp_path / "hf"), str(tmp_path / "back")
  conversion.convert(folder, hf_dir)
  conversion.convert(hf_dir, back)
  return (safetensors_numpy.load_file(os.path.join(hf_dir,
                                                   "model.safetensors")),
          _read_json(os.path.join(hf_dir, "config.json")),
          _google_tensors(os.path.join(back, "bert_model.ckpt")),
          _read_json(os.path.join(back, "run_info.json")))


def _model_tensors(folder):
  """The checkpoint's tensors without training state (checked by name)."""
  tensors = _google_tensors(tf.train.latest_checkpoint(folder))
  state = [n for n in tensors if n == "global_step" or n.endswith("/adam_m")]
  assert len(state) == 4
  return {n: v for n, v in tensors.items() if n not in state}


def test_classifier_round_trip_is_exact(tmp_path):
  labels = ["contradiction", "entailment", "neutral"]
  folder = _fine_tuned_folder(str(tmp_path / "mnli"), "mnli", labels,
                              _classifier)
  hf, config, back, record = _round_trip(folder, tmp_path)
  original = _model_tensors(folder)
  _assert_same_tensors(back, original)
  # Hugging Face's layout, checked against the definition: [out, in]
  # weights (the kernels' transposes), "bert." before the encoder's names.
  np.testing.assert_array_equal(
      hf["bert.encoder.layer.1.intermediate.dense.weight"],
      original["bert/encoder/layer_1/intermediate/dense/kernel"].T)
  np.testing.assert_array_equal(hf["classifier.weight"],
                                original["output_weights"])
  np.testing.assert_array_equal(hf["bert.embeddings.LayerNorm.weight"],
                                original["bert/embeddings/LayerNorm/gamma"])
  assert len(hf) == len(original)
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert config["id2label"] == {"0": "contradiction", "1": "entailment",
                                "2": "neutral"}
  assert config["label2id"] == {"contradiction": 0, "entailment": 1,
                                "neutral": 2}
  assert config["finetuning_task"] == "mnli"
  assert (record["task"], record["labels"], record["do_lower_case"]) == (
      "mnli", labels, True)


def test_squad_round_trip_is_exact(tmp_path):
  folder = _fine_tuned_folder(str(tmp_path / "squad"), "squad", None, _squad)
  hf, config, back, record = _round_trip(folder, tmp_path)
  original = _model_tensors(folder)
  _assert_same_tensors(back, original)
  np.testing.assert_array_equal(hf["qa_outputs.weight"],
                                original["cls/squad/output_weights"])
  np.testing.assert_array_equal(hf["qa_outputs.bias"],
                                original["cls/squad/output_bias"])
  assert config["architectures"] == ["BertForQuestionAnswering"]
  assert "id2label" not in config
  assert (record["task"], record["labels"]) == ("squad", None)


def test_regression_classifier_keeps_one_output(tmp_path):
  folder = _fine_tuned_folder(
      str(tmp_path / "sts"), "sts-b", [None],
      lambda config, ids: _classifier(config, ids, num_labels=1))
  hf, config, back, record = _round_trip(folder, tmp_path)
  assert hf["classifier.weight"].shape == (1, 64)
  assert config["problem_type"] == "regression"
  assert record["labels"] == [None]
  _assert_same_tensors(back, _model_tensors(folder))


def test_multi_label_classifier_keeps_its_problem_type(tmp_path):
  """A multi-label classifier (run_classifier.py on your own files) is
  transformers' BertForSequenceClassification with problem_type
  multi_label_classification (so that it scores with sigmoids), and comes
  back as one."""
  labels = ["food", "sport", "weather"]
  folder = _fine_tuned_folder(
      str(tmp_path / "topics"), "file", labels, _classifier,
      problem_type="multi_label", text_pairs=False)
  _, config, back, record = _round_trip(folder, tmp_path)
  assert config["problem_type"] == "multi_label_classification"
  assert config["id2label"] == {"0": "food", "1": "sport", "2": "weather"}
  assert (record["task"], record["labels"], record["problem_type"]) == (
      "file", labels, "multi_label")
  _assert_same_tensors(back, _model_tensors(folder))


# ------------------------------------------------------ pretraining heads

H = 64


def _pretraining_variables():
  """The pretraining heads' variables, by Google's names and shapes."""
  shapes = {"cls/predictions/transform/dense/kernel": [H, H],
            "cls/predictions/transform/dense/bias": [H],
            "cls/predictions/transform/LayerNorm/gamma": [H],
            "cls/predictions/transform/LayerNorm/beta": [H],
            "cls/predictions/output_bias": [30522],
            "cls/seq_relationship/output_weights": [2, H],
            "cls/seq_relationship/output_bias": [2]}
  for name, shape in shapes.items():
    tf.compat.v1.get_variable(name, shape)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """A tiny Google pretraining checkpoint (both heads) and its HF copy."""
  base = tmp_path_factory.mktemp("pretrained")
  folder = str(base / "google")
  os.makedirs(folder)
  bert_config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  with tf.Graph().as_default():
    modeling.BertModel(bert_config, False, tf.constant([[101, 102]]))
    _pretraining_variables()
    _randomize_and_save(folder, extra_state=False)
  shutil.copy(TINY_CONFIG, os.path.join(folder, "bert_config.json"))
  shutil.copy(UNCASED_VOCAB, os.path.join(folder, "vocab.txt"))
  hf_dir = str(base / "hf")
  conversion.convert(folder, hf_dir)
  return folder, hf_dir


def test_pretraining_heads_convert_both_ways(pretrained, tmp_path):
  folder, hf_dir = pretrained
  original = _google_tensors(tf.train.latest_checkpoint(folder))
  hf = safetensors_numpy.load_file(os.path.join(hf_dir, "model.safetensors"))
  np.testing.assert_array_equal(
      hf["cls.predictions.transform.dense.weight"],
      original["cls/predictions/transform/dense/kernel"].T)
  np.testing.assert_array_equal(hf["cls.predictions.bias"],
                                original["cls/predictions/output_bias"])
  np.testing.assert_array_equal(
      hf["cls.seq_relationship.weight"],
      original["cls/seq_relationship/output_weights"])
  assert _read_json(os.path.join(hf_dir, "config.json"))[
      "architectures"] == ["BertForPreTraining"]
  # transformers' files may hold the tied decoder (the word embeddings) and
  # its bias, and LayerNorm's pre-version-4 names gamma / beta.
  hf["cls.predictions.decoder.weight"] = hf[
      "bert.embeddings.word_embeddings.weight"]
  hf["cls.predictions.decoder.bias"] = hf["cls.predictions.bias"]
  for name in [n for n in hf if n.endswith("LayerNorm.weight")]:
    hf[name[:-len("weight")] + "gamma"] = hf.pop(name)
  hf["bert.embeddings.position_ids"] = np.arange(128)[None]
  legacy = _hf_folder(tmp_path / "legacy", hf_dir, tensors=hf)
  back = str(tmp_path / "back")
  conversion.convert(legacy, back)
  _assert_same_tensors(_google_tensors(os.path.join(back, "bert_model.ckpt")),
                       original)


def _hf_folder(path, source, tensors=None, config=None, drop=()):
  """A copy of HF folder `source`, with other tensors or config fields."""
  path = str(path)
  shutil.copytree(source, path)
  if tensors is not None:
    safetensors_numpy.save_file(tensors, os.path.join(path,
                                                      "model.safetensors"))
  if config is not None:
    merged = _read_json(os.path.join(path, "config.json"))
    merged.update(config)
    with open(os.path.join(path, "config.json"), "w") as f:
      json.dump(merged, f)
  for name in drop:
    os.remove(os.path.join(path, name))
  return path


def _hf_tensors(hf_dir):
  return safetensors_numpy.load_file(os.path.join(hf_dir, "model.safetensors"))


def test_hf_model_without_pooler_converts_and_loads(pretrained, tmp_path):
  _, hf_dir = pretrained
  tensors = _hf_tensors(hf_dir)
  del tensors["bert.pooler.dense.weight"], tensors["bert.pooler.dense.bias"]
  folder = _hf_folder(tmp_path / "mlm", hf_dir, tensors)
  prefix = conversion.resolve_init_checkpoint(folder,
                                                      str(tmp_path / "w"))
  shapes = checkpoint_checks.load_readable(prefix)
  assert "bert/pooler/dense/kernel" not in shapes
  checkpoint_checks.check_matches_config(
      shapes, modeling.BertConfig.from_json_file(TINY_CONFIG), prefix,
      TINY_CONFIG)


# ------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update({"bert.encoder.layer.0.attention.self.rotary.weight":
                         np.zeros([H, H], np.float32)}),
     "holds tensor bert.encoder.layer.0.attention.self.rotary.weight, which "
     "is "
     "not part of a BERT model"),
    (lambda t: t.update({"bert.embeddings.token_type_embeddings.weight":
                         np.zeros([3, H], np.float32)}),
     r"holds bert.embeddings.token_type_embeddings.weight of shape \[3, 64\], "
     r"but .*config.json makes it \[2, 64\]"),
    (lambda t: t.pop("bert.encoder.layer.1.output.dense.weight"),
     "lacks bert.encoder.layer.1.output.dense.weight"),
    (lambda t: t.update({"cls.predictions.decoder.weight": np.ones(
        [30522, H], np.float32)}),
     "cls.predictions.decoder.weight differs from the word embeddings"),
    (lambda t: t.pop("cls.seq_relationship.bias"),
     "has cls/seq_relationship/output_weights but not "
     "cls/seq_relationship/output_bias"),
])
def test_bad_hf_tensors_are_refused(pretrained, tmp_path, change, message):
  _, hf_dir = pretrained
  tensors = _hf_tensors(hf_dir)
  change(tensors)
  folder = _hf_folder(tmp_path / "bad", hf_dir, tensors)
  with pytest.raises(cli.UserError, match=message):
    conversion.convert(folder, str(tmp_path / "out"))
  assert not os.path.exists(str(tmp_path / "out"))


@pytest.mark.parametrize("config, message", [
    ({"model_type": "roberta"}, "model_type 'roberta' is not supported"),
    ({"model_type": "albert"}, "model_type 'albert' is not supported"),
    ({"layer_norm_eps": 1e-5}, "layer_norm_eps is 1e-05"),
    ({"position_embedding_type": "relative_key"},
     "position_embedding_type is 'relative_key'"),
    ({"hidden_act": "silu"}, "hidden_act 'silu'"),
    ({"vocab_size": "many"}, "vocab_size must be a positive integer"),
    ({"architectures": ["BertLMHeadModel"]},
     "architectures names BertLMHeadModel, which is not supported"),
    # Supported (run_ner.py's head), but not what these weights make.
    ({"architectures": ["BertForTokenClassification"]},
     "names architectures .*BertForTokenClassification.*, but the weights "
     "make a BertForPreTraining"),
    ({"architectures": ["BertForSequenceClassification"]},
     "names architectures .*BertForSequenceClassification.*, but the "
     "weights make a BertForPreTraining"),
])
def test_bad_hf_configs_are_refused(pretrained, tmp_path, config, message):
  _, hf_dir = pretrained
  folder = _hf_folder(tmp_path / "bad", hf_dir, config=config)
  with pytest.raises(cli.UserError, match=message):
    conversion.convert(folder, str(tmp_path / "out"))


def test_folders_without_safetensors_or_config_are_refused(pretrained,
                                                          tmp_path):
  _, hf_dir = pretrained
  torch_only = _hf_folder(tmp_path / "torch", hf_dir,
                          drop=["model.safetensors"])
  open(os.path.join(torch_only, "pytorch_model.bin"), "wb").close()
  with pytest.raises(cli.UserError, match=r"PyTorch weights .* "
                     r"BertForPreTraining.from_pretrained\(dir\)."
                     r"save_pretrained\(dir, safe_serialization=True\)"):
    conversion.convert(torch_only, str(tmp_path / "out"))
  no_config = _hf_folder(tmp_path / "noconfig", hf_dir, drop=["config.json"])
  with pytest.raises(cli.UserError, match="has no config.json"):
    conversion.convert(no_config, str(tmp_path / "out"))
  with pytest.raises(cli.UserError, match="has no config.json"):
    conversion.resolve_init_checkpoint(no_config, str(tmp_path))


def test_google_checkpoint_with_unknown_tensor_is_refused(tmp_path):
  folder = str(tmp_path / "google")
  os.makedirs(folder)
  bert_config = modeling.BertConfig.from_json_file(TINY_CONFIG)
  with tf.Graph().as_default():
    modeling.BertModel(bert_config, False, tf.constant([[101, 102]]))
    tf.compat.v1.get_variable("bert/encoder/layer_0/adapter/kernel", [H, 8])
    _randomize_and_save(folder)
  shutil.copy(TINY_CONFIG, os.path.join(folder, "bert_config.json"))
  shutil.copy(UNCASED_VOCAB, os.path.join(folder, "vocab.txt"))
  with pytest.raises(cli.UserError, match="holds tensor bert/encoder/layer_0/"
                     "adapter/kernel, which is not part of the model"):
    conversion.convert(folder, str(tmp_path / "out"))


def test_google_only_options_are_refused_for_hf_input(pretrained,
                                                     tmp_path):
  _, hf_dir = pretrained
  with pytest.raises(cli.UserError, match="--vocab_file applies to a Google "
                     "checkpoint only"):
    conversion.convert(hf_dir, str(tmp_path / "out"),
                               vocab_file=UNCASED_VOCAB)


def test_output_dir_with_files_is_refused(pretrained, tmp_path):
  _, hf_dir = pretrained
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  with pytest.raises(cli.UserError, match="already holds files"):
    conversion.convert(hf_dir, str(out))
  assert (out / "keep.txt").read_text() == "mine"



@pytest.mark.slow
def test_command_converts_and_errors_in_one_line(pretrained, tmp_path,
                                                 run_script):
  folder, _ = pretrained
  out = str(tmp_path / "hf")
  done = run_script("convert_checkpoint.py", [
      "--input=%s" % folder, "--output_dir=%s" % out, "--from=google"])
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(out)) == ["config.json", "model.safetensors",
                                     "tokenizer_config.json", "vocab.txt"]
  failed = run_script("convert_checkpoint.py", [
      "--input=%s" % str(tmp_path / "nothing"),
      "--output_dir=%s" % str(tmp_path / "x")])
  assert failed.returncode == 2
  lines = failed.stderr.strip().splitlines()
  assert lines[-1].startswith("convert_checkpoint.py: error: --input=")
  assert "Traceback" not in failed.stderr


def test_classifier_labels_must_fit_its_outputs(tmp_path):
  folder = _fine_tuned_folder(str(tmp_path / "mnli"), "mnli",
                              ["contradiction", "entailment", "neutral"],
                              _classifier)
  hf_dir = str(tmp_path / "hf")
  conversion.convert(folder, hf_dir)
  two = _hf_folder(tmp_path / "two", hf_dir, config={
      "id2label": {"0": "no", "1": "yes"}, "label2id": {"no": 0, "yes": 1}})
  with pytest.raises(cli.UserError, match="id2label lists 2 labels, but the "
                     "classifier has 3 outputs"):
    conversion.convert(two, str(tmp_path / "out"))
  qa = _hf_folder(tmp_path / "qa", hf_dir,
                  config={"architectures": ["BertForQuestionAnswering"]})
  with pytest.raises(cli.UserError, match="but the weights make a "
                     "BertForSequenceClassification"):
    conversion.convert(qa, str(tmp_path / "out"))


def test_vocabulary_and_casing_from_tokenizer_json(pretrained, tmp_path):
  """A folder with tokenizer.json only (no vocab.txt, no
  tokenizer_config.json): MiniLM's published tokenizer.json gives the
  vocabulary (the published vocab.txt, line for line), and its normalizer
  the casing, before what the vocabulary's pieces would tell."""
  _, hf_dir = pretrained
  folder = _hf_folder(tmp_path / "fast", hf_dir,
                      drop=["vocab.txt", "tokenizer_config.json"])
  tokenizer = _read_json(os.path.join(HF_MINILM_DIR, "tokenizer.json"))
  assert tokenizer["normalizer"]["lowercase"] is True
  for lowercase in (True, False):
    tokenizer["normalizer"]["lowercase"] = lowercase
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
      json.dump(tokenizer, f)
    out = str(tmp_path / ("google_%s" % lowercase))
    conversion.convert(folder, out)
    assert _read_json(os.path.join(out, "run_info.json"))[
        "do_lower_case"] is lowercase
  with open(os.path.join(out, "vocab.txt"), "rb") as f:
    with open(os.path.join(HF_MINILM_DIR, "vocab.txt"), "rb") as g:
      assert f.read() == g.read()
