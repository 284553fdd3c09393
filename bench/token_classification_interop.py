"""Checks run_ner.py's token classifier against Hugging Face's
BertForTokenClassification on converted weights.

Run in the benchmark environment (bash bench/setup_bench_env.sh), which has
PyTorch and transformers beside TensorFlow, from the project's root:

  bench/.venv/bin/python -m bench.token_classification_interop

MiniLM (../shared/assets, Google's layout) gets a random token-classifier
head (cls/ner/output_weights and output_bias, 9 labels as CoNLL-2003's) and
is converted with checkpoints/conversion.py. On the words of real SQuAD
paragraphs (run_ner's windows, tokenized with the uncased vocabulary) it
compares BertForTokenClassification's logits with ner.create_model's
at the real tokens, to --tolerance, and checks that transformers loads
every weight of its model from the converted folder; then transformers'
own save_pretrained of that model, converted back to Google's layout, must
hold the original tensors bit for bit. Prints one line per
comparison; exits with status 1 if one fails. Not a unit test:
transformers is not a dependency of the project.
"""

import json
import os
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

import bench
from checkpoints import conversion
import modeling
import run_ner
from tasks import ner
import tokenization

flags.DEFINE_string("assets_dir",
                    os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                                 "assets"),
                    "The shared assets folder (MiniLM, SQuAD dev).")
flags.DEFINE_integer("num_paragraphs", 4, "SQuAD paragraphs to read.")
flags.DEFINE_integer("max_seq_length", 128, "Window length.")
flags.DEFINE_float("tolerance", 1e-4, "Largest absolute difference allowed.")
FLAGS = flags.FLAGS

LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
          "B-PER", "I-PER"]


def _minilm(name):
  return os.path.join(FLAGS.assets_dir, "models", "minilm-l6-h384-uncased",
                      name)


def _checkpoint_with_head(folder):
  """MiniLM plus a random token classifier, in Google's layout."""
  tensors = conversion.read_google_checkpoint(_minilm("bert_model.ckpt"))
  hidden = tensors["bert/embeddings/word_embeddings"].shape[1]
  rng = np.random.RandomState(0)
  tensors["cls/ner/output_weights"] = (
      rng.randn(len(LABELS), hidden) * 0.2).astype(np.float32)
  tensors["cls/ner/output_bias"] = (rng.randn(len(LABELS)) * 0.1).astype(
      np.float32)
  prefix = os.path.join(folder, "bert_model.ckpt")
  conversion.write_google_checkpoint(tensors, prefix)
  for name in ("bert_config.json", "vocab.txt"):
    tf.io.gfile.copy(_minilm(name), os.path.join(folder, name))
  with open(os.path.join(folder, "run_info.json"), "w") as f:
    json.dump({"task": "ner", "labels": LABELS, "do_lower_case": True}, f)
  return prefix


def _windows():
  """input_ids and input_mask [windows, max_seq_length] of real text."""
  tokenizer = tokenization.FullTokenizer(_minilm("vocab.txt"), True)
  with open(os.path.join(FLAGS.assets_dir, "squad", "v1.1",
                         "dev-v1.1.json")) as f:
    articles = json.load(f)["data"]
  rows = []
  for paragraph in articles[0]["paragraphs"][:FLAGS.num_paragraphs]:
    words = [w for w, _, _ in tokenization.split_words_with_offsets(paragraph["context"])]
    for window in ner.text_windows(words, tokenizer,
                                       FLAGS.max_seq_length,
                                       FLAGS.max_seq_length // 2):
      ids = tokenizer.convert_tokens_to_ids(window.tokens)
      rows.append(ids + [0] * (FLAGS.max_seq_length - len(ids)))
  ids = np.array(rows, np.int32)
  return ids, (ids > 0).astype(np.int32)


def _ours(prefix, ids, mask):
  config = modeling.BertConfig.from_json_file(_minilm("bert_config.json"))
  with tf.Graph().as_default():
    zeros = tf.zeros_like(ids)
    _, _, logits, _ = ner.create_model(
        config, False, tf.constant(ids), tf.constant(mask), zeros, zeros,
        zeros, len(LABELS), False)
    tvars = tf.compat.v1.trainable_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars,
                                                                    prefix)
    assert len(assignment_map) == len(tvars), "a variable was not loaded"
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return sess.run(logits)


def _theirs(folder, ids, mask, saved):
  """BertForTokenClassification's logits; the model is also saved into
  `saved` by transformers itself."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  model, info = transformers.BertForTokenClassification.from_pretrained(
      folder, output_loading_info=True)
  if info["missing_keys"] or info["mismatched_keys"]:
    raise AssertionError("missing %s, mismatched %s" % (
        info["missing_keys"], info["mismatched_keys"]))
  model.save_pretrained(saved)
  transformers.BertTokenizer(os.path.join(folder, "vocab.txt"),
                             do_lower_case=True).save_pretrained(saved)
  with torch.no_grad():
    return model.eval()(
        input_ids=torch.from_numpy(ids.astype(np.int64)),
        attention_mask=torch.from_numpy(mask.astype(np.int64))).logits.numpy()


def _same_model(prefix, folder):
  """Whether Google checkpoint `prefix` and the conversion in `folder`
  hold the same tensors bit for bit (those transformers' model has: no
  pooler)."""
  original = conversion.read_google_checkpoint(prefix)
  back = conversion.read_google_checkpoint(
      os.path.join(folder, conversion.GOOGLE_CHECKPOINT_NAME))
  return all(np.array_equal(original[name], value)
             for name, value in back.items()) and (
                 "cls/ner/output_weights" in back and
                 set(original) - set(back) <= {"bert/pooler/dense/kernel",
                                               "bert/pooler/dense/bias"})


def main(_):
  ok = True
  with tempfile.TemporaryDirectory() as work:
    google = os.path.join(work, "google")
    os.makedirs(google)
    prefix = _checkpoint_with_head(google)
    hf = os.path.join(work, "hf")
    conversion.convert(google, hf)
    ids, mask = _windows()
    ours = _ours(prefix, ids, mask)
    saved = os.path.join(work, "saved_by_transformers")
    theirs = _theirs(hf, ids, mask, saved)
    real = mask.astype(bool)
    diff = float(np.max(np.abs(ours[real] - theirs[real])))
    agree = float(np.mean(ours[real].argmax(-1) == theirs[real].argmax(-1)))
    ok = diff <= FLAGS.tolerance
    print("BertForTokenClassification vs ner.create_model on %d windows "
          "(%d tokens): max abs logit diff %.3g (largest %.3g), argmax "
          "agreement %.4f %s" % (len(ids), int(real.sum()), diff,
                                 float(np.max(np.abs(ours[real]))), agree,
                                 "ok" if ok else "FAIL"))
    back = os.path.join(work, "back")
    conversion.convert(saved, back)
    same = _same_model(prefix, back)
    print("transformers' save_pretrained converted back: the same tensors "
          "bit for bit %s" % ("ok" if same else "FAIL"))
    ok = ok and same
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(app.run(main))
