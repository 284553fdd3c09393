# coding=utf-8
"""Evaluation and prediction: the loops that run a checkpoint over data.

`evaluate` runs the streaming metric update ops over the data and returns
the metric values (and writes them to TensorBoard on the chief); `predict`
yields one dict of numpy values per example, or per batch. Both run on a
single device, in a graph of their own, on the checkpoint they are given,
else the latest of model_dir, else the initial values (with a
pretrained --init_checkpoint when the model_fn applies one), as TF1's
Estimator did. A progress line is logged every 10 seconds.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

from absl import logging
import numpy as np
import tensorflow as tf

from memory import out_of_memory
from runner import checkpointing
from runner import failures
from runner import model_graphs
from runner import model_spec
from runner import sessions
from runner import summaries
from userio import progress


def evaluate(graphs, input_fn, steps=None, checkpoint_path=None, name=None,
             *, num_batches=None):
  """Evaluates a checkpoint over the data (or `steps` batches).

  Args:
    graphs: the model_graphs.ModelGraphs; batches are its eval_batch_size.
    input_fn, steps, checkpoint_path, name, num_batches: see
      Estimator.evaluate.

  Returns:
    dict metric name -> value, plus "loss" (mean over batches, if the spec
    has a loss) and "global_step" (int) of the evaluated checkpoint.
  """
  config = graphs.config
  logging.info("Evaluating %s ...",
               checkpointing.weights_name(config, checkpoint_path))
  graph, iterator, spec, scaffold = _eval_or_predict_graph(
      graphs, input_fn, model_spec.ModeKeys.EVAL, graphs.eval_batch_size)
  with graph.as_default():
    metric_ops = dict(spec.eval_metric_ops or {})
    if spec.loss is not None and "loss" not in metric_ops:
      metric_ops["loss"] = tf.compat.v1.metrics.mean(spec.loss)
    values = {key: value for key, (value, _) in metric_ops.items()}
    updates = [update for _, update in metric_ops.values()]
    with sessions.session(config, graph) as sess, \
        failures.out_of_memory_errors(out_of_memory.EVALUATION,
                                      graphs.eval_batch_size, config):
      checkpoint = checkpointing.restore_or_initialize(
          config, sess, scaffold, checkpoint_path, "Estimator.evaluate")
      sess.run(iterator.initializer)
      with failures.damaged_records(graph):
        batches = _run_updates(
            sess, updates, steps,
            progress.Progress("Evaluating", steps or num_batches,
                              "batches"))
      results = sess.run(values)
      global_step = int(sess.run(tf.compat.v1.train.get_global_step()))
  results = {key: np.asarray(value).item() if np.size(value) == 1
             else np.asarray(value) for key, value in results.items()}
  results["global_step"] = global_step
  logging.info("Evaluated %s on %d batches: %s", checkpoint, batches,
               ", ".join("%s = %s" % kv for kv in sorted(results.items())))
  _write_eval_summaries(config, results, global_step, name)
  return results


def _eval_or_predict_graph(graphs, input_fn, mode, batch_size):
  """Returns (graph, iterator, spec, scaffold) for EVAL or PREDICT.

  The scaffold is resolved here, while building, because a `scaffold_fn`
  calling `init_from_checkpoint` must run before the initializers do.
  """
  params = graphs.params_with_batch_size(batch_size)
  graph = graphs.new_graph()
  with graph.as_default():
    tf.compat.v1.train.get_or_create_global_step()
    iterator = tf.compat.v1.data.make_initializable_iterator(
        model_graphs.call_input_fn(input_fn, params))
    spec = graphs.call_model_fn(iterator.get_next(), mode, params)
    scaffold = spec.resolve_scaffold()
  return graph, iterator, spec, scaffold


def _run_updates(sess, updates, steps, counter):
  """Runs `updates` until the data ends or `counter` reaches `steps`;
  returns the batches run."""
  while steps is None or counter.done < steps:
    try:
      sess.run(updates)
    except tf.errors.OutOfRangeError:
      break
    counter.advance()
  counter.finish()
  return counter.done


def _write_eval_summaries(config, results, global_step, name):
  if config.is_chief:
    summaries.write_metrics(config.model_dir,
                            "eval_" + name if name else "eval", results,
                            global_step)


def predict(graphs, input_fn, checkpoint_path=None,
            yield_single_examples=True, *, num_batches=None,
            for_evaluation=False):
  """Yields predictions: per example (default) or per batch.

  A generator: nothing is built or logged before the first value is asked
  for. `for_evaluation`: the batches are `graphs.eval_batch_size` and
  running out of memory is an evaluation's; otherwise the batches are its
  predict_batch_size. The other arguments: see Estimator.predict.

  Yields:
    dicts of numpy values (or bare values if `predictions` is a tensor).
  """
  config = graphs.config
  logging.info("Predicting with %s ...",
               checkpointing.weights_name(config, checkpoint_path))
  activity = (out_of_memory.EVALUATION if for_evaluation else
              out_of_memory.PREDICTION)
  batch_size = (graphs.eval_batch_size if for_evaluation
                else graphs.predict_batch_size)
  graph, iterator, spec, scaffold = _eval_or_predict_graph(
      graphs, input_fn, model_spec.ModeKeys.PREDICT, batch_size)
  if spec.predictions is None:
    raise ValueError("model_fn must return predictions in PREDICT mode.")
  sess = sessions.session(config, graph)
  try:
    with failures.out_of_memory_errors(activity, batch_size, config):
      with graph.as_default():
        checkpointing.restore_or_initialize(config, sess, scaffold,
                                            checkpoint_path,
                                            "Estimator.predict")
        sess.run(iterator.initializer)
      # The graph is not left as the default while yielding, so callers
      # can build or run other TensorFlow code between examples.
      counter = progress.Progress(
          "Evaluating" if for_evaluation else "Predicting", num_batches,
          "batches")
      while True:
        try:
          with failures.damaged_records(graph):
            batch = sess.run(spec.predictions)
        except tf.errors.OutOfRangeError:
          counter.finish()
          return
        counter.advance()
        if yield_single_examples:
          for example in _split_batch(batch):
            yield example
        else:
          yield batch
  finally:
    sess.close()


def _split_batch(batch):
  """Splits a batch (array or dict of arrays) into per-example values."""
  if not isinstance(batch, dict):
    return list(batch)
  sizes = {key: np.shape(value)[0] if np.ndim(value) else None
           for key, value in batch.items()}
  if None in sizes.values() or len(set(sizes.values())) != 1:
    raise ValueError("Every prediction must have the same batch dimension "
                     "to yield single examples; got sizes %r. Pass "
                     "yield_single_examples=False." % (sizes,))
  size = next(iter(sizes.values()))
  return [{key: value[i] for key, value in batch.items()}
          for i in range(size)]
