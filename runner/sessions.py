# coding=utf-8
"""The sessions the runner runs its graphs in.

Every session is made with place_pruned_graph, so that it places only the
parts of the graph it runs (a step, the initializers, a save) rather than a
placed copy of the whole graph. A multi-worker training session targets
this worker's gRPC server, which the strategy started.
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import tensorflow as tf

from engine import tf_internals


def session(config, graph):
  """A session for `graph` with RunConfig `config`'s session settings."""
  return tf.compat.v1.Session(graph=graph, config=_session_config(config))


def _session_config(config):
  """RunConfig's session_config (else TensorFlow's default) with
  place_pruned_graph: the session then places and keeps only the parts of
  the graph it runs, instead of a placed copy of all of it (the Saver's
  restore ops, the initializers, ...), which lowers the process's peak
  (docs/results.md, "Whole-process peak of run_classifier.py"). None
  (TensorFlow's default, unchanged) when the default cannot be read."""
  if config.session_config is not None:
    session_config = tf.compat.v1.ConfigProto()
    session_config.CopyFrom(config.session_config)
  else:
    session_config = tf_internals.default_session_config()
    if session_config is None:
      return None
  session_config.graph_options.place_pruned_graph = True
  return session_config


def multi_worker(config):
  """Whether training spans several processes (TF_CONFIG's cluster)."""
  strategy = config.distribution
  resolver = strategy and strategy.cluster_resolver
  return resolver is not None and bool(resolver.cluster_spec().jobs)


def train_session(config, graph):
  """A session for the training graph.

  A multi-worker strategy's collectives reach the other workers through
  this worker's gRPC server (which the strategy started), so the session
  targets it with the strategy's settings.
  """
  if not multi_worker(config):
    return session(config, graph)
  strategy = config.distribution
  resolver = strategy.cluster_resolver
  address = resolver.cluster_spec().task_address(resolver.task_type,
                                                 resolver.task_id)
  session_config = strategy.update_config_proto(
      config.session_config or tf.compat.v1.ConfigProto())
  return tf.compat.v1.Session(target="grpc://" + address, graph=graph,
                              config=session_config)
