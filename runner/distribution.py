# coding=utf-8
"""The tf.distribute strategy of --distribution and --devices.

`check_flags` refuses a combination that cannot work (and a malformed
TF_CONFIG for multi_worker) without starting anything; `make_distribution`
makes the strategy the runner trains with (runner/training_loop.py),
splitting the CPU into logical devices when --devices asks for several
CPUs.
"""

import json
import os
import socket

import tensorflow as tf

from engine import tf_internals
from userio import cli
from userio import native_errors

_TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
    '"task": {"type": "worker", "index": 0}}')


def make_distribution(distribution, devices=None, worker_wait_secs=300):
  """The tf.distribute strategy --distribution asks for, or None.

  Args:
    distribution: --distribution, one of shared_flags.DISTRIBUTIONS.
    devices: --devices, a list of device names, or None.
    worker_wait_secs: with multi_worker, how long to wait for every task
      of TF_CONFIG to start.

  Raises:
    cli.UserError naming the flag (or TF_CONFIG) and the fix.
  """
  check_flags(distribution, devices)
  if distribution == "none":
    return None
  if distribution == "mirrored":
    return tf.compat.v1.distribute.MirroredStrategy(
        devices=_mirrored_devices(devices))
  return _multi_worker_strategy(worker_wait_secs)


def _multi_worker_strategy(wait_secs):
  """The multi-worker strategy of TF_CONFIG, made once every task of its
  cluster has started, or cli.UserError after `wait_secs` seconds.

  Making it starts this task's server and waits until every task has
  registered with the coordination service (led by the chief, else worker
  0). TensorFlow's own lines about a failed wait (errors of its native
  code, several, one more at the process's end) say what the one line
  says: they are dropped then, kept otherwise.
  """
  cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
  jobs = {job: len(cluster[job]) for job in ("chief", "worker")
          if cluster.get(job)}
  tf_internals.bound_cluster_start(
      jobs, "/job:%s/replica:0/task:0" % ("chief" if "chief" in jobs
                                          else "worker"), wait_secs)
  with native_errors.held() as held:
    try:
      return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
    except tf.errors.DeadlineExceededError:
      held.drop_and_silence()
      missing = [address for address in other_addresses()
                 if not accepts(address)]
      raise cli.UserError(
          "--distribution=multi_worker: %s within --worker_wait_secs=%d. "
          "Start the same command on every worker of TF_CONFIG (each with "
          "its own task index), or raise --worker_wait_secs." % (
              "%s did not answer" % ", ".join(missing) if missing else
              "the workers of TF_CONFIG did not all start", wait_secs)
      ) from None


def is_chief_task(distribution):
  """Whether this process is the one that writes the run's files: always,
  but under multi_worker, where it is TF_CONFIG's "chief" task, else
  worker 0 (what the strategy's should_checkpoint says once made; this
  reads TF_CONFIG alone, before anything starts). TF_CONFIG is checked."""
  if distribution != "multi_worker":
    return True
  config = json.loads(os.environ["TF_CONFIG"])
  task = config["task"]
  if task["type"] == "chief":
    return True
  return not config["cluster"].get("chief") and int(task["index"]) == 0


def other_addresses():
  """host:port of every task of TF_CONFIG's cluster but this one."""
  config = json.loads(os.environ["TF_CONFIG"])
  own = config["cluster"][config["task"]["type"]][int(config["task"][
      "index"])]
  return [address for job in ("chief", "worker")
          for address in config["cluster"].get(job, []) if address != own]


def accepts(address):
  """Whether host:port accepts a TCP connection now."""
  host, port = address.rsplit(":", 1)
  try:
    with socket.create_connection((host, int(port)), timeout=2.0):
      return True
  except OSError:
    return False


def check_flags(distribution, devices=None):
  """--distribution, --devices and TF_CONFIG agree (nothing is started)."""
  if distribution == "none":
    if devices:
      raise cli.UserError("--devices=%s needs --distribution=mirrored." %
                          ",".join(devices))
  elif distribution == "multi_worker":
    if devices:
      raise cli.UserError("--devices applies to --distribution=mirrored "
                          "only; multi_worker uses each worker's default "
                          "device.")
    _check_tf_config(os.environ.get("TF_CONFIG"))


def _mirrored_devices(devices):
  """--devices checked against this machine (default: all local GPUs).

  CPUs /cpu:1, /cpu:2, ... do not exist by default; asking for them splits
  the one physical CPU into that many logical devices, which TensorFlow
  allows only before it first runs anything.
  """
  if not devices:
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    if len(devices) < 2:
      raise cli.UserError(
          "--distribution=mirrored found %d GPU(s); pass --devices (e.g. "
          "--devices=/cpu:0,/cpu:1) or use --distribution=none." %
          len(devices))
    return devices
  specs = [_device_spec("devices", d) for d in devices]
  cpus = [spec for spec in specs if spec.device_type == "CPU"]
  if len(cpus) > 1:
    _split_cpu(max(spec.device_index or 0 for spec in cpus) + 1)
  known = {(spec.device_type, spec.device_index) for spec in
           (tf.DeviceSpec.from_string(d.name)
            for d in tf.config.list_logical_devices())}
  missing = [d for d, spec in zip(devices, specs)
             if (spec.device_type, spec.device_index or 0) not in known]
  if missing:
    raise cli.UserError(
        "--devices: %s not found on this machine (it has %s)." %
        (", ".join(missing),
         ", ".join(d.name for d in tf.config.list_logical_devices())))
  return devices


def _device_spec(flag_name, device):
  """tf.DeviceSpec of a device name like /gpu:0 (type upper-cased)."""
  try:
    spec = tf.DeviceSpec.from_string(device)
  except ValueError:
    spec = None
  if spec is None or not spec.device_type:
    raise cli.UserError("--%s: %r is not a device name like /gpu:0 or "
                        "/cpu:1." % (flag_name, device))
  return spec.replace(device_type=spec.device_type.upper())


def _split_cpu(count):
  """Makes `count` logical CPU devices (if there are fewer)."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  configured = tf.config.get_logical_device_configuration(cpu) or [None]
  if len(configured) >= count:
    return
  try:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * count)
  except RuntimeError as e:
    raise cli.UserError(
        "--devices asks for %d CPUs, but TensorFlow was initialized before "
        "the CPU could be split: %s" % (count, e)) from None


def _check_tf_config(tf_config):
  """Validates the TF_CONFIG environment variable for multi_worker."""
  fix = ("Set TF_CONFIG on every worker to JSON like %s, with this worker's "
         "own task index." % _TF_CONFIG_EXAMPLE)
  if not tf_config:
    raise cli.UserError("--distribution=multi_worker needs the TF_CONFIG "
                        "environment variable. " + fix)
  try:
    config = json.loads(tf_config)
    cluster, task = config["cluster"], config["task"]
    workers = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    task_type, index = task["type"], int(task["index"])
    addresses = cluster[task_type]
    address = addresses[index]
  except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
    raise cli.UserError("TF_CONFIG=%s is malformed (%s: %s). %s" %
                        (tf_config, type(e).__name__, e, fix)) from None
  if task_type not in ("chief", "worker") or not workers or ":" not in str(
      address):
    raise cli.UserError("TF_CONFIG=%s: the task must be a \"chief\" or "
                        "\"worker\" with a host:port address. %s" %
                        (tf_config, fix))
