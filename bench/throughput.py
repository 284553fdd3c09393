# coding=utf-8
"""Training and inference throughput of BERT on CPU, five implementations.

Measures examples/sec and model-FLOPs utilization (MFU) of
  * ours: `modeling.BertModel` + `classification_model.create_model`'s head +
    `optimization.create_optimizer`, a `tf.compat.v1.Session` graph;
  * hf: Hugging Face transformers' `BertForSequenceClassification` (PyTorch);
  * tfm: tf-models-official's `BertEncoder` + `BertClassifier` (Keras,
    `tf.function` train step, its legacy `AdamWeightDecay`);
  * khub: KerasHub's `BertBackbone` + `BertTextClassifier` (Keras 3 on
    TensorFlow, `train_on_batch` with Keras' AdamW; bf16 by the
    mixed_bfloat16 policy), in bench/.venv-kerashub
    (bench/setup_kerashub_env.sh);
  * google: Google's own published code (bert-tensorflow: its
    `run_classifier.create_model` and `optimization.create_optimizer`) on
    TF 2.21 through bench/google_shims.py, fp32 only, in bench/.venv-google
    (bench/setup_google_env.sh),
and, for ours only, the same encoder with run_pretraining's masked-LM and
next-sentence heads (the `*-pretrain` configs: MFU of a pretraining step
next to a fine-tuning step of the same model and length),
each configuration in its own subprocess so memory and thread pools never
leak from one to the next, round-robin over the implementations for several
rounds. Run it in the benchmark environment (bench/setup_bench_env.sh),
from the project's root; khub and google run in their own environments'
interpreters (a missing one is a failed row naming its setup script):

  bench/.venv/bin/python -m bench.throughput            # peer comparison
  bench/.venv/bin/python -m bench.throughput --quick    # smoke run

Prints a markdown table (a line per run) and one table of ratios (ours / fastest
peer per config and dtype, each implementation at its fastest setting),
and writes bench/out/throughput-<date>.json. MFU counts the model FLOPs of
the inputs' real tokens (each example at its unpadded length); "MFU all"
counts all positions, padding included; "MFU run" counts the FLOPs the
implementation actually runs (`executed_flops_per_example`: ours skips the
padding in its dense layers with skip_padding, and its last layer computes
only the [CLS] position for the pooled heads; the peers run every position
of every layer). Ours' inference in bf16 reads bf16 copies of its weights
made once, as --do_predict and an export do (engine/weight_casts.py).
Recomputation (gradient checkpointing) is never counted.
The matmul peaks that MFU divides by are measured in the same run, once
per round.

Inputs are synthetic random ids, fixed for a run and made once: ours and
google take them from a `tf.data.Dataset.from_tensors(...).repeat()`
iterator, as their runners feed batches, hf, tfm and khub from tensors
created before timing. No input pipeline work is timed.
"""

import contextlib
import datetime
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging

import bench

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

FLAGS = flags.FLAGS

flags.DEFINE_list("only", ["ours", "hf", "tfm", "khub", "google"],
                  "Implementations to run: ours, hf, tfm, khub, google.")
flags.DEFINE_list("configs", None,
                  "Configurations to run (see CONFIGS); default: DEFAULT_CONFIGS.")
flags.DEFINE_list("dtypes", ["fp32", "bf16"], "Compute dtypes: fp32, bf16.")
flags.DEFINE_list("xla", ["off", "on"],
                  "XLA settings for ours and tfm: off, on (hf has no XLA).")
flags.DEFINE_list("checkpointing", ["off", "on"],
                  "Gradient checkpointing for ours and hf in training: off, "
                  "on (tfm has none).")
flags.DEFINE_list("skip_padding", ["on"],
                  "Ours with skip_padding (feed-forward layers on the real "
                  "tokens only, as run_classifier runs): on, off. Off under "
                  "XLA, as in run_classifier.")
flags.DEFINE_integer("rounds", 3, "Rounds over all runs; medians are taken "
                     "over the rounds.")
flags.DEFINE_integer("steps", None,
                     "Timed steps per run; default: each config's own.")
flags.DEFINE_integer("warmup_steps", 2,
                     "Untimed steps before timing (graph optimization, XLA "
                     "compilation, allocator warm-up).")
flags.DEFINE_integer("threads", 2, "Intra-op threads of every run.")
flags.DEFINE_bool("quick", False,
                  "Smoke run: the small configs only (training and "
                  "inference), one round, few steps.")
flags.DEFINE_string("out_dir", os.path.join(BENCH_DIR, "out"),
                    "Where throughput-<date>.json is written.")
flags.DEFINE_integer("run_timeout", 900, "Seconds before a run is killed.")
flags.DEFINE_string("worker", None,
                    "Internal: JSON spec of one run, executed in this "
                    "process (the driver starts these).")

ALL_IMPLS = ("ours", "hf", "tfm", "khub", "google")
# Implementations that run in an environment of their own: the folder (in
# bench/) and the script that makes it. The others run in bench/.venv.
PEER_ENVS = {"khub": (".venv-kerashub", "setup_kerashub_env.sh"),
             "google": (".venv-google", "setup_google_env.sh")}
# Google's code has no reduced precision.
FP32_ONLY_IMPLS = ("google",)

# Model sizes: layers, hidden, heads, intermediate (vocab 30522 for all).
MODELS = {
    "base": dict(layers=12, hidden=768, heads=12, intermediate=3072),
    "small": dict(layers=4, hidden=256, heads=4, intermediate=1024),
    "large": dict(layers=24, hidden=1024, heads=16, intermediate=4096),
}
VOCAB_SIZE = 30522
TYPE_VOCAB_SIZE = 2
NUM_LABELS = 2

# Heads on the encoder: run_classifier's classifier on the pooled output, or
# run_pretraining's masked-LM and next-sentence heads (ours only).
CLASSIFIER, PRETRAINING = "classifier", "pretraining"
# Masked positions per example of the pretraining runs (Google's default
# --max_predictions_per_seq at 128 tokens).
MAX_PREDICTIONS_PER_SEQ = 20

# name -> (model, seq_length, batch_size, training, default timed steps,
# head).
CONFIGS = {
    "base-s128-b8-train": ("base", 128, 8, True, 6, CLASSIFIER),
    "base-s384-b4-train": ("base", 384, 4, True, 4, CLASSIFIER),
    "base-s512-b4-train": ("base", 512, 4, True, 4, CLASSIFIER),
    "small-s128-b32-train": ("small", 128, 32, True, 10, CLASSIFIER),
    "base-s128-b32-infer": ("base", 128, 32, False, 6, CLASSIFIER),
    "base-s128-b8-infer": ("base", 128, 8, False, 12, CLASSIFIER),
    "base-s384-b4-infer": ("base", 384, 4, False, 10, CLASSIFIER),
    "small-s128-b32-infer": ("small", 128, 32, False, 20, CLASSIFIER),
    "base-s128-b8-pretrain": ("base", 128, 8, True, 6, PRETRAINING),
    "small-s128-b32-pretrain": ("small", 128, 32, True, 10, PRETRAINING),
}
# The peer comparison: BERT-Base at 128 tokens, training and inference.
DEFAULT_CONFIGS = ["base-s128-b8-train", "base-s128-b32-infer"]
QUICK_CONFIGS = ["small-s128-b32-train", "small-s128-b32-infer"]

# The fp32 baseline that the targets of issue 6 are ratios to.
BASELINE_IMPL = "tfm"

XLA_COMPILED_RE = re.compile(r"Compiled cluster using XLA")
RESULT_PREFIX = "THROUGHPUT_RESULT "


# ---------------------------------------------------------------- FLOPs ----


def encoder_layer_params(hidden, intermediate):
  """Parameters of one transformer layer (all of them act on every token).

  Q, K, V and the attention output projection (4 H x H kernels and biases),
  the feed-forward pair (H x I, I x H and biases), and two LayerNorms.
  """
  attention = 4 * (hidden * hidden + hidden)
  feed_forward = (hidden * intermediate + intermediate) + (
      intermediate * hidden + hidden)
  layer_norms = 2 * 2 * hidden
  return attention + feed_forward + layer_norms


def head_params(hidden, num_labels=NUM_LABELS):
  """Pooler (H x H + H) and classifier (H x labels + labels) parameters.

  They act once per example (on the [CLS] vector), not once per token.
  """
  return hidden * hidden + hidden + hidden * num_labels + num_labels


def masked_lm_params(hidden, vocab_size=VOCAB_SIZE):
  """Masked-LM head parameters that act on each masked position.

  The transform (H x H dense and bias, LayerNorm) and the output layer: the
  word embedding table, used transposed as a V x H kernel, and its own
  V-wide bias. The table's lookups in the embedding layer are not matmuls;
  its use here is.
  """
  return (hidden * hidden + hidden + 2 * hidden +
          vocab_size * hidden + vocab_size)


def flops_per_example(model, seq_length, training, head=CLASSIFIER):
  """Model FLOPs of one example (the usual MFU accounting).

  A multiply-add is 2 FLOPs; the backward pass costs twice the forward. So
  training is 6 x (non-embedding params) x tokens plus the attention matmuls
  (QK^T and PV: 2 x 2 x S^2 x H forward per layer, x3 for training);
  inference is 2 x params x tokens + 4 x L x S^2 x H. Embedding lookups,
  elementwise ops and the optimizer are not model FLOPs. The pooler acts
  once per example under both heads (the next-sentence classifier has the
  same shape as a 2-label one); the masked-LM head once per masked
  position, MAX_PREDICTIONS_PER_SEQ of them.

  Args:
    model: dict with layers, hidden, intermediate (an entry of MODELS).
    seq_length: int, tokens per example.
    training: bool.
    head: CLASSIFIER or PRETRAINING.

  Returns:
    int, FLOPs per example.
  """
  layers, hidden = model["layers"], model["hidden"]
  per_token = layers * encoder_layer_params(hidden, model["intermediate"])
  per_example = head_params(hidden)
  if head == PRETRAINING:
    per_example += MAX_PREDICTIONS_PER_SEQ * masked_lm_params(hidden)
  matmul_factor = 6 if training else 2
  attention_factor = 12 if training else 4
  return (matmul_factor * (per_token * seq_length + per_example) +
          attention_factor * layers * seq_length * seq_length * hidden)


def executed_flops_per_example(model, seq_length, real_length, training,
                               head, impl, skip_padding):
  """The FLOPs an implementation's graph actually runs for one example.

  Counted as `flops_per_example` counts (matmuls only, backward twice the
  forward), over the rows each matmul really gets. The peers run every
  position of every layer: `flops_per_example` at `seq_length`. Ours
  differs in two ways:
    * with `skip_padding`, the Q, K, V, output and feed-forward matmuls of
      every layer get the `real_length` real rows only (attention's two
      matmuls still span all `seq_length` positions);
    * the pooled output needs only the last layer's first position, so
      the last layer computes keys and values of every row but queries,
      attention output and feed-forward for that one position. The
      classifier head reads nothing else; the pretraining heads read the
      whole last layer as well, so they run it fully besides that pass
      (its key and value matmuls counted twice, as the graph builds them).

  Args:
    model: dict with layers, hidden, intermediate (an entry of MODELS).
    seq_length: int, padded length.
    real_length: int, the example's real tokens.
    training: bool.
    head: CLASSIFIER or PRETRAINING.
    impl: an entry of ALL_IMPLS.
    skip_padding: bool, ours' skip_padding setting.

  Returns:
    int, FLOPs per example.
  """
  if impl != "ours":
    return flops_per_example(model, seq_length, training, head)
  layers, hidden = model["layers"], model["hidden"]
  layer = encoder_layer_params(hidden, model["intermediate"])
  projection = hidden * hidden + hidden
  rows = real_length if skip_padding else seq_length
  # QK^T and PV for one query over every key: 2 matmuls x 2 FLOPs x S x H.
  attention_per_query = 4 * seq_length * hidden
  full_layer = 2 * layer * rows + attention_per_query * seq_length
  first_position_pass = (2 * 2 * projection * rows +
                         2 * (layer - 2 * projection) + attention_per_query)
  full_layers = layers if head == PRETRAINING else layers - 1
  per_example = head_params(hidden)
  if head == PRETRAINING:
    per_example += MAX_PREDICTIONS_PER_SEQ * masked_lm_params(hidden)
  forward = (full_layers * full_layer + first_position_pass +
             2 * per_example)
  return 3 * forward if training else forward


# -------------------------------------------------------------- workers ----


def _synthetic_draws(seq_length, batch_size):
  """(rng, ids [batch, seq], lengths [batch]) of the fixed inputs."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(12345)
  ids = rng.randint(1000, VOCAB_SIZE, size=(batch_size, seq_length))
  lengths = rng.randint(seq_length // 2, seq_length + 1, size=batch_size)
  return rng, ids, lengths


def synthetic_lengths(seq_length, batch_size):
  """The real (non-padding) length of each example of the fixed inputs."""
  return [int(n) for n in _synthetic_draws(seq_length, batch_size)[2]]


def _synthetic_inputs(seq_length, batch_size):
  """Fixed random int32 numpy inputs: ids, mask (with padding), types, labels.

  Every example is padded from a random length in [seq/2, seq] on, as
  GLUE's examples are padded to --max_seq_length: the attention mask is not
  all ones (the mask add is real work in all three), and ours skips the
  padding in its feed-forward layers unless --skip_padding=off.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng, ids, lengths = _synthetic_draws(seq_length, batch_size)
  mask = (np.arange(seq_length)[None, :] < lengths[:, None]).astype(np.int32)
  types = (np.arange(seq_length)[None, :] >= (lengths // 2)[:, None])
  return dict(input_ids=(ids * mask).astype(np.int32), input_mask=mask,
              segment_ids=(types * mask).astype(np.int32),
              label_ids=rng.randint(0, NUM_LABELS, size=batch_size).astype(
                  np.int32))


def _synthetic_pretraining_inputs(seq_length, batch_size):
  """The fixed inputs plus run_pretraining's masked-LM and next-sentence
  features: MAX_PREDICTIONS_PER_SEQ distinct positions among each
  example's real tokens, their original ids, weights of 1, random labels."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  features = _synthetic_inputs(seq_length, batch_size)
  rng = np.random.RandomState(54321)
  lengths = synthetic_lengths(seq_length, batch_size)
  positions = np.stack([
      np.sort(rng.choice(length, MAX_PREDICTIONS_PER_SEQ, replace=False))
      for length in lengths]).astype(np.int32)
  features.update(
      masked_lm_positions=positions,
      masked_lm_ids=np.take_along_axis(features["input_ids"], positions,
                                       axis=1),
      masked_lm_weights=np.ones(positions.shape, np.float32),
      next_sentence_labels=rng.randint(0, 2, size=(batch_size, 1)).astype(
          np.int32))
  return features


def _ours_loss(spec, config, batch, compute_dtype):
  """(loss, inference output) of the spec's head on our BertModel."""
  import modeling  # pylint: disable=g-import-not-at-top
  from tasks import classification_model  # pylint: disable=g-import-not-at-top
  from tasks import pretraining  # pylint: disable=g-import-not-at-top
  training = spec["training"]
  if spec.get("head", CLASSIFIER) == CLASSIFIER:
    (loss, _, logits, _) = classification_model.create_model(
        config, training, batch["input_ids"], batch["input_mask"],
        batch["segment_ids"], batch["label_ids"], NUM_LABELS, False,
        gradient_checkpointing=spec["checkpointing"],
        compute_dtype=compute_dtype, skip_padding=spec["skip_padding"])
    return loss, logits
  # The pre-training head, without its checkpoint loading and train op.
  model = modeling.BertModel(
      config, training, batch["input_ids"], batch["input_mask"],
      batch["segment_ids"], gradient_checkpointing=spec["checkpointing"],
      compute_dtype=compute_dtype)
  masked_lm_loss, _, log_probs = pretraining.get_masked_lm_output(
      config, model.get_sequence_output(), model.get_embedding_table(),
      batch["masked_lm_positions"], batch["masked_lm_ids"],
      batch["masked_lm_weights"])
  next_sentence_loss, _, _ = pretraining.get_next_sentence_output(
      config, model.get_pooled_output(), batch["next_sentence_labels"])
  return masked_lm_loss + next_sentence_loss, log_probs


def _ours_step_fn(spec):
  """Builds our graph for `spec`; returns a function running one step."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from engine import weight_casts  # pylint: disable=g-import-not-at-top

  model = MODELS[spec["model"]]
  config = modeling.BertConfig(
      vocab_size=VOCAB_SIZE, hidden_size=model["hidden"],
      num_hidden_layers=model["layers"], num_attention_heads=model["heads"],
      intermediate_size=model["intermediate"],
      type_vocab_size=TYPE_VOCAB_SIZE)
  compute_dtype = tf.bfloat16 if spec["dtype"] == "bf16" else tf.float32
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(12345)
    make_inputs = (_synthetic_pretraining_inputs
                   if spec.get("head", CLASSIFIER) == PRETRAINING
                   else _synthetic_inputs)
    features = make_inputs(spec["seq_length"], spec["batch_size"])
    dataset = tf.data.Dataset.from_tensors(features).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    # Inference as --do_predict and an export build it: weights cast once,
    # not at every step (engine/weight_casts.py).
    with (contextlib.nullcontext() if spec["training"]
          else weight_casts.cast_once()):
      loss, output = _ours_loss(spec, config, batch, compute_dtype)
    if spec["training"]:
      # The train op advances micro_step, on which dropout masks depend.
      fetch = optimization.create_optimizer(
          loss, 2e-5, num_train_steps=10000, num_warmup_steps=1000)
    else:
      fetch = output
    init = tf.compat.v1.global_variables_initializer()
  session = tf.compat.v1.Session(graph=graph,
                                 config=_ours_session_config(spec))
  session.run(init)
  copies = weight_casts.initializer(graph)
  if copies is not None:
    session.run(copies)
  # Keyword arguments go to Session.run (a trace's options and metadata).
  return lambda **run_kwargs: session.run(fetch, **run_kwargs)


def _ours_session_config(spec):
  """Session config: the run's intra-op threads and 1 inter-op thread, and
  XLA auto-clustering if asked."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = tf.compat.v1.ConfigProto(
      intra_op_parallelism_threads=spec["threads"],
      inter_op_parallelism_threads=1)
  if spec["xla"]:
    # On CPU, ON_1 clusters only with TF_XLA_FLAGS=--tf_xla_cpu_global_jit,
    # which the driver sets for XLA runs (see _worker_env).
    config.graph_options.optimizer_options.global_jit_level = (
        tf.compat.v1.OptimizerOptions.ON_1)
  return config


def _hf_step_fn(spec):
  """Builds the transformers model for `spec`; returns a step function."""
  import contextlib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(spec["threads"])
  torch.set_num_interop_threads(1)
  torch.manual_seed(12345)
  model = MODELS[spec["model"]]
  config = transformers.BertConfig(
      vocab_size=VOCAB_SIZE, hidden_size=model["hidden"],
      num_hidden_layers=model["layers"], num_attention_heads=model["heads"],
      intermediate_size=model["intermediate"],
      type_vocab_size=TYPE_VOCAB_SIZE, num_labels=NUM_LABELS)
  net = transformers.BertForSequenceClassification(config)
  features = _synthetic_inputs(spec["seq_length"], spec["batch_size"])
  inputs = dict(input_ids=torch.from_numpy(features["input_ids"]).long(),
                attention_mask=torch.from_numpy(features["input_mask"]).long(),
                token_type_ids=torch.from_numpy(
                    features["segment_ids"]).long())
  labels = torch.from_numpy(features["label_ids"]).long()

  def autocast():
    if spec["dtype"] == "bf16":
      return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()

  if not spec["training"]:
    net.eval()

    def infer():
      with torch.inference_mode(), autocast():
        return net(**inputs).logits.float().numpy()
    return infer

  net.train()
  if spec["checkpointing"]:
    net.gradient_checkpointing_enable()
  # Google's fine-tuning recipe, as ours and tfm: AdamW, clip norm 1.0.
  optimizer = torch.optim.AdamW(net.parameters(), lr=2e-5, eps=1e-6,
                                weight_decay=0.01)

  def train():
    with autocast():
      loss = net(**inputs, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
  return train


def _tfm_step_fn(spec):
  """Builds tf-models-official's BERT classifier; returns a step function."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from official.modeling.optimization import legacy_adamw  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks  # pylint: disable=g-import-not-at-top

  tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.random.set_seed(12345)
  if spec["dtype"] == "bf16":
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  model = MODELS[spec["model"]]
  encoder = networks.BertEncoder(
      vocab_size=VOCAB_SIZE, hidden_size=model["hidden"],
      num_layers=model["layers"], num_attention_heads=model["heads"],
      inner_dim=model["intermediate"], max_sequence_length=512,
      type_vocab_size=TYPE_VOCAB_SIZE)
  classifier = models.BertClassifier(encoder, num_classes=NUM_LABELS)
  features = _synthetic_inputs(spec["seq_length"], spec["batch_size"])
  inputs = dict(input_word_ids=tf.constant(features["input_ids"]),
                input_mask=tf.constant(features["input_mask"]),
                input_type_ids=tf.constant(features["segment_ids"]))
  labels = tf.constant(features["label_ids"])

  if not spec["training"]:
    @tf.function(jit_compile=spec["xla"])
    def infer_step():
      return tf.cast(classifier(inputs, training=False), tf.float32)
    return lambda: infer_step().numpy()

  # The optimizer of tf-models' BERT fine-tuning (global-norm clip 1.0).
  optimizer = legacy_adamw.AdamWeightDecay(
      learning_rate=2e-5, epsilon=1e-6, weight_decay_rate=0.01,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"],
      gradient_clip_norm=1.0)
  loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function(jit_compile=spec["xla"])
  def train_step():
    with tf.GradientTape() as tape:
      logits = tf.cast(classifier(inputs, training=True), tf.float32)
      loss = loss_fn(labels, logits)
    variables = classifier.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss
  return lambda: train_step().numpy()


def _khub_step_fn(spec):
  """Builds KerasHub's BERT classifier (random weights, from a config);
  returns a step function. Runs in bench/.venv-kerashub."""
  import keras  # pylint: disable=g-import-not-at-top
  import keras_hub  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
  tf.config.threading.set_inter_op_parallelism_threads(1)
  keras.utils.set_random_seed(12345)
  if spec["dtype"] == "bf16":
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
  model = MODELS[spec["model"]]
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=VOCAB_SIZE, num_layers=model["layers"],
      num_heads=model["heads"], hidden_dim=model["hidden"],
      intermediate_dim=model["intermediate"], max_sequence_length=512,
      num_segments=TYPE_VOCAB_SIZE)
  classifier = keras_hub.models.BertTextClassifier(
      backbone, num_classes=NUM_LABELS, preprocessor=None)
  features = _synthetic_inputs(spec["seq_length"], spec["batch_size"])
  inputs = dict(token_ids=tf.constant(features["input_ids"]),
                segment_ids=tf.constant(features["segment_ids"]),
                padding_mask=tf.constant(features["input_mask"] > 0))
  labels = tf.constant(features["label_ids"])
  # Google's fine-tuning recipe in Keras' own AdamW: no decay of biases and
  # LayerNorm parameters, global-norm clip 1.0.
  optimizer = keras.optimizers.AdamW(learning_rate=2e-5, weight_decay=0.01,
                                     epsilon=1e-6, global_clipnorm=1.0)
  optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
  classifier.compile(
      optimizer=optimizer,
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      jit_compile=spec["xla"])
  if not spec["training"]:
    return lambda: classifier.predict_on_batch(inputs)
  return lambda: classifier.train_on_batch(inputs, labels)


def _google_step_fn(spec):
  """Builds Google's classifier graph (bert-tensorflow's create_model and
  create_optimizer, through bench/google_shims.py) as ours is built;
  returns a step function. Runs in bench/.venv-google."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bench import google_shims  # pylint: disable=g-import-not-at-top

  modeling, optimization, run_classifier = google_shims.import_google_bert()
  model = MODELS[spec["model"]]
  config = modeling.BertConfig(
      vocab_size=VOCAB_SIZE, hidden_size=model["hidden"],
      num_hidden_layers=model["layers"], num_attention_heads=model["heads"],
      intermediate_size=model["intermediate"],
      type_vocab_size=TYPE_VOCAB_SIZE)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(12345)
    features = _synthetic_inputs(spec["seq_length"], spec["batch_size"])
    dataset = tf.data.Dataset.from_tensors(features).repeat()
    batch = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    (loss, _, logits, _) = run_classifier.create_model(
        config, spec["training"], batch["input_ids"], batch["input_mask"],
        batch["segment_ids"], batch["label_ids"], NUM_LABELS, False)
    if spec["training"]:
      fetch = optimization.create_optimizer(
          loss, 2e-5, num_train_steps=10000, num_warmup_steps=1000,
          use_tpu=False)
    else:
      fetch = logits
    init = tf.compat.v1.global_variables_initializer()
  session = tf.compat.v1.Session(graph=graph,
                                 config=_ours_session_config(spec))
  session.run(init)
  return lambda: session.run(fetch)


STEP_FNS = {"ours": _ours_step_fn, "hf": _hf_step_fn, "tfm": _tfm_step_fn,
            "khub": _khub_step_fn, "google": _google_step_fn}


def run_worker(spec):
  """Builds the run's step function, warms up, times `steps` steps.

  Returns:
    dict: the spec plus setup_sec, warmup_sec, step_secs (list) and
    examples_per_sec.
  """
  start = time.perf_counter()
  step = STEP_FNS[spec["impl"]](spec)
  built = time.perf_counter()
  for _ in range(spec["warmup_steps"]):
    step()
  warm = time.perf_counter()
  step_secs = []
  for _ in range(spec["steps"]):
    t0 = time.perf_counter()
    step()
    step_secs.append(time.perf_counter() - t0)
  total = sum(step_secs)
  return dict(spec, setup_sec=built - start, warmup_sec=warm - built,
              step_secs=step_secs, versions=_versions(),
              examples_per_sec=spec["batch_size"] * spec["steps"] / total)


def matmul_gflops(rows, inner, cols, dtype, threads, steps,
                  transpose_a=False, transpose_b=False):
  """GFLOP/s of one rows x inner x cols matmul: the fastest of `steps` runs.

  The operands are variables of `dtype` (stored transposed when asked), so
  nothing but the matmul runs in the timed op; a session with `threads`
  intra-op threads and 1 inter-op thread; 3 untimed runs first.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a_shape = (inner, rows) if transpose_a else (rows, inner)
  b_shape = (cols, inner) if transpose_b else (inner, cols)
  graph = tf.Graph()
  with graph.as_default():
    rng = np.random.RandomState(0)
    a, b = (tf.Variable(tf.cast(rng.standard_normal(shape), dtype))
            for shape in (a_shape, b_shape))
    product = tf.matmul(a, b, transpose_a=transpose_a,
                        transpose_b=transpose_b)
    init = tf.compat.v1.global_variables_initializer()
  config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                    inter_op_parallelism_threads=1)
  with tf.compat.v1.Session(graph=graph, config=config) as session:
    session.run(init)
    for _ in range(3):
      session.run(product.op)
    secs = []
    for _ in range(steps):
      t0 = time.perf_counter()
      session.run(product.op)
      secs.append(time.perf_counter() - t0)
  return 2.0 * rows * inner * cols / min(secs) / 1e9


def run_peak_worker(spec):
  """Peak matmul GFLOP/s of TF on this machine, fp32 and bf16.

  A 2048^3 matmul (`matmul_gflops`) with the runs' thread settings (a peak:
  the median of one process varied from 202 to 386 GFLOP/s for bf16
  between two runs on a shared VM).

  Returns:
    dict: {"fp32": GFLOP/s, "bf16": GFLOP/s}.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n = 2048
  return dict(spec, gflops={
      name: matmul_gflops(n, n, n, dtype, spec["threads"], spec["steps"])
      for name, dtype in (("fp32", tf.float32), ("bf16", tf.bfloat16))})


# --------------------------------------------------------------- driver ----


def _worker_env(spec):
  """Environment of a run's subprocess."""
  env = dict(os.environ)
  env["OMP_NUM_THREADS"] = str(spec["threads"])
  # XLA compile messages are INFO logs; the driver looks for them.
  env["TF_CPP_MIN_LOG_LEVEL"] = "0"
  if spec.get("xla") and spec["impl"] in ("ours", "google"):
    env["TF_XLA_FLAGS"] = (env.get("TF_XLA_FLAGS", "") +
                           " --tf_xla_cpu_global_jit").strip()
  if spec["impl"] == "khub":
    env["KERAS_BACKEND"] = "tensorflow"
  return env


def impl_python(impl, bench_dir=BENCH_DIR):
  """(interpreter of `impl`'s runs, None) or (None, why it is missing).

  The peers of PEER_ENVS run in their own environment's python; the others
  in this one.
  """
  if impl not in PEER_ENVS:
    return sys.executable, None
  folder, script = PEER_ENVS[impl]
  python = os.path.join(bench_dir, folder, "bin", "python")
  if os.path.exists(python):
    return python, None
  return None, "bench/%s/bin/python not found; run: bash bench/%s" % (
      folder, script)


def _launch(spec, run_timeout):
  """Runs `spec` in a fresh Python process; returns its result dict.

  A failed run, or one still running after `run_timeout` seconds, returns
  the spec with "error" (the tail of its stderr, or the timeout).
  """
  python, missing = impl_python(spec["impl"])
  if missing:
    return dict(spec, error=missing)
  cmd = bench.child_command(
      "throughput", ["--worker=" + json.dumps(spec, sort_keys=True)],
      python=python)
  try:
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env=_worker_env(spec), cwd=bench.REPO_ROOT,
                          timeout=run_timeout, check=False)
  except subprocess.TimeoutExpired:
    return dict(spec, error="timed out after %d s (--run_timeout)" %
                run_timeout)
  for line in proc.stdout.splitlines():
    if line.startswith(RESULT_PREFIX):
      result = json.loads(line[len(RESULT_PREFIX):])
      result["xla_compiled"] = bool(XLA_COMPILED_RE.search(proc.stderr))
      return result
  tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
  return dict(spec, error="exit %d: %s" % (proc.returncode, tail))


def _check_choice(flag_name, values, allowed):
  """Raises app.UsageError naming the flag if a value is not allowed."""
  bad = [v for v in values if v not in allowed]
  if bad:
    raise app.UsageError("--%s: unknown value(s) %s; choose from %s." %
                         (flag_name, ",".join(bad), ",".join(allowed)))


def _on_off(flag_name, values):
  _check_choice(flag_name, values, ("off", "on"))
  return [v == "on" for v in values]


def plan_runs(configs, only, dtypes, xla, checkpointing, skip_padding,
              threads, steps, warmup_steps):
  """The runs of one round, interleaved over implementations.

  Args:
    configs: names of CONFIGS to run.
    only: implementations to run (of ALL_IMPLS).
    dtypes: compute dtypes to run: "fp32", "bf16".
    xla, checkpointing, skip_padding: lists of bool, the settings to run
      of each (an implementation without the setting runs it off).
    threads: intra-op threads of every run.
    steps: timed steps of every run; None: each config's own.
    warmup_steps: untimed steps before timing.

  Returns:
    list of spec dicts (without "round").

  Raises:
    app.UsageError: a config, implementation or dtype is unknown.
  """
  _check_choice("configs", configs, list(CONFIGS))
  _check_choice("only", only, ALL_IMPLS)
  _check_choice("dtypes", dtypes, ("fp32", "bf16"))
  runs = []
  for name in configs:
    model, seq_length, batch_size, training, own_steps, head = CONFIGS[name]
    per_impl = []
    # Only ours has the pretraining heads; they run every position (the
    # masked-LM head reads positions anywhere in the sequence).
    impls = [impl for impl in only
             if head == CLASSIFIER or impl == "ours"]
    for impl in impls:
      combos = _impl_settings(impl, training, head, dtypes, xla,
                              checkpointing, skip_padding)
      per_impl.append([
          dict(config=name, impl=impl, model=model, seq_length=seq_length,
               batch_size=batch_size, training=training, head=head,
               dtype=dtype,
               xla=x, checkpointing=c, skip_padding=s,
               threads=threads, steps=steps or own_steps,
               warmup_steps=warmup_steps)
          for dtype, x, c, s in combos])
    for group in itertools.zip_longest(*per_impl):
      runs.extend(spec for spec in group if spec is not None)
  return runs


def _impl_settings(impl, training, head, dtypes, xla, checkpointing,
                   skip_padding):
  """[(dtype, xla, checkpointing, skip_padding)] that `impl` runs of the
  given ones, each once: those it lacks are off."""
  impl_xla = xla if impl != "hf" else [False]
  impl_ckpt = (checkpointing if training and impl in ("ours", "hf")
               else [False])
  impl_skip = (skip_padding if impl == "ours" and head == CLASSIFIER
               else [False])
  impl_dtypes = [d for d in dtypes
                 if d == "fp32" or impl not in FP32_ONLY_IMPLS]
  combos = []
  for dtype, x, c, s in itertools.product(
      impl_dtypes, sorted(set(impl_xla)), sorted(set(impl_ckpt)),
      sorted(set(impl_skip))):
    combo = (dtype, x, c, s and not x)  # XLA runs never skip padding.
    if combo not in combos:
      combos.append(combo)
  return combos


def run_key(spec):
  """Identifies a run across rounds."""
  return (spec["config"], spec["impl"], spec["dtype"], spec["xla"],
          spec["checkpointing"], spec["skip_padding"])


def summarize(results, peaks):
  """Aggregates the rounds: medians and ranges of ex/s, MFU, ratios.

  Args:
    results: list of run result dicts (all rounds).
    peaks: {"fp32": [GFLOP/s per round], "bf16": [...]}.

  Returns:
    list of row dicts in first-seen order.
  """
  peak = {k: statistics.median(v) for k, v in peaks.items() if v}
  rows = {}
  for result in results:
    row = rows.setdefault(run_key(result), dict(
        (k, result[k]) for k in ("config", "impl", "dtype", "xla",
                                 "checkpointing", "skip_padding", "model",
                                 "seq_length", "batch_size", "training")))
    row["head"] = result.get("head", CLASSIFIER)
    row.setdefault("examples_per_sec", [])
    row.setdefault("errors", [])
    row.setdefault("xla_compiled", [])
    if "error" in result:
      row["errors"].append(result["error"])
    else:
      row["examples_per_sec"].append(result["examples_per_sec"])
      row["xla_compiled"].append(result["xla_compiled"])
  for row in rows.values():
    rates = row["examples_per_sec"]
    if not rates:
      continue
    row["median"] = statistics.median(rates)
    row["min"], row["max"] = min(rates), max(rates)
    model = MODELS[row["model"]]
    row["flops_per_example"] = flops_per_example(
        model, row["seq_length"], row["training"], row["head"])
    lengths = synthetic_lengths(row["seq_length"], row["batch_size"])
    row["real_token_flops_per_example"] = statistics.mean(
        flops_per_example(model, length, row["training"], row["head"])
        for length in lengths)
    row["executed_flops_per_example"] = statistics.mean(
        executed_flops_per_example(
            model, row["seq_length"], length, row["training"], row["head"],
            row["impl"], row["skip_padding"]) for length in lengths)
    if row["dtype"] in peak:
      peak_flops = peak[row["dtype"]] * 1e9
      row["mfu"] = row["median"] * row["real_token_flops_per_example"] / (
          peak_flops)
      row["mfu_all_positions"] = (row["median"] * row["flops_per_example"] /
                                  peak_flops)
      row["mfu_executed"] = (row["median"] *
                             row["executed_flops_per_example"] / peak_flops)
  for row in rows.values():
    base = rows.get((row["config"], BASELINE_IMPL, "fp32", False, False,
                     False))
    if base and "median" in base and "median" in row:
      row["vs_baseline"] = row["median"] / base["median"]
  return list(rows.values())


def markdown_table(rows, peaks, threads):
  """The summary as a markdown table (one line per run key), under the
  peaks' medians measured with `threads` threads."""
  peak = {k: statistics.median(v) for k, v in peaks.items() if v}
  lines = ["Peak TF matmul (2048^3, %d threads): %s" % (
      threads, ", ".join("%s %.0f GFLOP/s" % (k, v)
                         for k, v in sorted(peak.items()))), "",
           "MFU counts the model FLOPs of the real tokens; MFU all: of all "
           "positions, padding included; MFU run: the FLOPs the "
           "implementation runs.", "",
           "| config | impl | dtype | XLA | ckpt | skip pad | "
           "ex/s median (min-max) | MFU | MFU all | MFU run | vs %s fp32 |" %
           BASELINE_IMPL,
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for row in rows:
    xla = "on" if row["xla"] else "off"
    if row["xla"] and row["xla_compiled"] and not all(row["xla_compiled"]):
      xla = "on (NOT compiled)"
    if "median" not in row:
      rate = "failed: %s" % row["errors"][-1].splitlines()[-1][:80]
      mfu = mfu_all = mfu_run = ratio = "-"
    else:
      rate = "%.2f (%.2f-%.2f)" % (row["median"], row["min"], row["max"])
      mfu, mfu_all, mfu_run = (
          _percent(row.get(key))
          for key in ("mfu", "mfu_all_positions", "mfu_executed"))
      ratio = ("%.2fx" % row["vs_baseline"]) if "vs_baseline" in row else "-"
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        row["config"], row["impl"], row["dtype"], xla,
        "on" if row["checkpointing"] else "off",
        "on" if row["skip_padding"] else "off", rate, mfu, mfu_all, mfu_run,
        ratio))
  return "\n".join(lines)


def _percent(fraction):
  return "-" if fraction is None else "%.0f%%" % (100 * fraction)


def _setting(row):
  """A row's non-default settings, as a short label ("xla", "ckpt")."""
  labels = [name for name, on in (("xla", row["xla"]),
                                  ("ckpt", row["checkpointing"]),
                                  ("skip pad", row["skip_padding"])) if on]
  return ", ".join(labels)


def fastest_by_impl(rows):
  """{(config, dtype): {impl: the impl's fastest row}} over measured rows.

  Each implementation is compared at its fastest setting (XLA or not,
  checkpointing or not, ...) for the config and dtype.
  """
  best = {}
  for row in rows:
    if "median" not in row:
      continue
    group = best.setdefault((row["config"], row["dtype"]), {})
    if row["impl"] not in group or (row["median"] >
                                    group[row["impl"]]["median"]):
      group[row["impl"]] = row
  return best


def ratio_table(rows):
  """One markdown table: per config and dtype, every implementation's
  fastest ex/s, ours / the fastest peer, and MFU (model FLOPs of all
  positions / FLOPs run) of ours and of that peer."""
  peers = [impl for impl in ALL_IMPLS if impl != "ours"]
  lines = ["| config | mode | dtype | %s | ours / fastest peer | "
           "MFU ours (all / run) | MFU fastest peer (all / run) |" %
           " | ".join(["ours"] + peers),
           "|---|---|---|%s---|---|---|" % ("---|" * (1 + len(peers)))]
  for (config, dtype), group in fastest_by_impl(rows).items():
    cells = []
    for impl in ["ours"] + peers:
      row = group.get(impl)
      cells.append("-" if row is None else "%.2f%s" % (
          row["median"], " (%s)" % _setting(row) if _setting(row) else ""))
    ours = group.get("ours")
    measured = [group[impl] for impl in peers if impl in group]
    fastest = max(measured, key=lambda r: r["median"]) if measured else None
    ratio = ("%.2fx vs %s" % (ours["median"] / fastest["median"],
                              fastest["impl"])
             if ours and fastest else "-")
    mfus = ["-" if r is None else "%s / %s" % (
        _percent(r.get("mfu_all_positions")), _percent(r.get("mfu_executed")))
            for r in (ours, fastest)]
    mode = "training" if next(iter(group.values()))["training"] else (
        "inference")
    lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
        config, mode, dtype, " | ".join(cells), ratio, mfus[0], mfus[1]))
  return "\n".join(lines)


def machine_info():
  """CPU model and the flags that matter for bf16 (avx512_bf16, amx)."""
  info = {"python": platform.python_version(), "nproc": os.cpu_count()}
  try:
    with open("/proc/cpuinfo") as f:
      text = f.read()
  except OSError:
    return info
  model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
  cpu_flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
  info["cpu"] = model.group(1) if model else "unknown"
  present = set(cpu_flags.group(1).split()) if cpu_flags else set()
  info["flags"] = sorted(f for f in present
                         if f in ("avx512f", "avx512_bf16", "avx512_fp16",
                                  "amx_bf16", "amx_tile", "amx_int8"))
  return info


def _versions():
  """Versions of the benchmarked libraries in this environment."""
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  versions = {}
  for name in ("tensorflow", "tf-keras", "torch", "transformers",
               "tf-models-official", "keras", "keras-hub", "bert-tensorflow"):
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      versions[name] = None
  return versions


def drive(runs, rounds, threads, num_impls, out_dir, run_timeout):
  """Runs plan_runs' `runs` for `rounds` rounds; prints the tables and
  writes the JSON file to `out_dir`.

  Each round first measures the matmul peaks with `threads` threads, then
  runs `runs` starting at runs[round % `num_impls`]: the runs being
  interleaved over the `num_impls` implementations asked for, each goes
  first in turn. A run still going after `run_timeout` seconds is killed
  and counted as failed.
  """
  logging.info("%d runs per round, %d rounds.", len(runs), rounds)
  results, peaks = [], {"fp32": [], "bf16": []}
  for round_index in range(rounds):
    peak = _launch(dict(impl="peak", threads=threads, steps=10,
                        round=round_index), run_timeout)
    if "error" in peak:
      logging.warning("peak measurement failed: %s", peak["error"])
    else:
      for name, value in peak["gflops"].items():
        peaks[name].append(value)
      logging.info("round %d peak GFLOP/s: %s", round_index, peak["gflops"])
    # Rotate the start so no implementation always runs first in a round.
    shift = round_index % max(1, num_impls)
    for spec in runs[shift:] + runs[:shift]:
      result = _launch(dict(spec, round=round_index), run_timeout)
      results.append(result)
      logging.info("round %d %s: %s", round_index, run_key(spec),
                   result.get("error") or "%.2f ex/s" %
                   result["examples_per_sec"])
  rows = summarize(results, peaks)
  table = markdown_table(rows, peaks, threads)
  print(table)
  print()
  print("Ours / fastest peer (each at its fastest setting):")
  print(ratio_table(rows))
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, "throughput-%s.json" %
                      datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
  with open(path, "w") as f:
    json.dump(dict(command=bench.typed_command("throughput", sys.argv[1:]),
                   machine=machine_info(),
                   versions=_versions(), load_average=os.getloadavg(),
                   peaks_gflops=peaks, rows=rows, runs=results), f, indent=1)
  logging.info("wrote %s", path)


def _plan_flags():
  """plan_runs' arguments from the command line: with --quick the small
  configs, XLA and checkpointing off and skip_padding on, 3 timed steps
  unless --steps says otherwise and 1 warm-up step."""
  common = dict(only=FLAGS.only, dtypes=FLAGS.dtypes, threads=FLAGS.threads)
  if FLAGS.quick:
    return dict(common, configs=QUICK_CONFIGS, xla=[False],
                checkpointing=[False], skip_padding=[True],
                steps=FLAGS.steps or 3, warmup_steps=1)
  return dict(common, configs=FLAGS.configs or DEFAULT_CONFIGS,
              xla=_on_off("xla", FLAGS.xla),
              checkpointing=_on_off("checkpointing", FLAGS.checkpointing),
              skip_padding=_on_off("skip_padding", FLAGS.skip_padding),
              steps=FLAGS.steps, warmup_steps=FLAGS.warmup_steps)


def main(argv):
  del argv
  if FLAGS.worker:
    spec = json.loads(FLAGS.worker)
    result = (run_peak_worker(spec) if spec["impl"] == "peak"
              else run_worker(spec))
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return
  drive(plan_runs(**_plan_flags()),
        rounds=1 if FLAGS.quick else FLAGS.rounds, threads=FLAGS.threads,
        num_impls=len(FLAGS.only), out_dir=FLAGS.out_dir,
        run_timeout=FLAGS.run_timeout)


if __name__ == "__main__":
  app.run(main)
