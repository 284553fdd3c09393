# coding=utf-8
"""A small Estimator-style runner that replaces the removed `tf.estimator`.

The training scripts keep the original's shape: they build a `model_fn` and an
`input_fn` and hand them to an `Estimator`. The runner runs them in graph mode
with a plain `tf.compat.v1.Session` loop, so every step is easy to follow:

  * `train` builds a fresh graph, restores the latest checkpoint of `model_dir`
    if there is one (otherwise it initializes, applying `init_from_checkpoint`
    and the scaffold's `init_fn`), and runs the train op until `global_step`
    reaches `max_steps` or the data ends; a resumed run skips the
    micro-batches it already consumed (runner/training_loop.py).
  * `evaluate` runs the streaming metric update ops over the data and returns
    the metric values; `predict` yields one dict of numpy values per example
    (runner/evaluation.py).
  * `export_saved_model` writes the prediction graph with the latest
    checkpoint's weights as a SavedModel for serving (runner/export.py).

This module is the front: `Estimator` keeps the model_fn, its params, the
RunConfig and the batch sizes in one model_graphs.ModelGraphs and hands each
call to the module that does it. The pieces they share are modules of
their own: what a model_fn gets and returns (runner/model_spec.py), the
RunConfig (runner/run_config.py), checkpoints and the stop signals
(runner/checkpointing.py), sessions (runner/sessions.py) and the
exceptions that end a run (runner/failures.py). The names the scripts,
tasks and benchmarks use through this module are re-exported below.

A full disk while a checkpoint, the summaries or an export is written, and a
record file found cut short or damaged while reading, end in one line naming
the file or folder. With `RunConfig(distribution=strategy)` training is data
parallel over the strategy's replicas; evaluation and prediction always run
on a single device. With `RunConfig(use_xla=True)` every model_fn graph is
built in an XLA jit scope.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

from checkpoints import checkpoint_checks
from runner import evaluation
from runner import export
from runner import failures
from runner import model_graphs
from runner import model_spec
from runner import run_config
from runner import sessions
from runner import training_loop

# The names other code uses through this module, from where they live.
ACCUMULATION_STEPS_KEY = model_spec.ACCUMULATION_STEPS_KEY
ModeKeys = model_spec.ModeKeys
EstimatorSpec = model_spec.EstimatorSpec
ServingInputReceiver = model_spec.ServingInputReceiver
RunConfig = run_config.RunConfig
is_chief = run_config.is_chief
NonFiniteLossError = failures.NonFiniteLossError
OutOfMemoryError = failures.OutOfMemoryError
WorkerFailedError = failures.WorkerFailedError
TrainingInterrupted = failures.TrainingInterrupted
make_step_callable = training_loop.make_step_callable


class Estimator(object):
  """Trains, evaluates and predicts with a `model_fn` (see module docstring)."""

  def __init__(self, model_fn, config, params=None, train_batch_size=None,
               eval_batch_size=None, predict_batch_size=None):
    if not isinstance(config, RunConfig):
      raise TypeError("Estimator: config must be a RunConfig, got %r." %
                      (type(config),))
    self._graphs = model_graphs.ModelGraphs(
        model_fn, config, params, train_batch_size=train_batch_size,
        eval_batch_size=eval_batch_size,
        predict_batch_size=predict_batch_size)

  @property
  def model_dir(self):
    return self._graphs.config.model_dir

  @property
  def config(self):
    return self._graphs.config

  @property
  def params(self):
    return dict(self._graphs.params)

  def latest_checkpoint(self):
    """Path prefix of the newest checkpoint in `model_dir`, or None."""
    return checkpoint_checks.latest_checkpoint(self.model_dir)

  def _session(self, graph):
    """A session of `graph` as the runner makes them (runner/sessions.py);
    the tests check its settings through it."""
    return sessions.session(self._graphs.config, graph)

  def train(self, input_fn, max_steps, saving_listeners=None):
    """Trains until `global_step` reaches `max_steps` or the data ends, or a
    listener stops it.

    Args:
      input_fn: callable(params) -> batched tf.data.Dataset of feature dicts;
        params["batch_size"] is the micro-batch size.
      max_steps: total number of optimizer updates (across restarts).
      saving_listeners: training_listener.TrainingListeners, told of the
        checkpoints they ask for (runner/training_listener.py).

    Returns:
      self.
    """
    training_loop.Trainer(self._graphs, self._save,
                          saving_listeners or ()).train(input_fn, max_steps)
    return self

  def _save(self, sess, built, step):
    """Writes checkpoint `step` of the training graph `built` (the chief
    alone). Training calls it for each of its saves, so that a subclass can
    act around one (the tests send a signal during one)."""
    training_loop.save_checkpoint(self._graphs.config, sess, built, step)

  def evaluate(self, input_fn, steps=None, checkpoint_path=None, name=None,
               *, num_batches=None):
    """Evaluates a checkpoint over the data (or `steps` batches).

    Without a checkpoint in model_dir (and no `checkpoint_path`) it evaluates
    the initial values, with a warning. A progress line (batches done of
    `steps` or `num_batches`, the number input_fn yields when known, rate,
    time left) is logged every 10 seconds. On the chief, the values are
    also written as TensorBoard scalars under "eval" (or "eval_<name>").

    Returns:
      dict metric name -> value, plus "loss" (mean over batches, if the spec
      has a loss) and "global_step" (int) of the evaluated checkpoint.
    """
    return evaluation.evaluate(self._graphs, input_fn, steps,
                               checkpoint_path, name, num_batches=num_batches)

  def predict(self, input_fn, checkpoint_path=None,
              yield_single_examples=True, *, num_batches=None,
              for_evaluation=False):
    """Yields predictions: per example (default) or per batch.

    With no checkpoint in model_dir (and no checkpoint_path), the variables
    are initialized as in a fresh training run (so `init_from_checkpoint` in
    the model_fn applies), as the original Estimator did. A progress line
    (batches done of `num_batches` when known, rate, time left) is logged
    every 10 seconds. `for_evaluation`: the predictions are what a task
    scores itself (NER's conlleval, say): the batches are eval_batch_size
    and running out of memory is an evaluation's.

    Yields:
      dicts of numpy values (or bare values if `predictions` is a tensor).
    """
    return evaluation.predict(
        self._graphs, input_fn, checkpoint_path, yield_single_examples,
        num_batches=num_batches, for_evaluation=for_evaluation)

  def export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                         checkpoint_path=None, assets=None):
    """Writes a SavedModel of the PREDICT graph; returns its directory.

    The model is `export_dir_base/<unix time>`, with the tag "serve" and a
    "serving_default" signature from the receiver's placeholders to the
    model_fn's predictions (less those that only pass on a feature the
    receiver makes up rather than takes from the request). It is written
    under a temporary name and renamed when complete, so no half-written
    model is ever found there.

    Args:
      export_dir_base: directory to create the model's directory in.
      serving_input_receiver_fn: callable () -> `ServingInputReceiver`,
        called in the export graph.
      checkpoint_path: weights to export; default the latest checkpoint of
        model_dir.
      assets: optional dict file name -> path of files the model needs
        beside its graph (config, vocabulary, labels), copied into the
        SavedModel's `assets.extra/`: the folder TensorFlow Serving keeps
        for files no graph op reads, so loading ignores them and a client
        finds them next to the model.

    Raises:
      ValueError: there is no checkpoint, or the predictions are not a dict.
    """
    return export.export_saved_model(self._graphs, export_dir_base,
                                     serving_input_receiver_fn,
                                     checkpoint_path, assets)
