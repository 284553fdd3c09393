"""graph_order.after: identities that wait, with a graph linear in size."""
import numpy as np
import tensorflow as tf

from engine import graph_order


def _control_inputs(op):
  return sorted(dep.name for dep in op.control_inputs)


def test_one_dependency_is_waited_on_directly():
  with tf.Graph().as_default():
    first = tf.constant([1.0, 2.0], name="first")
    second = tf.constant([3.0], name="second")
    waiting = graph_order.after(first, second)
    assert waiting.op.type == "Identity"
    assert _control_inputs(waiting.op) == ["first"]
    with tf.compat.v1.Session() as sess:
      np.testing.assert_array_equal(sess.run(waiting), [3.0])


def test_many_values_wait_on_many_dependencies_through_one_op():
  n = 30
  with tf.Graph().as_default() as graph:
    deps = [tf.constant(float(i), name="dep_%d" % i) for i in range(n)]
    values = [tf.constant([float(i)] * 2, name="value_%d" % i)
              for i in range(n)]
    waiting = graph_order.after(deps, values)
    assert len(waiting) == n
    barriers = {op for w in waiting for op in w.op.control_inputs}
    assert len(barriers) == 1
    (barrier,) = barriers
    assert barrier.type == "NoOp"
    assert _control_inputs(barrier) == sorted("dep_%d" % i for i in range(n))
    control_edges = sum(len(op.control_inputs)
                        for op in graph.get_operations())
    assert control_edges == 2 * n  # not n * n
    with tf.compat.v1.Session() as sess:
      got = sess.run(waiting)
  for i, value in enumerate(got):
    np.testing.assert_array_equal(value, [float(i)] * 2)


def test_indexed_slices_and_python_scalars_keep_their_kind():
  with tf.Graph().as_default() as graph:
    dep = tf.IndexedSlices(tf.constant([[1.0]], name="dep_values"),
                           tf.constant([0]), tf.constant([3, 1]))
    rows = tf.IndexedSlices(tf.constant([[5.0, 6.0], [7.0, 8.0]]),
                            tf.constant([2, 0]), tf.constant([4, 2]))
    waiting_rows, done = graph_order.after([dep, tf.no_op(name="step")],
                                           [rows, True])
    assert isinstance(waiting_rows, tf.IndexedSlices)
    assert done.dtype == tf.bool
    (barrier,) = [op for op in graph.get_operations()
                  if op.type == "NoOp" and op.name != "step"]
    assert {"step", "dep_values"} <= set(_control_inputs(barrier))
    # The scalar's constant is made under the wait, then its identity.
    for op in (waiting_rows.values.op, waiting_rows.indices.op,
               done.op.inputs[0].op):
      assert barrier in op.control_inputs, op
    with tf.compat.v1.Session() as sess:
      values, indices, flag = sess.run(
          [waiting_rows.values, waiting_rows.indices, done])
  np.testing.assert_array_equal(values, [[5.0, 6.0], [7.0, 8.0]])
  np.testing.assert_array_equal(indices, [2, 0])
  assert flag
