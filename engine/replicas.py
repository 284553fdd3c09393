# coding=utf-8
"""The replica a training step is built for, under a tf.distribute strategy.

The runner calls the model_fn once per replica. Each replica computes the
gradients of its shard and, once per update, they are averaged over the
replicas (`all_reduce_mean`); every replica then applies that same update to
its own copy of each variable (`local`), so the copies stay equal without a
cross-replica assignment. Without a strategy there is one replica, the
variables are their own copies and nothing is communicated.
"""

import tensorflow as tf


def num_replicas():
  """Replicas in sync: 1 outside a tf.distribute strategy's replica context."""
  context = tf.distribute.get_replica_context()
  return 1 if context is None else context.num_replicas_in_sync


def in_other_processes():
  """Whether some replicas in sync run in other processes (multi-worker)."""
  if num_replicas() == 1:
    return False
  context = tf.distribute.get_replica_context()
  local_count = len(context.strategy.extended.worker_devices)
  return context.num_replicas_in_sync > local_count


def local_replica_index():
  """This replica's index among the replicas of this process (0, 1, ...).

  `replica_id_in_sync_group` counts over all workers; each worker holds
  `len(worker_devices)` of them, in order.
  """
  context = tf.distribute.get_replica_context()
  replica_id = tf.get_static_value(context.replica_id_in_sync_group)
  return replica_id % len(context.strategy.extended.worker_devices)


def is_first_local():
  """Whether this is the only replica or the first one of this process."""
  return num_replicas() == 1 or local_replica_index() == 0


def local(variable):
  """The copy of `variable` that this replica writes (a tf.cond branch
  cannot hold a cross-replica assignment); without a strategy, `variable`
  itself."""
  if num_replicas() == 1:
    return variable
  strategy = tf.distribute.get_replica_context().strategy
  return strategy.experimental_local_results(variable)[local_replica_index()]


def all_reduce_mean(values, tvars, when=None):
  """Means over the replicas of per-replica tensors (one per variable).

  Args:
    values: float32 tensors, values[i] shaped like tvars[i].
    tvars: the variables the values belong to (where the means are needed).
    when: None (reduce on every run) or a bool scalar tensor, equal on all
      replicas; when False, nothing is communicated and `values` come back.

  Returns:
    This replica's list of means (`values` itself with one replica).

  The reduction is built in cross-replica context (merge_call), and so is
  the tf.cond on `when` around it: a merge_call cannot sit inside a
  replica's own tf.cond branch.
  """
  if num_replicas() == 1:
    return values

  def reduce_in_cross_replica_context(strategy, per_replica, condition):
    def reduce():
      means = strategy.extended.batch_reduce_to(
          tf.distribute.ReduceOp.MEAN, list(zip(per_replica, tvars)))
      return _flatten_local(strategy, means)

    if condition is None:
      return reduce()
    condition = strategy.experimental_local_results(condition)[0]
    return tf.cond(condition, reduce,
                   lambda: _flatten_local(strategy, per_replica))

  flat = tf.distribute.get_replica_context().merge_call(
      reduce_in_cross_replica_context, args=(values, when))
  # `flat` holds the values of every local replica, replica-major.
  start = local_replica_index() * len(values)
  return flat[start:start + len(values)]


def _flatten_local(strategy, distributed_values):
  """Tensors of each local replica in turn: [r0 v0, r0 v1, ..., r1 v0, ...]."""
  per_value = [strategy.experimental_local_results(v)
               for v in distributed_values]
  return [tf.identity(local_values[r]) for r in range(len(per_value[0]))
          for local_values in per_value]
