# coding=utf-8
"""Checks run_swag.py's head against transformers' BertForMultipleChoice.

Run where PyTorch and Hugging Face transformers sit beside TensorFlow
(bench/.venv, made by bench/setup_bench_env.sh), from the project's root:

  bench/.venv/bin/python -m bench.swag_interop \
    [--output_dir=<a run_swag.py output folder>]

The model is a run_swag.py output folder (its latest checkpoint, config,
vocabulary and run_info.json), or by default MiniLM from ../shared/assets
with a multiple-choice head of random values. It is converted with
checkpoints/conversion.py to Hugging Face's layout, and on questions built
from SQuAD's paragraphs (tools/next_sentence_choices.py, laid out by
tasks/swag.py) it compares:
  1. BertForMultipleChoice's logits [questions, 4] with
     multiple_choice.create_model's, to --tolerance;
  2. transformers' own save_pretrained of that model, converted back,
     with the original checkpoint: every tensor bit for bit.
Prints one line per comparison and exits with status 1 if one fails. Not a
unit test: transformers is not a dependency of the project.
"""

import json
import os
import random
import shutil
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

import bench
from tools import next_sentence_choices
from checkpoints import checkpoint_checks
from checkpoints import conversion
from checkpoints import hf_mapping
from checkpoints import run_info
import modeling
from tasks import multiple_choice
from tasks import swag
import tokenization

FLAGS = flags.FLAGS
flags.DEFINE_string("assets_dir",
                    os.path.join(os.path.dirname(bench.REPO_ROOT), "shared",
                                 "assets"),
                    "The shared assets folder (MiniLM, SQuAD dev).")
flags.DEFINE_string("output_dir", None,
                    "A run_swag.py output folder to check; default: MiniLM "
                    "with a random multiple-choice head.")
flags.DEFINE_integer("num_questions", 16, "Questions to compare on.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length of the inputs.")
flags.DEFINE_float("tolerance", 1e-4, "Largest absolute difference allowed.")

RESULTS = []


def _minilm(name):
  return os.path.join(FLAGS.assets_dir, "models", "minilm-l6-h384-uncased",
                      name)


def random_head_folder(work_dir):
  """MiniLM with a seeded random multiple-choice head, saved as a
  run_swag.py output folder would hold it."""
  folder = os.path.join(work_dir, "minilm-swag")
  os.makedirs(folder)
  bert_config = modeling.BertConfig.from_json_file(_minilm("bert_config.json"))
  rng = np.random.default_rng(0)
  tensors = conversion.read_google_checkpoint(_minilm("bert_model.ckpt"))
  for name, shape in multiple_choice.head_shapes(bert_config):
    tensors[name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
  conversion.write_google_checkpoint(tensors,
                                     os.path.join(folder, "model.ckpt-1"))
  with open(os.path.join(folder, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "model.ckpt-1"\n')
  record = run_info.make_record(multiple_choice.TASK_NAME, None, True,
                                FLAGS.max_seq_length,
                                _minilm("bert_config.json"),
                                _minilm("vocab.txt"),
                                num_choices=swag.NUM_CHOICES)
  run_info.write(folder, record, _minilm("bert_config.json"),
                 _minilm("vocab.txt"))
  return folder


def questions(vocab_file, do_lower_case):
  """int32 [num_questions, 4, max_seq_length] ids, mask, segments."""
  with open(os.path.join(FLAGS.assets_dir, "squad", "v1.1",
                         "dev-v1.1.json"), encoding="utf-8") as f:
    articles = json.load(f)["data"]
  rng = random.Random(0)
  rows = []
  for article in articles:
    rows += next_sentence_choices.article_questions(article, rng, 1, 0)
    if len(rows) >= FLAGS.num_questions:
      break
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  shape = (FLAGS.num_questions, swag.NUM_CHOICES, FLAGS.max_seq_length)
  arrays = [np.zeros(shape, np.int32) for _ in range(3)]
  for i, row in enumerate(rows[:FLAGS.num_questions]):
    context, endings = row[3], row[6:6 + swag.NUM_CHOICES]
    for j, (tokens, segments) in enumerate(swag.choice_layouts(
        context, endings, FLAGS.max_seq_length, tokenizer)):
      ids = tokenizer.convert_tokens_to_ids(tokens)
      arrays[0][i, j, :len(ids)] = ids
      arrays[1][i, j, :len(ids)] = 1
      arrays[2][i, j, :len(ids)] = segments
  return arrays


def ours(prefix, bert_config, inputs):
  """multiple_choice.create_model's logits with checkpoint `prefix`."""
  with tf.Graph().as_default():
    logits = multiple_choice.create_model(
        bert_config, False, *(tf.constant(a) for a in inputs),
        tf.zeros([len(inputs[0])], tf.int32), False)[2]
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        tf.compat.v1.trainable_variables(), prefix)
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return sess.run(logits)


def hf_model(folder):
  """BertForMultipleChoice from `folder`; every weight must come from it."""
  import transformers  # pylint: disable=import-outside-toplevel
  model, info = transformers.BertForMultipleChoice.from_pretrained(
      folder, output_loading_info=True)
  if info["missing_keys"] or info["mismatched_keys"]:
    raise AssertionError("missing %s, mismatched %s" % (
        info["missing_keys"], info["mismatched_keys"]))
  return model.eval()


def hf_logits(model, inputs):
  import torch  # pylint: disable=import-outside-toplevel
  ids, mask, segments = (torch.from_numpy(a.astype(np.int64))
                         for a in inputs)
  with torch.no_grad():
    return model(input_ids=ids, attention_mask=mask,
                 token_type_ids=segments).logits.numpy()


def _report(what, ok, detail):
  RESULTS.append(ok)
  print("%-58s %s %s" % (what, detail, "ok" if ok else "FAIL"))


def main(_):
  work_dir = tempfile.mkdtemp(prefix="swag_interop_")
  try:
    folder = FLAGS.output_dir or random_head_folder(work_dir)
    prefix = checkpoint_checks.latest_checkpoint(folder)
    record = run_info.read(folder)
    bert_config = modeling.BertConfig.from_json_file(
        os.path.join(folder, run_info.CONFIG_FILE))
    hf_dir = os.path.join(work_dir, "hf")
    conversion.convert(folder, hf_dir)
    inputs = questions(os.path.join(folder, record["vocab_file"]),
                       record["do_lower_case"])
    want = ours(prefix, bert_config, inputs)
    model = hf_model(hf_dir)
    got = hf_logits(model, inputs)
    diff = float(np.max(np.abs(got - want)))
    _report("BertForMultipleChoice logits vs multiple_choice.create_model",
            diff <= FLAGS.tolerance,
            "max abs diff %.3g (largest %.3g), same choice %d/%d" % (
                diff, float(np.max(np.abs(want))),
                int(np.sum(got.argmax(1) == want.argmax(1))), len(got)))
    saved = os.path.join(work_dir, "hf-saved")
    model.save_pretrained(saved)
    for name in ("vocab.txt", "tokenizer_config.json"):
      shutil.copy(os.path.join(hf_dir, name), saved)
    back = os.path.join(work_dir, "back")
    conversion.convert(saved, back)
    original = {name: value for name, value in
                conversion.read_google_checkpoint(prefix).items()
                if not hf_mapping.is_training_state(name)}
    again = conversion.read_google_checkpoint(
        os.path.join(back, conversion.GOOGLE_CHECKPOINT_NAME))
    same = sorted(original) == sorted(again) and all(
        np.array_equal(original[n], again[n]) for n in original)
    _report("transformers' save_pretrained converted back", same,
            "%d tensors bit for bit" % len(original))
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)
  return 0 if all(RESULTS) else 1


if __name__ == "__main__":
  app.run(lambda argv: sys.exit(main(argv)))
