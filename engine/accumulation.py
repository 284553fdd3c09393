# coding=utf-8
"""Gradient accumulation, and the micro_step counter that drives it.

Every run of a train op consumes one micro-batch and adds 1 to micro_step
(engine/graph_keys.py). With k accumulation steps each run adds its
gradients to float32 accumulators (`<variable>/accum_grad`) and every k-th
run applies their mean as one update and zeroes them, so k micro-batches
make the update of one k times bigger batch. Dropout masks read micro_step,
so it advances only after the forward and backward passes.

Under a strategy the accumulators are per replica (ON_READ) and are averaged
over the replicas only on the runs that apply. Across processes
(MultiWorkerMirroredStrategy), TF 2.21 graph-mode sessions abort a
collective inside a tf.cond ("Delete called on non-empty BufRendezvous"):
there the train op always all-reduces and applies, and the op that only
accumulates goes to the graph collection graph_keys.ACCUMULATE_ONLY, which
the runner (runner/estimator.py) runs on the k - 1 runs of an update that
do not apply.
"""

import tensorflow as tf

from engine import gradients
from engine import graph_keys
from engine import graph_order
from engine import replicas
from engine import slot_variables


def advance_micro_step(after):
  """Op adding 1 to this replica's micro_step once `after` (tensors,
  IndexedSlices or ops) exist, i.e. after every read of it in the forward
  and backward passes (dropout masks). Recorded in
  graph_keys.MICRO_STEP_ADVANCES, so the runner does not count the run a
  second time."""
  micro_step = graph_keys.get_or_create_micro_step()
  with tf.control_dependencies([gradients.values(dep) for dep in after]):
    advanced = replicas.local(micro_step).assign_add(1, read_value=False)
  tf.compat.v1.add_to_collection(graph_keys.MICRO_STEP_ADVANCES, advanced)
  return advanced


def accumulate(grads, tvars, num_accumulation_steps, update):
  """Adds `grads` to accumulators; every k-th run applies their mean.

  Args:
    grads: this run's float32 gradients (tensors or IndexedSlices), grads[i]
      of tvars[i].
    tvars: the variables trained.
    num_accumulation_steps: int k >= 2.
    update: callable(means, half_squared_norms) -> the op or tensor of one
      update; half_squared_norms are the global-norm clip's ||g||^2 / 2 of
      the big batch's gradients.

  Returns:
    bool scalar tensor, True on the runs that applied (or skipped) an update.
  """
  across_processes = replicas.in_other_processes()
  # A checkpoint reads the accumulators outside the replicas. Reading a SUM
  # variable there all-reduces it, which across processes would wait forever
  # for the workers that do not save; so there checkpoints hold the first
  # replica's sums (the runner saves after whole updates, when all are 0).
  aggregation = (tf.VariableAggregation.ONLY_FIRST_REPLICA
                 if across_processes else tf.VariableAggregation.SUM)

  def accumulator(param, suffix, shape):
    return slot_variables.zeros(
        slot_variables.variable_name(param) + suffix, shape,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=aggregation)

  accumulators = [accumulator(v, "/accum_grad", v.shape.as_list())
                  for v in tvars]
  # One big batch's clip counts every row of a sparse gradient (see
  # engine/gradients.py), which a dense sum no longer shows: such variables
  # also accumulate their rows' ||g||^2 / 2.
  sparse = [i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
  row_norms = [accumulator(tvars[i], "/accum_half_squared_norm", [])
               for i in sparse]
  adds = [_add_to(replicas.local(a), g) for a, g in zip(accumulators, grads)]
  adds += [replicas.local(a).assign_add(gradients.half_squared_norm(grads[i]),
                                        read_value=False)
           for a, i in zip(row_norms, sparse)]
  # micro_step is checkpointed: a run that stops between updates saves the
  # partial sums together with the count they belong to.
  counted = advance_micro_step(adds)
  with tf.control_dependencies([counted]):
    count = graph_keys.get_micro_step().read_value()
    sums = [a.read_value() for a in accumulators + row_norms]

  def apply_mean(totals):
    means = [total / float(num_accumulation_steps)
             for total in totals[:len(tvars)]]
    half_squared_norms = [gradients.half_squared_norm(mean) for mean in means]
    # Each row of the big batch is a micro-batch's row / (k * replicas);
    # the all-reduce averaged the replicas' sums of squares once.
    rows_per_update = float(num_accumulation_steps**2 *
                            replicas.num_replicas())
    for i, total in zip(sparse, totals[len(tvars):]):
      half_squared_norms[i] = total / rows_per_update
    done = update(means, half_squared_norms)
    with tf.control_dependencies([done]):
      zeroed = [replicas.local(a).assign(tf.zeros_like(a), read_value=False)
                for a in accumulators + row_norms]
    return graph_order.after(zeroed, True)

  destinations = tvars + row_norms
  if across_processes:
    tf.compat.v1.add_to_collection(graph_keys.ACCUMULATE_ONLY, counted)
    return apply_mean(replicas.all_reduce_mean(sums, destinations))
  applies = tf.equal(count % num_accumulation_steps, 0)
  # The all-reduce (a no-op with one replica) runs only on applying runs.
  totals = replicas.all_reduce_mean(sums, destinations, applies)
  return tf.cond(applies, lambda: apply_mean(totals),
                 lambda: tf.constant(False))


def _add_to(accumulator, grad):
  """Op adding `grad` (a tensor or IndexedSlices) to the float32 variable."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.raw_ops.ResourceScatterAdd(
        resource=accumulator.handle, indices=grad.indices,
        updates=grad.values)
  return accumulator.assign_add(grad, read_value=False)
