# coding=utf-8
"""Training: the train graph and the session loop that runs it.

`Trainer.train` builds a fresh graph, restores the latest checkpoint of
model_dir if there is one (otherwise it initializes, applying
`init_from_checkpoint` and the scaffold's `init_fn`), and runs the train op
until `global_step` reaches `max_steps` or the data ends. A `micro_step`
counter (one per run of the train op, i.e. per micro-batch) is
checkpointed with the model; a resumed run skips that many batches, so it
sees exactly the data an uninterrupted run would.

Each run goes through a session callable (`make_step_callable`), whose
executors are built before the first step. The loop checkpoints at update
boundaries, logs a progress line and writes TensorBoard scalars; a loss
that is no longer finite, a worker that fails and SIGINT or SIGTERM end it
with the exceptions of runner/failures.py.

With `RunConfig(distribution=strategy)` training is data parallel: each
global micro-batch is split evenly over the strategy's replicas, the model_fn
runs once per replica on its shard (inside `call_for_each_replica`), and
`optimization.create_optimizer` averages the gradients over the replicas.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import contextlib
import datetime
import functools
import os
import signal
import time

from absl import logging
import numpy as np
import tensorflow as tf

from checkpoints import checkpoint_checks
from engine import dropout_masks
from engine import graph_keys
from engine import host_memory
from engine import replicas
from engine import tf_internals
from memory import out_of_memory
from runner import checkpointing
from runner import failures
from runner import model_graphs
from runner import model_spec
from runner import peer_watch
from runner import sessions
from runner import summaries
from userio import cli
from userio import disk_space


class _Meter(object):
  """Averages loss and counts examples between two reports."""

  def __init__(self):
    self.reset()

  def reset(self):
    self.loss_sum = 0.0
    self.runs = 0
    self.examples = 0
    self.start = time.time()

  def add(self, loss, examples):
    self.loss_sum += loss
    self.runs += 1
    self.examples += examples

  def mean_loss(self):
    return self.loss_sum / max(self.runs, 1)

  def examples_per_sec(self):
    return self.examples / max(time.time() - self.start, 1e-9)


class _TrainGraph(collections.namedtuple(
    "_TrainGraph", ("graph", "iterator", "step_op", "fetches", "saver",
                    "scaffold", "accumulate_only", "stop_vote"))):
  """The pieces of a built training graph the loop needs.

  `accumulate_only` is None, or the (step_op, fetches) to run instead of
  (step_op, fetches) on the runs that accumulate without applying.
  `stop_vote` is None, or (wishes, votes) of `_stop_vote`.
  """


def _step_fetches(train_op, loss, micro_step, global_step):
  """(step_op, fetches) of a training run that executes `train_op`.

  A train op of optimization.create_optimizer advances micro_step itself
  (graph_keys.MICRO_STEP_ADVANCES); after any other, step_op does. The
  fetches read the loss, the counters (after the run, so the loop sees the
  new values) and the learning rate and loss scale when the graph has them.
  """
  step_op = train_op
  if not tf.compat.v1.get_collection(graph_keys.MICRO_STEP_ADVANCES):
    with tf.control_dependencies([train_op]):
      step_op = micro_step.assign_add(1)
  with tf.control_dependencies([step_op]):
    fetches = {"loss": tf.identity(loss),
               "global_step": global_step.read_value(),
               "micro_step": micro_step.read_value()}
    for key, collection in (("learning_rate", graph_keys.LEARNING_RATE),
                            ("loss_scale", graph_keys.LOSS_SCALE)):
      tensors = tf.compat.v1.get_collection(collection)
      if tensors:
        # A tensor (under a strategy, replica 0's), or a variable's value.
        fetches[key] = tf.convert_to_tensor(tensors[0])
  return step_op, fetches


def make_step_callable(sess, step_op, fetches):
  """A function that runs `step_op` (an op or tensor) and returns the values
  of `fetches`, a dict of tensors, as a dict of numpy values.

  `sess.run` builds the executors of a set of fetches (graph optimization,
  kernels) inside its first run; a callable builds them here, and the heap
  memory that construction freed goes back to the system (engine/host_memory.py)
  before the first step allocates its tensors. (What the first runs free
  later, e.g. compiling XLA kernels, the train op of
  optimization.create_optimizer hands back itself.)
  """
  keys = sorted(fetches)
  run = tf_internals.prepared_callable(sess, step_op,
                                       [fetches[key] for key in keys])
  host_memory.release_freed_heap()
  return lambda: dict(zip(keys, run()))


def _step_fns(sess, built):
  """(apply, accumulate_only) step functions of `built`; the second is None
  without gradient accumulation. See `make_step_callable`."""
  apply_fn = make_step_callable(sess, built.step_op, built.fetches)
  accumulate_fn = (None if built.accumulate_only is None else
                   make_step_callable(sess, *built.accumulate_only))
  return apply_fn, accumulate_fn


def _stop_vote(strategy):
  """(wishes, votes) of a multi-worker run: a float placeholder [2] that
  each worker feeds after an update with 1 or 0 for whether its listeners,
  and whether a signal, ask to stop there, and the wishes' means over the
  replicas of every worker (positive where one wishes it), so that all
  workers stop after the same update. Reduced the way the gradients are
  (engine/replicas.py), into a local variable that no checkpoint holds."""
  wishes = tf.compat.v1.placeholder(tf.float32, [2], name="stop_wishes")
  destination = tf.compat.v1.get_variable(
      "stop_votes", [2], tf.float32, tf.compat.v1.zeros_initializer(),
      trainable=False, collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

  def vote():
    return replicas.all_reduce_mean([tf.identity(wishes)], [destination])[0]

  votes = strategy.extended.call_for_each_replica(
      tf.autograph.experimental.do_not_convert(vote))
  return wishes, strategy.experimental_local_results(votes)[0]


def _format_left(seconds):
  return str(datetime.timedelta(seconds=int(round(seconds))))


def save_checkpoint(config, sess, built, step):
  """Saves checkpoint `step` of the training graph `built` into the model
  folder of RunConfig `config`, on the chief; the other workers save
  nothing."""
  if not config.is_chief:
    return
  checkpointing.save(sess, built.saver, config.model_dir, step)


class Trainer(object):
  """Trains the model_fn of a model_graphs.ModelGraphs."""

  def __init__(self, graphs, save, listeners=()):
    """Args:
      graphs: the model_graphs.ModelGraphs.
      save: callable(sess, built, step) that writes each checkpoint of the
        run (Estimator._save, which calls `save_checkpoint`; a subclass of
        Estimator may act around it).
      listeners: training_listener.TrainingListeners to tell of the
        checkpoints they need.
    """
    self._graphs = graphs
    self._save = save
    self._listeners = list(listeners)
    self._config = graphs.config
    self._model_dir = graphs.config.model_dir
    # What running the same command again does, for disk_space's messages.
    self._resume_point = functools.partial(checkpointing.resume_point,
                                           self._model_dir)
    self._peer_watch = None
    if sessions.multi_worker(self._config):
      self._peer_watch = peer_watch.PeerWatch(
          lambda gone: cli.training_failure(failures.WorkerFailedError(
              self._worker_failed("%s no longer answers" % ", ".join(gone)))))

  def _latest_checkpoint(self):
    return checkpoint_checks.latest_checkpoint(self._model_dir)

  def train(self, input_fn, max_steps):
    """Trains until `global_step` reaches `max_steps` or the data ends.

    Args:
      input_fn: callable(params) -> batched tf.data.Dataset of feature dicts;
        params["batch_size"] is the micro-batch size.
      max_steps: total number of optimizer updates (across restarts).
    """
    if self._config.is_chief:
      for name in checkpoint_checks.remove_unfinished_saves(self._model_dir):
        logging.info("Removed %s, left by a run stopped while it saved a "
                     "checkpoint.", name)
    checkpoint = self._latest_checkpoint()
    start_step, skip = (checkpointing.checkpoint_counters(checkpoint)
                        if checkpoint else (0, 0))
    if start_step >= max_steps:
      logging.info("Skipping training: %s is already at step %d >= "
                   "max_steps %d.", checkpoint, start_step, max_steps)
      # What a stop after the last save left undone (every worker skips
      # alike, so no vote is needed).
      self._tell_listeners(start_step)
      return
    if (start_step and not sessions.multi_worker(self._config) and
        self._needs_checkpoint(start_step) and
        self._tell_listeners(start_step)):
      return  # Its listeners stopped training at the checkpoint it has.
    logging.info("Preparing training: graph, session and %s ...",
                 "checkpoint" if checkpoint else "initial weights")
    built = self._build_train_graph(input_fn, skip)
    if self._config.is_chief:
      tf.io.gfile.makedirs(self._model_dir)
    with built.graph.as_default(), \
        sessions.train_session(self._config, built.graph) as sess, \
        failures.out_of_memory_errors(out_of_memory.TRAINING,
                                      self._graphs.train_batch_size,
                                      self._config):
      self._initialize_or_restore(sess, built, checkpoint, skip)
      built.graph.finalize()
      writer = self._new_event_file() if self._config.is_chief else None
      try:
        logging.info("Training from step %d to %d, a progress line every %d "
                     "steps%s ...", start_step, max_steps,
                     self._config.log_step_count_steps,
                     "" if self._config.log_step_count_secs is None else
                     " or %d s" % self._config.log_step_count_secs)
        with failures.damaged_records(built.graph):
          self._train_loop(sess, built, _step_fns(sess, built), writer,
                           max_steps, start_step, skip,
                           save_first=checkpoint is None)
      finally:
        if writer is not None:
          writer.close()

  # ---------------------------------------------------------------- building

  def _build_train_graph(self, input_fn, skip_batches):
    """Builds the training graph; `skip_batches` batches are dropped first.

    The skip is applied in fresh runs too (as 0) so fresh and resumed runs
    create the same ops and thus draw the same op-level random seeds.
    """
    params = self._graphs.train_params()
    graph = self._graphs.new_graph()
    strategy = self._config.distribution
    scope = (strategy.scope() if strategy is not None
             else contextlib.nullcontext())
    with graph.as_default(), scope:
      global_step = graph_keys.get_or_create_global_step()
      micro_step = graph_keys.get_or_create_micro_step()
      # Each micro-batch then draws its part of its update's dropout masks.
      dropout_masks.record_accumulation_steps(
          params[model_spec.ACCUMULATION_STEPS_KEY])
      dataset = model_graphs.call_input_fn(input_fn, params, skip_batches)
      iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
      if strategy is None:
        loss, train_op, scaffold = self._train_spec(iterator.get_next(),
                                                    params)
      else:
        loss, train_op, scaffold = self._replicated_train_spec(
            strategy, iterator.get_next(), params)
      step_op, fetches = _step_fetches(train_op, loss, micro_step,
                                       global_step)
      accumulate_ops = tf.compat.v1.get_collection(
          graph_keys.ACCUMULATE_ONLY)
      accumulate_only = None
      if accumulate_ops:
        accumulate_only = _step_fetches(tf.group(*accumulate_ops), loss,
                                        micro_step, global_step)
      saver = checkpointing.new_saver(
          max_to_keep=self._config.keep_checkpoint_max or 0)
      stop_vote = None
      if sessions.multi_worker(self._config):
        stop_vote = _stop_vote(strategy)
    return _TrainGraph(graph, iterator, step_op, fetches, saver, scaffold,
                       accumulate_only, stop_vote)

  def _train_spec(self, features, params):
    """(loss, train_op, scaffold) of the model_fn in TRAIN mode."""
    spec = self._graphs.call_model_fn(features, model_spec.ModeKeys.TRAIN,
                                      params)
    if spec.loss is None or spec.train_op is None:
      raise ValueError("model_fn must return loss and train_op in TRAIN "
                       "mode.")
    return spec.loss, spec.train_op, spec.resolve_scaffold()

  def _replicated_train_spec(self, strategy, features, params):
    """(loss, train_op, scaffold) with the model_fn run once per replica.

    Args:
      strategy: the distribution strategy; its scope is entered.
      features: the global micro-batch, tensors [micro_batch, ...]; replica
        r (over all workers) takes rows [r * b, (r + 1) * b) with b the
        replica batch size, so the replicas together see exactly the
        examples of a single-device run.
      params: the model_fn's params.

    Returns:
      The mean loss of this process's replicas (with mirrored: the global
      micro-batch's mean loss), the op running every local replica's train
      op, and the first local replica's scaffold.
    """
    batch = self._graphs.replica_batch_size()
    scaffolds = []

    def replica_fn(global_features):
      context = tf.distribute.get_replica_context()
      replica = tf.get_static_value(context.replica_id_in_sync_group)
      shard = tf.nest.map_structure(
          lambda t: t[replica * batch:(replica + 1) * batch], global_features)
      loss, train_op, scaffold = self._train_spec(shard, params)
      if not scaffolds:
        scaffolds.append(scaffold)
      return loss, train_op

    # The model_fn is graph-building Python code; autograph must not rewrite
    # its control flow.
    losses, train_ops = strategy.extended.call_for_each_replica(
        tf.autograph.experimental.do_not_convert(replica_fn),
        args=(features,))
    # This process's replicas' mean loss (every replica's with mirrored), for
    # the log: no extra communication per micro-batch.
    local_losses = strategy.experimental_local_results(losses)
    loss = tf.add_n(local_losses) / float(len(local_losses))
    train_op = tf.group(strategy.experimental_local_results(train_ops))
    return loss, train_op, scaffolds[0]

  # ----------------------------------------------------------------- running

  def _initialize_or_restore(self, sess, built, checkpoint, skip):
    """Initializers first; a checkpoint then overrides them (resume)."""
    checkpointing.run_initializers(sess)
    if checkpoint:
      logging.info("Resuming from %s; skipping %d batches already consumed.",
                   checkpoint, skip)
      checkpointing.restore(built.saver, sess, checkpoint)
      # Only this folder's own files: the saver deletes the oldest of them
      # as it writes new ones.
      checkpointing.recover_last_checkpoints(
          built.saver, checkpoint_checks.checkpoints_in(self._model_dir))
    elif built.scaffold is not None and built.scaffold.init_fn is not None:
      built.scaffold.init_fn(sess)
    sess.run(built.iterator.initializer)

  def _run_train_step(self, step_fns, micro_step):
    """One micro-batch; returns the fetched values or None at end of data.

    `step_fns` are (apply, accumulate_only) from `_step_fns`; `micro_step`
    counts the micro-batches run before this one.
    """
    apply_fn, accumulate_fn = step_fns
    run_fn = apply_fn
    if (accumulate_fn is not None and
        (micro_step + 1) % self._config.num_accumulation_steps):
      run_fn = accumulate_fn  # This run does not apply.
    try:
      with self._worker_failures():
        return run_fn()
    except tf.errors.OutOfRangeError:
      return None

  def _worker_failed(self, cause):
    """The advice of a multi-worker run that lost a worker to `cause`."""
    return ("A worker of the cluster in TF_CONFIG stopped or is unreachable "
            "(%s). Restart all workers with the same flags; they resume from "
            "the chief's last checkpoint (%s)." % (
                cause, self._latest_checkpoint() or "none yet"))

  @contextlib.contextmanager
  def _worker_failures(self):
    """Turns a multi-worker run's lost connection into WorkerFailedError;
    a wait that a dead worker made endless ends in the same line
    (runner/peer_watch.py)."""
    if self._peer_watch is None:
      yield
      return
    try:
      with self._peer_watch.waiting():
        yield
    except tf.errors.UnavailableError as e:
      raise failures.WorkerFailedError(self._worker_failed(
          "TensorFlow said: %s" % " ".join(
              e.message.splitlines()[0].split()))) from e

  def _needs_checkpoint(self, step):
    """Whether a listener needs a checkpoint of update `step`."""
    return any(listener.needs_checkpoint(step)
               for listener in self._listeners)

  def _tell_listeners(self, step):
    """Calls after_checkpoint of the listeners that need update `step`
    (held by the newest checkpoint); returns whether one asks to stop."""
    checkpoint = self._latest_checkpoint() if self._config.is_chief else None
    wishes = [listener.after_checkpoint(step, checkpoint)
              for listener in self._listeners
              if listener.needs_checkpoint(step)]
    return any(wishes)

  def _listeners_stop(self, stop, step, max_steps):
    """Tells the listeners of checkpoint `step`; returns whether one asks
    training to stop there. A signal while they work stops the run at
    once: the checkpoint is saved, and a rerun tells them again."""
    with stop.at_once(lambda signum: self._interrupted(signum, step,
                                                       max_steps)):
      return self._tell_listeners(step)

  def _vote(self, sess, built, listener_wish, signalled):
    """(whether a worker's listeners, whether a worker's signal, asks to
    stop after this update), from every worker's wishes."""
    placeholder, votes = built.stop_vote
    with self._worker_failures():
      means = sess.run(votes, {placeholder: [float(listener_wish),
                                             float(signalled)]})
    return means[0] > 0, means[1] > 0

  def _cluster_stops(self, sess, built, stop, saved, updated_to, max_steps,
                     listener_wish):
    """The vote of a multi-worker run after an update: whether its
    listeners end training there. A signal to any worker stops them all
    after this update, with a checkpoint of it (the chief saves one if it
    has not), each with one line.

    Args:
      saved, updated_to: (step, micro_step) of the last save and of this
        update.
    """
    listeners, signalled = self._vote(sess, built, listener_wish,
                                      stop.signum is not None)
    if not signalled:
      return listeners
    step = updated_to[0]
    if saved != updated_to:
      self._save(sess, built, step)
    if stop.signum is not None:
      raise self._interrupted(stop.signum, step, max_steps)
    raise failures.TrainingInterrupted(
        "Training stopped at step %d/%d: another worker of the cluster was "
        "stopped by a signal, and every worker stops with it; the chief's "
        "checkpoint of this update holds it. Run the same command again on "
        "every worker to resume." % (step, max_steps), signal.SIGTERM)

  def _check_finite(self, values, step, micro_step):
    loss = values["loss"]
    if np.all(np.isfinite(loss)):
      return
    lr = values.get("learning_rate")
    raise failures.NonFiniteLossError(
        "Loss is %s at step %d (micro-batch %d, learning rate %s). Nothing "
        "was saved from this run after the last checkpoint (%s), so a rerun "
        "resumes from it. Try: lower --learning_rate, raise "
        "--warmup_proportion (--num_warmup_steps in run_pretraining.py), use "
        "--precision=fp32 (or fp16 with loss "
        "scaling), and check the input data for bad values." %
        (loss, step, micro_step, "n/a" if lr is None else "%.3g" % lr,
         self._latest_checkpoint() or "none yet"))

  def _new_event_file(self):
    """The summaries.EventFile of this training run's summaries in model_dir."""
    with disk_space.writing(self._model_dir, "TensorBoard summaries",
                            partial=lambda entry: False, flag="--output_dir",
                            then=self._resume_point):
      return summaries.EventFile(self._model_dir)

  def _train_loop(self, sess, built, step_fns, writer, max_steps, start_step,
                  skip, save_first=False):
    """Runs micro-batches; checkpoints, logs and summarizes per update.

    Checkpoints are written at update boundaries (no partial accumulation):
    first if `save_first`, every save_checkpoints_steps updates,
    save_checkpoints_secs after the last one, after each update a listener
    needs (which it is then told of, after the update's progress line and
    summaries; it may end training there), at the end, and when SIGINT or
    SIGTERM asks training to stop, which then raises TrainingInterrupted.
    Under multi-worker training the workers vote after every update, so
    that a listener's wish or a signal to any of them stops all of them
    after the same update (`_cluster_stops`); a resumed run tells its
    listeners of the checkpoint it starts from here, where they can vote.
    """
    micro_batch = self._graphs.micro_batch_size()
    log_meter, summary_meter = _Meter(), _Meter()
    start_time = last_save_time = last_log_time = time.time()
    step, micro_step = start_step, skip
    saved = (step, micro_step)
    with checkpointing.StopRequests() as stop:
      if save_first:
        # A new run saves its starting point, as tf.estimator did: a folder
        # that cannot take a checkpoint fails before the first step, and
        # TensorFlow's first save, which grows the C heap for good, runs
        # before the step's tensors exist instead of on top of them.
        self._save(sess, built, step)
      elif (built.stop_vote is not None and self._needs_checkpoint(step) and
            self._vote(sess, built,
                       self._listeners_stop(stop, step, max_steps), False)[0]):
        # A resumed multi-worker run, whose workers vote on it together
        # (a single process asked its listeners before building this).
        return
      while step < max_steps:
        values = self._run_train_step(step_fns, micro_step)
        if values is None:
          logging.info("Input data ended at step %d.", step)
          break
        micro_step = int(values["micro_step"])
        self._check_finite(values, step + 1, micro_step)
        log_meter.add(values["loss"], micro_batch)
        summary_meter.add(values["loss"], micro_batch)
        if micro_step % self._config.num_accumulation_steps:
          continue  # a micro-batch of an update still being accumulated
        updated, step = step != values["global_step"], int(
            values["global_step"])
        listened = updated and self._needs_checkpoint(step)
        if (stop.signum is not None or listened or
            (updated and step % self._config.save_checkpoints_steps == 0) or
            self._save_is_due_by_time(last_save_time)):
          self._save(sess, built, step)
          saved, last_save_time = (step, micro_step), time.time()
        if stop.signum is not None and built.stop_vote is None:
          raise self._interrupted(stop.signum, step, max_steps)
        # fp16's loss scaling may have skipped the update: nothing to log.
        if updated and (step % self._config.log_step_count_steps == 0 or
                        step >= max_steps or
                        self._log_is_due_by_time(last_log_time)):
          self._log_progress(log_meter, values, step, max_steps,
                             (time.time() - start_time) / (step - start_step))
          last_log_time = time.time()
        if updated and (step % self._config.save_summary_steps == 0 or
                        step >= max_steps):
          self._write_summaries(summary_meter, values, step, writer)
        stops = listened and self._listeners_stop(stop, step, max_steps)
        if built.stop_vote is not None:
          stops = self._cluster_stops(sess, built, stop, saved,
                                      (step, micro_step), max_steps, stops)
        if stops:
          break
      if saved != (step, micro_step):
        # Inside the context: a signal during this last save waits for it.
        self._save(sess, built, step)
      if stop.signum is not None:
        raise self._interrupted(stop.signum, step, max_steps)

  def _interrupted(self, signum, step, max_steps):
    """The exception that ends training on `signum`, once step `step` is
    saved (by the chief: another worker names the checkpoint the chief
    writes)."""
    return failures.TrainingInterrupted(
        "Training stopped by %s at step %d/%d; checkpoint %s holds it. "
        "Run the same command again to resume." % (
            signal.Signals(signum).name, step, max_steps,
            os.path.join(self._model_dir, "%s-%d" % (
                checkpoint_checks.CHECKPOINT_BASENAME, step))), signum)

  def _log_is_due_by_time(self, last_log_time):
    secs = self._config.log_step_count_secs
    return secs is not None and time.time() - last_log_time >= secs

  def _save_is_due_by_time(self, last_save_time):
    secs = self._config.save_checkpoints_secs
    return secs is not None and time.time() - last_save_time >= secs

  # ----------------------------------------------------- progress, summaries

  def _log_progress(self, meter, values, step, max_steps, secs_per_step):
    parts = ["step %d/%d (%.1f%%)" % (step, max_steps,
                                      100.0 * step / max_steps),
             "loss = %.4f" % meter.mean_loss()]
    if "learning_rate" in values:
      parts.append("lr = %.1e" % values["learning_rate"])
    parts.append("%.1f examples/sec" % meter.examples_per_sec())
    logging.info("%s, %s left", ", ".join(parts),
                 _format_left(secs_per_step * (max_steps - step)))
    meter.reset()

  def _write_summaries(self, meter, values, step, writer):
    if writer is None:
      meter.reset()
      return
    scalars = {"loss": meter.mean_loss(),
               "examples_per_sec": meter.examples_per_sec()}
    for key in ("learning_rate", "loss_scale"):
      if key in values:
        scalars[key] = values[key]
    with disk_space.writing(
        self._model_dir, "TensorBoard summaries %s" % os.path.basename(
            writer.path), size=lambda: writer.pending_bytes,
        partial=lambda entry: False, flag="--output_dir",
        then=self._resume_point):
      summaries.scalar_summary(scalars, step, writer)
    meter.reset()
