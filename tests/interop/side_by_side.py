"""One model run twice on the same inputs: by this project's TensorFlow code
from a checkpoint in Google's layout, and by Hugging Face transformers from
that checkpoint converted with checkpoints.conversion.

The checks in this folder need torch and transformers, which only the
benchmark environment has (bash bench/setup_bench_env.sh, never the
project's requirements). Their files are named check_*.py rather than
test_*.py, so that `pytest tests` in the project's environment does not
collect them; `make interop` builds bench/.venv and runs them there with
`-o python_files=check_*.py`. They use the real assets of tests/conftest.py
(MiniLM, MRPC, SQuAD dev).
"""

import functools
import json
import os
import shutil

import numpy as np
import tensorflow as tf
import torch
import transformers

from checkpoints import conversion
from checkpoints import hf_mapping
from checkpoints import run_info
import modeling
from tasks import classification_features
from tasks import glue
import tokenization

# MiniLM's files in its folder of the assets (Google's layout).
MINILM_CHECKPOINT = "bert_model.ckpt"
MINILM_CONFIG = "bert_config.json"
MINILM_VOCAB = "vocab.txt"


def minilm_config(minilm_dir, folder, hidden_act):
  """Writes MiniLM's bert_config.json with `hidden_act` into `folder`;
  returns its path."""
  with open(os.path.join(minilm_dir, MINILM_CONFIG)) as f:
    config = json.load(f)
  config["hidden_act"] = hidden_act
  path = os.path.join(folder, "bert_config_%s.json" % hidden_act)
  with open(path, "w") as f:
    json.dump(config, f)
  return path


def minilm_tokenizer(minilm_dir):
  """The tokenizer of MiniLM's uncased vocabulary."""
  return tokenization.FullTokenizer(os.path.join(minilm_dir, MINILM_VOCAB),
                                    do_lower_case=True)


@functools.lru_cache(maxsize=None)
def mrpc_inputs(assets_dir, minilm_dir, count=16, max_seq_length=64):
  """(input_ids, input_mask, segment_ids), int32 [count, max_seq_length],
  of the first `count` MRPC dev pairs in MiniLM's uncased vocabulary; the
  same arrays on every call, to be read, not changed."""
  tokenizer = minilm_tokenizer(minilm_dir)
  processor = glue.MrpcProcessor()
  examples = processor.get_dev_examples(
      os.path.join(assets_dir, "glue", "MRPC"))[:count]
  features = [classification_features.convert_single_example(
      i, example, processor.get_labels(), max_seq_length, tokenizer)
              for i, example in enumerate(examples)]
  return tuple(np.array([getattr(f, field) for f in features], np.int32)
               for field in ("input_ids", "input_mask", "segment_ids"))


def encoder(bert_config):
  """A `build` for `ours`: modeling.BertModel's (sequence output, pooled
  output)."""
  def build(input_ids, input_mask, segment_ids):
    model = modeling.BertModel(bert_config, False, input_ids, input_mask,
                               segment_ids)
    return model.get_sequence_output(), model.get_pooled_output()
  return build


def head_shapes(build, inputs):
  """(name, shape) of the variables that `build(*inputs)` makes outside
  BERT's scope (the head), built in a graph of its own."""
  with tf.Graph().as_default():
    build(*(tf.constant(a) for a in inputs))
    return [(v.op.name, v.shape.as_list())
            for v in tf.compat.v1.global_variables()
            if not v.op.name.startswith("bert/")]


def converted_random_head(work_dir, minilm_dir, bert_config_file, shapes,
                          scale, seed, task, max_seq_length, labels=None,
                          **record_fields):
  """MiniLM with a head of random values, as a training run leaves it and
  converted to Hugging Face's layout.

  The head's tensors, of `shapes` [(name, shape)], are drawn from a normal
  distribution of standard deviation `scale` (seeded with `seed`). The run
  folder work_dir/google holds the checkpoint, copies of
  `bert_config_file` and MiniLM's vocabulary, and a run_info.json of
  `task`, `labels`, lower case, `max_seq_length` and `record_fields`;
  work_dir/hf is its conversion.

  Returns:
    (the checkpoint's prefix, the Hugging Face folder).
  """
  tensors = conversion.read_google_checkpoint(
      os.path.join(minilm_dir, MINILM_CHECKPOINT))
  rng = np.random.default_rng(seed)
  for name, shape in shapes:
    tensors[name] = (scale * rng.standard_normal(shape)).astype(np.float32)
  folder = os.path.join(work_dir, "google")
  os.makedirs(folder)
  prefix = os.path.join(folder, conversion.GOOGLE_CHECKPOINT_NAME)
  conversion.write_google_checkpoint(tensors, prefix)
  vocab_file = os.path.join(minilm_dir, MINILM_VOCAB)
  record = run_info.make_record(task, labels, True, max_seq_length,
                                bert_config_file, vocab_file,
                                **record_fields)
  run_info.write(folder, record, bert_config_file, vocab_file)
  hf_dir = os.path.join(work_dir, "hf")
  conversion.convert(folder, hf_dir)
  return prefix, hf_dir


def ours(prefix, build, inputs):
  """The values of `build(*inputs)`'s tensors, with every trainable
  variable read from checkpoint `prefix`."""
  with tf.Graph().as_default():
    fetches = build(*(tf.constant(a) for a in inputs))
    variables = tf.compat.v1.trainable_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        variables, prefix)
    missing = sorted({v.op.name for v in variables} -
                     set(assignment_map.values()))
    assert not missing, "not in %s: %s" % (prefix, missing)
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return session.run(fetches)


def hf_model(class_name, folder):
  """transformers' `class_name` from `folder`, in evaluation mode; every
  weight the class has must come from the folder."""
  model, info = getattr(transformers, class_name).from_pretrained(
      folder, output_loading_info=True)
  assert not info["missing_keys"] and not info["mismatched_keys"], (
      "%s from %s: missing %s, mismatched %s" % (
          class_name, folder, info["missing_keys"], info["mismatched_keys"]))
  return model.eval()


def hf_outputs(model, input_ids, input_mask, segment_ids, labels=None):
  """`model`'s outputs on int arrays of the same shape; with `labels` (an
  array) also its loss."""
  ids, mask, segments = (torch.from_numpy(a.astype(np.int64))
                         for a in (input_ids, input_mask, segment_ids))
  options = {} if labels is None else {"labels": torch.from_numpy(labels)}
  with torch.no_grad():
    return model(input_ids=ids, attention_mask=mask, token_type_ids=segments,
                 **options)


def assert_round_trip(model, hf_dir, prefix, work_dir, absent=()):
  """transformers' own save_pretrained of `model` (loaded from `hf_dir`),
  converted back to Google's layout, holds every tensor of checkpoint
  `prefix` bit for bit, training state aside, and nothing else; `absent`
  names the tensors the model's class has no place for."""
  saved = os.path.join(work_dir, "saved_by_transformers")
  model.save_pretrained(saved)
  for name in (conversion.VOCAB_FILE, conversion.HF_TOKENIZER_CONFIG_FILE):
    shutil.copy(os.path.join(hf_dir, name), saved)
  back = os.path.join(work_dir, "converted_back")
  conversion.convert(saved, back)
  again = conversion.read_google_checkpoint(
      os.path.join(back, conversion.GOOGLE_CHECKPOINT_NAME))
  original = {name: value for name, value in
              conversion.read_google_checkpoint(prefix).items()
              if not hf_mapping.is_training_state(name)
              and name not in absent}
  assert sorted(again) == sorted(original)
  for name, value in original.items():
    np.testing.assert_array_equal(again[name], value, err_msg=name)
