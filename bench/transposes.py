# coding=utf-8
"""Attention's head transposes: tf.transpose against the same permutation
of the float bits as integers of the same width, on the shapes BERT's
attention permutes.

With oneDNN on, TensorFlow's graph rewrite sends every float Transpose to
oneDNN's reorder and leaves integer transposes on TensorFlow's own kernel;
bitcasting to an integer of the same width, permuting and bitcasting back
gives the float result bit for bit through that kernel. (TensorFlow then
logs once, as an error, that oneDNN supports the integer type "only on
platforms with AVX-512", on any CPU: the reason the project's attention
does not do this, docs/results.md, "Attention's head transposes".)

    python -m bench.transposes

For each shape [batch, tokens, heads, head width] (--shapes) and dtype
(--dtypes), one graph holds three chains of --chain steps on a variable of
the layer's 2-D shape [batch * tokens, heads * width]. A step adds one,
reshapes to [batch, tokens, heads, width], permutes with [0, 2, 1, 3] and
reshapes back to 2-D; the addition keeps grappler from cancelling
consecutive transposes. One chain permutes with tf.transpose, one with
integers, and one not at all, whose time is subtracted from the other
two: what is printed is the time of the transposes alone. The three are
run in turn (each first in every third round), --rounds times each after
--warmup runs, in one process with the project's default threads; the
medians are printed per transpose with their ratio. The two transposing
chains end in the same values (checked bit for bit). Whether oneDNN is on
(TensorFlow's choice for the CPU, or TF_ENABLE_ONEDNN_OPTS) decides which
kernel tf.transpose gets; the printout says which.
"""

import time

from absl import app
from absl import flags
import numpy as np

from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

import bench

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", ["1x128x12x32", "1x128x12x64", "8x128x12x64",
                             "32x128x12x64"],
                  "Cases as batch x tokens x heads x head width, "
                  "comma-separated.")
flags.DEFINE_list("dtypes", ["fp32", "bf16"], "fp32 and/or bf16.")
flags.DEFINE_integer("chain", 24, "Steps (transposes) per run.")
flags.DEFINE_integer("rounds", 30, "Timed runs of each chain.")
flags.DEFINE_integer("warmup", 5, "Untimed runs of each chain first.")

_DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16}
_SAME_WIDTH_INTEGERS = {tf.float32: tf.int32, tf.bfloat16: tf.int16}
_HEADS_FIRST = [0, 2, 1, 3]


def integer_transpose(x, perm):
  """tf.transpose(x, perm), bit for bit, through the integer kernel."""
  integer = _SAME_WIDTH_INTEGERS[x.dtype]
  return tf.bitcast(tf.transpose(a=tf.bitcast(x, integer), perm=perm),
                    x.dtype)


def _chain(start, shape, transpose, steps):
  """`steps` steps from `start` [batch * tokens, heads * width], each
  permuting with `transpose` (None: no permutation)."""
  batch, tokens, heads, width = shape
  x = start
  for _ in range(steps):
    split = tf.reshape(x + tf.cast(1.0, x.dtype),
                       [batch, tokens, heads, width])
    if transpose is not None:
      split = transpose(split, _HEADS_FIRST)
    x = tf.reshape(split, [batch * tokens, heads * width])
  return x


def measure(shape, dtype, chain, warmup, rounds):
  """(ms per transpose with tf.transpose, as integers): the medians of
  `rounds` timed runs of chains of `chain` steps, after `warmup`
  untimed."""
  batch, tokens, heads, width = shape
  with tf.Graph().as_default():
    values = np.random.RandomState(0).randn(batch * tokens, heads * width)
    start = tf.cast(tf.compat.v1.get_variable(
        "x", initializer=values.astype(np.float32)), dtype)
    chains = [_chain(start, shape, transpose, chain) for transpose in (
        lambda x, perm: tf.transpose(a=x, perm=perm), integer_transpose,
        None)]
    # A sum as the fetch keeps the fetched bytes small.
    fetches = [tf.reduce_sum(tf.cast(c, tf.float32)) for c in chains]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      plain, bits = sess.run([tf.bitcast(c, _SAME_WIDTH_INTEGERS[dtype])
                              for c in chains[:2]])
      np.testing.assert_array_equal(plain, bits)
      times = [[], [], []]
      for index in range(warmup + rounds):
        for which in bench.in_turn([0, 1, 2], index):
          started = time.perf_counter()
          sess.run(fetches[which])
          if index >= warmup:
            times[which].append(time.perf_counter() - started)
  plain, bits, none = (float(np.median(t)) for t in times)
  return ((plain - none) * 1e3 / chain, (bits - none) * 1e3 / chain)


def main(_):
  unknown = sorted(set(FLAGS.dtypes) - set(_DTYPES))
  if unknown:
    raise SystemExit("bench.transposes: --dtypes: %s unknown; pass fp32 "
                     "and/or bf16." % ",".join(unknown))
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  print("oneDNN %s\n" % ("on" if _pywrap_util_port.IsMklEnabled() else
                         "off"))
  print("| shape | dtype | tf.transpose ms | as integers ms | ratio |")
  print("|---|---|---:|---:|---:|")
  for text in FLAGS.shapes:
    shape = [int(v) for v in text.split("x") if v.isdigit()]
    if len(shape) != 4 or min(shape) < 1:
      raise SystemExit("bench.transposes: --shapes=%s: each case is four "
                       "positive sizes like 1x128x12x64." % text)
    for name in FLAGS.dtypes:
      plain, bits = measure(shape, _DTYPES[name], FLAGS.chain, FLAGS.warmup,
                            FLAGS.rounds)
      print("| %s | %s | %.4f | %.4f | %.2fx |" % (
          "x".join(str(v) for v in shape), name, plain, bits, plain / bits))


if __name__ == "__main__":
  app.run(main)
