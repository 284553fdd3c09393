# coding=utf-8
"""The places where this project reaches into TensorFlow's private API.

Each function names the internal it uses, falls back to a public API when the
internal is gone, and `check()` reports which internals this TensorFlow still
has (tests/test_tf_internals.py fails with that report when one disappears,
so a TensorFlow upgrade shows here first, not as a slower or failing run).
"""

import logging

import tensorflow as tf

_log = logging.getLogger(__name__)


def _callable_options_class():
  """TensorFlow's CallableOptions protobuf class, or None."""
  try:
    from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  except ImportError:
    return None
  return getattr(config_pb2, "CallableOptions", None)


def prepared_callable(sess, target, fetches):
  """A function running `target` and returning the values of `fetches`.

  With `Session._make_callable_from_options` the session prunes, optimizes
  and partitions the graph for these fetches now, so the first call runs the
  step alone (the runner hands the construction's scratch memory back to the
  system in between). The public `Session.make_callable` does the same work
  inside its first call; it is the fallback.

  Args:
    sess: a tf.compat.v1.Session.
    target: an op (or tensor) to run for its effect.
    fetches: list of tensors.

  Returns:
    callable() -> list of numpy values, one per fetch.
  """
  options_class = _callable_options_class()
  make = getattr(sess, "_make_callable_from_options", None)
  if options_class is None or make is None:
    _log.warning("TensorFlow has no Session._make_callable_from_options; "
                 "steps run through Session.make_callable.")
    run = sess.make_callable(list(fetches), [getattr(target, "op", target)])
    return lambda: list(run())
  options = options_class(target=[getattr(target, "op", target).name],
                          fetch=[tensor.name for tensor in fetches])
  return make(options)


def gpu_memory_limits():
  """{device name: bytes TensorFlow may allocate} of the local GPUs.

  The public `tf.config` API tells a GPU's current and peak use but not its
  size; `device_lib.list_local_devices` does. Returns None when that module
  is gone (the caller then asks for --device_memory_gb).
  """
  if not tf.config.list_physical_devices("GPU"):
    return {}
  try:
    from tensorflow.python.client import device_lib  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  except ImportError:
    return None
  return {device.name: int(device.memory_limit)
          for device in device_lib.list_local_devices()
          if device.device_type == "GPU"}


def default_session_config():
  """A copy of the ConfigProto a tf.compat.v1.Session gets when given none.

  That config carries what `tf.config` set up before (virtual CPU devices,
  thread counts, optimizer options); a session given any other config loses
  them. It comes from TensorFlow's eager context (`context.context().config`,
  private). Returns None when that is gone: the caller then passes no config
  and cannot add options to TensorFlow's.
  """
  try:
    from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
    config = context.context().config
  except (ImportError, AttributeError):
    return None
  copy = tf.compat.v1.ConfigProto()
  copy.CopyFrom(config)
  return copy


def _coordination_config_module():
  """TensorFlow's CoordinationServiceConfig protobuf module, or None."""
  try:
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  except ImportError:
    return None
  return coordination_config_pb2


def bound_cluster_start(jobs, leader, timeout_secs):
  """Makes a multi-worker strategy made next give up after `timeout_secs`
  when the tasks of `jobs` ({job: number of tasks}, with `leader` the
  coordination service's task, e.g. "/job:worker/replica:0/task:0") have
  not all registered with the coordination service, rather than wait
  without end.

  The strategy configures that service itself, with no timeout, unless one
  is configured already; this configures it first the same way, with the
  timeout (`context.context().configure_coordination_service`, private).
  Returns whether it could: without it, the strategy waits as it does.
  """
  proto = _coordination_config_module()
  try:
    from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
    configure = context.context().configure_coordination_service
  except (ImportError, AttributeError):
    return False
  if proto is None:
    return False
  configure(service_type="standalone", service_leader=leader,
            coordinated_jobs=[proto.CoordinatedJob(name=job, num_tasks=count)
                              for job, count in sorted(jobs.items())],
            cluster_register_timeout_in_ms=int(timeout_secs * 1000))
  return True


def check():
  """Names of the private TensorFlow internals this TensorFlow lacks."""
  missing = []
  if _callable_options_class() is None:
    missing.append("tensorflow.core.protobuf.config_pb2.CallableOptions")
  if not hasattr(tf.compat.v1.Session, "_make_callable_from_options"):
    missing.append("tf.compat.v1.Session._make_callable_from_options")
  try:
    from tensorflow.python.client import device_lib  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
    if not hasattr(device_lib, "list_local_devices"):
      missing.append("device_lib.list_local_devices")
  except ImportError:
    missing.append("tensorflow.python.client.device_lib")
  if default_session_config() is None:
    missing.append("tensorflow.python.eager.context.context().config")
  if _coordination_config_module() is None:
    missing.append("tensorflow.compiler.xla.tsl.protobuf."
                   "coordination_config_pb2")
  try:
    from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
    if not hasattr(context.context(), "configure_coordination_service"):
      missing.append("context.context().configure_coordination_service")
  except ImportError:
    missing.append("tensorflow.python.eager.context")
  return missing
