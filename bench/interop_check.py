# coding=utf-8
"""Checks models converted by convert_checkpoint.py against transformers.

Run in the benchmark environment (bash bench/setup_bench_env.sh), which has
PyTorch and Hugging Face transformers beside TensorFlow, from the project's
root:

  bench/.venv/bin/python -m bench.interop_check

On real MRPC dev pairs (tokenized with tokenization.FullTokenizer) it
compares, each to --tolerance:
  1. MiniLM (../shared/assets, Google's layout) converted to Hugging Face's:
     transformers' BertModel against modeling.BertModel, last hidden state
     (real tokens) and pooled output; with hidden_act "gelu_exact" (HF
     "gelu") and with the config as published, "gelu" (HF "gelu_new").
  2. A classifier fine-tuned here (run_classifier.py on MRPC, a short run)
     and converted: BertForSequenceClassification's logits against
     run_classifier.create_model's; then transformers' own save_pretrained
     of it converted back must equal the fine-tuned checkpoint exactly.
  3. A SQuAD head (run_squad.create_model, random head on MiniLM):
     BertForQuestionAnswering's start and end logits against ours.
  4. Pretraining heads (random, Google's names, on MiniLM):
     BertForPreTraining's masked-LM and next-sentence logits against the
     heads' formulas in NumPy on modeling.BertModel's outputs.
Prints one line per comparison and exits with status 1 if one fails. Not a
unit test: transformers is not a dependency of the project.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

import bench
from checkpoints import conversion
from checkpoints import hf_mapping
import modeling
import run_classifier
import run_squad
import tokenization

FLAGS = flags.FLAGS
flags.DEFINE_string("assets_dir",
                    os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                                 "assets"),
                    "The shared assets folder (MiniLM, GLUE MRPC).")
flags.DEFINE_integer("num_pairs", 16, "MRPC dev pairs to compare on.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length of the inputs.")
flags.DEFINE_float("num_train_epochs", 0.15,
                   "Length of the MRPC fine-tuning run (0.15: 34 steps of "
                   "16 examples).")
flags.DEFINE_float("tolerance", 1e-5, "Largest absolute difference allowed.")
flags.DEFINE_list("checks", ["encoder", "squad", "pretraining", "classifier"],
                  "Which checks to run (classifier fine-tunes for minutes).")
flags.DEFINE_string("work_dir", None,
                    "Folder for the converted models and the run (default: "
                    "a temporary folder, removed at the end).")


def _minilm(name):
  return os.path.join(FLAGS.assets_dir, "models", "minilm-l6-h384-uncased",
                      name)


def _mrpc_features(count, max_seq_length):
  """input_ids, input_mask, segment_ids (int32 [count, max_seq_length]) of
  the first `count` MRPC dev pairs."""
  tokenizer = tokenization.FullTokenizer(_minilm("vocab.txt"),
                                         do_lower_case=True)
  processor = run_classifier.MrpcProcessor()
  examples = processor.get_dev_examples(
      os.path.join(FLAGS.assets_dir, "glue", "MRPC"))[:count]
  features = [run_classifier.convert_single_example(
      i, example, processor.get_labels(), max_seq_length, tokenizer)
              for i, example in enumerate(examples)]
  return tuple(np.array([getattr(f, field) for f in features], np.int32)
               for field in ("input_ids", "input_mask", "segment_ids"))


def _run_ours(prefix, build):
  """Fetches `build(ids, mask, segments)`'s tensors with the variables of
  checkpoint `prefix`."""
  ids, mask, segments = FEATURES
  with tf.Graph().as_default():
    fetches = build(tf.constant(ids), tf.constant(mask), tf.constant(segments))
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        tf.compat.v1.trainable_variables(), prefix)
    assert len(assignment_map) == len(tf.compat.v1.trainable_variables())
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return sess.run(fetches)


def _ours_encoder(prefix, bert_config):
  def build(ids, mask, segments):
    model = modeling.BertModel(bert_config, False, ids, mask, segments)
    return model.get_sequence_output(), model.get_pooled_output()
  return _run_ours(prefix, build)


def _ours_classifier(prefix, bert_config, num_labels):
  def build(ids, mask, segments):
    return run_classifier.create_model(
        bert_config, False, ids, mask, segments, tf.zeros_like(ids[:, 0]),
        num_labels, False)[2]
  return _run_ours(prefix, build)


def _ours_squad(prefix, bert_config):
  def build(ids, mask, segments):
    return run_squad.create_model(bert_config, False, ids, mask, segments,
                                  False)
  return _run_ours(prefix, build)


def _hf_model(class_name, folder):
  """transformers' `class_name` loaded from `folder`; every weight it has
  must come from the folder."""
  import transformers  # pylint: disable=import-outside-toplevel
  model, info = getattr(transformers, class_name).from_pretrained(
      folder, output_loading_info=True)
  if info["missing_keys"] or info["mismatched_keys"]:
    raise AssertionError("%s from %s: missing %s, mismatched %s" % (
        class_name, folder, info["missing_keys"], info["mismatched_keys"]))
  return model.eval()


def _run_hf(model):
  import torch  # pylint: disable=import-outside-toplevel
  ids, mask, segments = (torch.from_numpy(a.astype(np.int64))
                         for a in FEATURES)
  with torch.no_grad():
    return model(input_ids=ids, attention_mask=mask, token_type_ids=segments)


RESULTS = []
ENCODER_OUTPUTS = {}


def _compare(what, got, want):
  """Records max |got - want| for `what`."""
  diff = float(np.max(np.abs(np.asarray(got, np.float64) -
                             np.asarray(want, np.float64))))
  ok = diff <= FLAGS.tolerance
  RESULTS.append(ok)
  print("%-62s max abs diff %.3g (largest value %.3g) %s" % (
      what, diff, float(np.max(np.abs(want))), "ok" if ok else "FAIL"))


def check_encoder(work_dir, hidden_act, hf_name):
  """Item 1: MiniLM converted, transformers' BertModel against ours."""
  config_file = os.path.join(work_dir, "bert_config_%s.json" % hidden_act)
  with open(_minilm("bert_config.json")) as f:
    config = json.load(f)
  config["hidden_act"] = hidden_act
  with open(config_file, "w") as f:
    json.dump(config, f)
  hf_dir = os.path.join(work_dir, "minilm-hf-%s" % hidden_act)
  conversion.convert(_minilm("bert_model.ckpt"), hf_dir,
                             bert_config_file=config_file)
  with open(os.path.join(hf_dir, "config.json")) as f:
    assert json.load(f)["hidden_act"] == hf_name
  sequence, pooled = _ours_encoder(
      _minilm("bert_model.ckpt"), modeling.BertConfig.from_dict(config))
  out = _run_hf(_hf_model("BertModel", hf_dir))
  real = FEATURES[1].astype(bool)
  _compare("BertModel %s / HF %s: last hidden state" % (hidden_act, hf_name),
           out.last_hidden_state.numpy()[real], sequence[real])
  _compare("BertModel %s / HF %s: pooler output" % (hidden_act, hf_name),
           out.pooler_output.numpy(), pooled)
  ENCODER_OUTPUTS[hidden_act] = sequence[real]
  return config_file


def report_gelu_difference():
  """How far the two GELUs move MiniLM's last hidden state (information,
  not a check): the cost of mapping Hugging Face's "gelu" to Google's."""
  if len(ENCODER_OUTPUTS) == 2:
    print("(information) last hidden state, gelu_exact vs gelu: max abs "
          "diff %.3g" % float(np.max(np.abs(ENCODER_OUTPUTS["gelu_exact"] -
                                            ENCODER_OUTPUTS["gelu"]))))


def fine_tune_mrpc(work_dir, config_file):
  """A short run_classifier.py run on MRPC from MiniLM; its output_dir."""
  output_dir = os.path.join(work_dir, "mrpc")
  command = [
      sys.executable, os.path.join(bench.REPO_ROOT, "run_classifier.py"),
      "--task_name=MRPC", "--do_train",
      "--data_dir=%s" % os.path.join(FLAGS.assets_dir, "glue", "MRPC"),
      "--vocab_file=%s" % _minilm("vocab.txt"),
      "--bert_config_file=%s" % config_file,
      "--init_checkpoint=%s" % _minilm("bert_model.ckpt"),
      "--do_lower_case=True", "--max_seq_length=%d" % FLAGS.max_seq_length,
      "--train_batch_size=16", "--learning_rate=5e-5",
      "--num_train_epochs=%g" % FLAGS.num_train_epochs,
      "--output_dir=%s" % output_dir]
  print("fine-tuning:", " ".join(command[1:]))
  start = time.time()
  subprocess.run(command, check=True, timeout=3600, capture_output=True)
  print("fine-tuned in %.0f s: %s" % (time.time() - start,
                                       tf.train.latest_checkpoint(output_dir)))
  return output_dir


def check_classifier(work_dir, config_file):
  """Item 2: the fine-tuned classifier in BertForSequenceClassification,
  and transformers' own save_pretrained converted back."""
  output_dir = fine_tune_mrpc(work_dir, config_file)
  prefix = tf.train.latest_checkpoint(output_dir)
  hf_dir = os.path.join(work_dir, "mrpc-hf")
  conversion.convert(output_dir, hf_dir)
  model = _hf_model("BertForSequenceClassification", hf_dir)
  assert model.config.id2label == {0: "0", 1: "1"}, model.config.id2label
  logits = _ours_classifier(prefix, modeling.BertConfig.from_json_file(
      config_file), num_labels=2)
  _compare("BertForSequenceClassification (fine-tuned on MRPC): logits",
           _run_hf(model).logits.numpy(), logits)

  saved = os.path.join(work_dir, "mrpc-hf-saved-by-transformers")
  model.save_pretrained(saved)
  shutil.copy(os.path.join(hf_dir, "vocab.txt"), saved)
  shutil.copy(os.path.join(hf_dir, "tokenizer_config.json"), saved)
  back = os.path.join(work_dir, "mrpc-back")
  conversion.convert(saved, back)
  reader = tf.train.load_checkpoint(prefix)
  original = {name: reader.get_tensor(name)
              for name in reader.get_variable_to_shape_map()
              if not hf_mapping.is_training_state(name)}
  reader = tf.train.load_checkpoint(os.path.join(back, "bert_model.ckpt"))
  names = sorted(reader.get_variable_to_shape_map())
  exact = names == sorted(original) and all(
      np.array_equal(reader.get_tensor(n), original[n]) for n in names)
  RESULTS.append(exact)
  print("%-62s %s" % ("transformers' save_pretrained -> Google: %d tensors "
                      "bit-identical" % len(names), "ok" if exact else "FAIL"))


def _minilm_with_head(folder, config_file, build_head):
  """Saves MiniLM with the head variables `build_head()` makes (random
  values) as folder/model.ckpt, beside its config and vocabulary."""
  os.makedirs(folder)
  with tf.Graph().as_default():
    build_head()
    reader = tf.train.load_checkpoint(_minilm("bert_model.ckpt"))
    rng = np.random.default_rng(3)
    with tf.compat.v1.Session() as sess:
      for var in tf.compat.v1.global_variables():
        name = var.op.name
        value = (reader.get_tensor(name) if name.startswith("bert/") else
                 rng.normal(0, 0.02, var.shape).astype(np.float32))
        var.load(value, sess)
      tf.compat.v1.train.Saver().save(sess, os.path.join(folder,
                                                         "model.ckpt"))
  shutil.copy(config_file, os.path.join(folder, "bert_config.json"))
  shutil.copy(_minilm("vocab.txt"), folder)
  return os.path.join(folder, "model.ckpt")


def check_squad(work_dir, config_file):
  """Item 3: a SQuAD head in BertForQuestionAnswering."""
  bert_config = modeling.BertConfig.from_json_file(config_file)
  ids = FEATURES[0]
  prefix = _minilm_with_head(
      os.path.join(work_dir, "squad"), config_file,
      lambda: run_squad.create_model(
          bert_config, False, tf.constant(ids),
          tf.constant((ids > 0).astype(np.int32)), tf.zeros_like(ids), False))
  hf_dir = os.path.join(work_dir, "squad-hf")
  conversion.convert(prefix, hf_dir, do_lower_case=True)
  start, end = _ours_squad(prefix, bert_config)
  out = _run_hf(_hf_model("BertForQuestionAnswering", hf_dir))
  _compare("BertForQuestionAnswering: start logits",
           out.start_logits.numpy(), start)
  _compare("BertForQuestionAnswering: end logits", out.end_logits.numpy(),
           end)


# Google's pretraining heads: name -> shape ("H" hidden size, "V" vocab).
PRETRAINING_HEADS = {
    "cls/predictions/transform/dense/kernel": ("H", "H"),
    "cls/predictions/transform/dense/bias": ("H",),
    "cls/predictions/transform/LayerNorm/gamma": ("H",),
    "cls/predictions/transform/LayerNorm/beta": ("H",),
    "cls/predictions/output_bias": ("V",),
    "cls/seq_relationship/output_weights": (2, "H"),
    "cls/seq_relationship/output_bias": (2,),
}


def _erf_gelu(x):
  from scipy import special  # pylint: disable=import-outside-toplevel
  return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def _pretraining_logits(tensors, sequence, pooled):
  """Masked-LM logits [B, S, V] and next-sentence logits [B, 2] of
  Google's pretraining heads (erf GELU, LayerNorm epsilon 1e-12, output
  layer tied to the word embeddings), in float64."""
  x = sequence.astype(np.float64) @ tensors[
      "cls/predictions/transform/dense/kernel"] + tensors[
          "cls/predictions/transform/dense/bias"]
  x = _erf_gelu(x)
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  x = (x - mean) / np.sqrt(var + 1e-12) * tensors[
      "cls/predictions/transform/LayerNorm/gamma"] + tensors[
          "cls/predictions/transform/LayerNorm/beta"]
  mlm = x @ tensors["bert/embeddings/word_embeddings"].T + tensors[
      "cls/predictions/output_bias"]
  nsp = pooled.astype(np.float64) @ tensors[
      "cls/seq_relationship/output_weights"].T + tensors[
          "cls/seq_relationship/output_bias"]
  return mlm, nsp


def check_pretraining(work_dir, config_file):
  """Item 4: pretraining heads in BertForPreTraining."""
  bert_config = modeling.BertConfig.from_json_file(config_file)
  sizes = {"H": bert_config.hidden_size, "V": bert_config.vocab_size}

  def build():
    modeling.BertModel(bert_config, False, tf.constant(FEATURES[0]))
    for name, shape in PRETRAINING_HEADS.items():
      tf.compat.v1.get_variable(name, [sizes.get(d, d) for d in shape])
  prefix = _minilm_with_head(os.path.join(work_dir, "pretraining"),
                             config_file, build)
  hf_dir = os.path.join(work_dir, "pretraining-hf")
  conversion.convert(prefix, hf_dir, do_lower_case=True)
  sequence, pooled = _ours_encoder(prefix, bert_config)
  reader = tf.train.load_checkpoint(prefix)
  tensors = {name: reader.get_tensor(name).astype(np.float64)
             for name in reader.get_variable_to_shape_map()}
  mlm, nsp = _pretraining_logits(tensors, sequence, pooled)
  out = _run_hf(_hf_model("BertForPreTraining", hf_dir))
  real = FEATURES[1].astype(bool)
  _compare("BertForPreTraining: masked-LM logits (real tokens)",
           out.prediction_logits.numpy()[real], mlm[real])
  _compare("BertForPreTraining: next-sentence logits",
           out.seq_relationship_logits.numpy(), nsp)


def main(_):
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  global FEATURES
  FEATURES = _mrpc_features(FLAGS.num_pairs, FLAGS.max_seq_length)
  print("tensorflow %s, torch %s, transformers %s; %d MRPC dev pairs, %d "
        "tokens" % (tf.__version__, torch.__version__,
                    transformers.__version__, FLAGS.num_pairs,
                    FLAGS.max_seq_length))
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="interop_check_")
  os.makedirs(work_dir, exist_ok=True)
  try:
    config_file = check_encoder(work_dir, "gelu_exact", "gelu")
    if "encoder" in FLAGS.checks:
      check_encoder(work_dir, "gelu", "gelu_new")
      report_gelu_difference()
    for name, check in (("squad", check_squad),
                        ("pretraining", check_pretraining),
                        ("classifier", check_classifier)):
      if name in FLAGS.checks:
        check(work_dir, config_file)
  finally:
    if not FLAGS.work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)
  print("%d of %d checks passed" % (sum(RESULTS), len(RESULTS)))
  return 0 if all(RESULTS) else 1


FEATURES = None

if __name__ == "__main__":
  app.run(lambda argv: sys.exit(main(argv)))
