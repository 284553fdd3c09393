"""engine/weight_casts.py: a predicting graph's weights cast once into
copies give bit for bit what casting at every use gives (BertModel in bf16,
the same variables), the copies follow the float32 weights when refilled
and are never saved; an exported bf16 model fills them when loaded."""
import contextlib

import numpy as np
import tensorflow as tf

from engine import weight_casts
import modeling

CONFIG = modeling.BertConfig(vocab_size=99, hidden_size=32,
                             num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=37)


def _ids():
  rng = np.random.RandomState(0)
  ids = rng.randint(1, 99, size=(3, 11)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  return ids, mask


def test_copies_equal_casting_at_every_use():
  ids, mask = _ids()
  with tf.Graph().as_default() as graph:
    outputs = []
    for reuse, cast_once in ((False, False), (True, True)):
      with tf.compat.v1.variable_scope("", reuse=reuse):
        context = (weight_casts.cast_once() if cast_once else
                   contextlib.nullcontext())
        with context:
          model = modeling.BertModel(
              CONFIG, False, tf.constant(ids), tf.constant(mask),
              compute_dtype=tf.bfloat16, scope="bert")
      outputs.append(tf.cast(model.get_pooled_output(), tf.float32))
    copies = graph.get_collection(weight_casts.COPIES)
    assert copies and all(c.dtype.base_dtype == tf.bfloat16 for c in copies)
    saved = set(tf.compat.v1.global_variables()) | set(
        tf.compat.v1.local_variables())
    assert not saved & set(copies)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(weight_casts.initializer(graph))
      plain, cached = sess.run(outputs)
      np.testing.assert_array_equal(plain, cached)
      # New float32 weights reach the copies when they are filled again.
      kernel = [v for v in tf.compat.v1.global_variables()
                if v.op.name.endswith("pooler/dense/kernel")][0]
      sess.run(kernel.assign(kernel * 2.0))
      changed, stale = sess.run(outputs)
      assert not np.array_equal(changed, stale)
      sess.run(weight_casts.initializer(graph))
      np.testing.assert_array_equal(*sess.run(outputs))


def test_outside_cast_once_nothing_is_kept():
  with tf.Graph().as_default() as graph:
    variable = tf.compat.v1.get_variable("w", [2, 2])
    cast = weight_casts.in_dtype(variable, tf.bfloat16)
    assert cast.op.type == "Cast"
    assert weight_casts.initializer(graph) is None
