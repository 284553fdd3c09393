"""Gradient checkpointing must lower the peak memory of a training step.

Equal gradients (tests/test_modeling.py) do not show that anything is saved:
`tf.recompute_grad` gives equal gradients on TF 2.21 while recomputing every
layer during the forward pass. This test measures the peak bytes of
TensorFlow's BFC allocator (TF_CPU_ALLOCATOR_USE_BFC=true, which must be set
before TensorFlow starts, hence the subprocess) for one backward pass of a
4-layer model with and without checkpointing.
"""
import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Activations kept per layer (batch 8, seq 128, hidden 128, 2 heads,
# intermediate 512): about 12 [B,S,H] + 4 [B,S,I] + 3 [B,A,S,S] float32
# tensors, 18 MB; 4 layers keep about 70 MB without checkpointing. With it,
# the kept layer inputs (4 x 0.5 MB) and one recomputed layer (18 MB).
_CHILD = r"""
import json, sys
import tensorflow as tf
import modeling

CONFIG = modeling.BertConfig(
    vocab_size=64, hidden_size=128, num_hidden_layers=4,
    num_attention_heads=2, intermediate_size=512,
    max_position_embeddings=128)


def peak_bytes(checkpointing):
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(1)
    tf.compat.v1.train.get_or_create_global_step()
    ids = tf.random.uniform([8, 128], maxval=64, dtype=tf.int32, seed=1)
    model = modeling.BertModel(CONFIG, is_training=True, input_ids=ids,
                               gradient_checkpointing=checkpointing)
    loss = tf.reduce_mean(tf.square(model.get_sequence_output()))
    grads = tf.gradients(loss, tf.compat.v1.trainable_variables())
    # One scalar out, so the gradients die as soon as they are summed (the
    # pooler, unused here, has none).
    total = tf.add_n([tf.reduce_sum(g) for g in grads if g is not None])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(total)
      tf.config.experimental.reset_memory_stats("CPU:0")
      before = tf.config.experimental.get_memory_info("CPU:0")["current"]
      sess.run(total)
      return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


print(json.dumps({"off": peak_bytes(False), "on": peak_bytes(True)}))
"""


def test_checkpointing_lowers_the_allocator_peak():
  env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true",
             TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get(
                 "PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=300,
                       check=True).stdout
  peaks = json.loads(out.strip().splitlines()[-1])
  assert peaks["off"] > 50e6, peaks  # The model of the comment holds.
  assert peaks["on"] < 0.5 * peaks["off"], peaks
