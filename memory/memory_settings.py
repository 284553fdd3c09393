# coding=utf-8
"""Precision, checkpointing, micro-batch and accumulation of a training run.

`resolve` turns the values of the memory flags (--precision,
--gradient_checkpointing, --micro_batch_size, --device_memory_gb,
--num_accumulation_steps with --train_batch_size) into the `MemorySettings`
a run uses, asking the step's memory model (memory/memory_model.py,
`BertMemory` by default) for a plan when --micro_batch_size=auto.
`accumulation_steps` is the one place where the accumulation steps are
derived and checked; the runner's Estimator calls it too. Calls go one way:
this module asks memory/memory_model.py, never the reverse. The words of
an out-of-memory failure are memory/out_of_memory.py's.
"""

import collections
import math

from absl import logging
import tensorflow as tf

from userio import cli
from engine import tf_internals
from memory import memory_model
from userio import units

AUTO = "auto"
MEMINFO = "/proc/meminfo"
_COMPUTE_DTYPES = {"fp32": tf.float32, "fp16": tf.float16,
                   "bf16": tf.bfloat16}

DeviceMemory = collections.namedtuple("DeviceMemory", ["bytes", "source"])


class Replicas(collections.namedtuple("Replicas",
                                     ["total", "local", "per_memory"])):
  """How the replicas of a data-parallel run share memory.

  Fields:
    total: replicas training in sync, over all workers; each holds its own
      copy of the weights, gradients and optimizer slots, and 1/total of
      every micro-batch.
    local: the replicas of this process (fewer than `total` with
      multi_worker).
    per_memory: replicas of this process that share one memory: the
      logical CPU devices of a process share its RAM, every GPU has its own
      (1).
  """


ONE_DEVICE = Replicas(1, 1, 1)


def replicas_of(distribution):
  """Replicas of a tf.distribute strategy (ONE_DEVICE for None)."""
  if distribution is None:
    return ONE_DEVICE
  devices = distribution.extended.worker_devices
  cpus = sum(1 for device in devices
             if tf.DeviceSpec.from_string(device).device_type == "CPU")
  return Replicas(distribution.num_replicas_in_sync, len(devices),
                  max(1, cpus))


def device_kind(distribution):
  """memory_model.GPU or memory_model.CPU: what runs the training steps,
  the strategy's worker devices, or without one a GPU when TensorFlow sees
  one. The planner's time model depends on it."""
  if distribution is None:
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
  else:
    on_gpu = any(tf.DeviceSpec.from_string(device).device_type == "GPU"
                 for device in distribution.extended.worker_devices)
  return memory_model.GPU if on_gpu else memory_model.CPU


class MemorySettings(collections.namedtuple(
    "MemorySettings", ["precision", "micro_batch_size",
                       "num_accumulation_steps", "gradient_checkpointing",
                       "device", "replicas", "device_kind"],
    defaults=(ONE_DEVICE, memory_model.GPU))):
  """What a run uses.

  Fields:
    precision: "fp32", "fp16" or "bf16".
    micro_batch_size: examples per session.run of the train op, over all
      replicas.
    num_accumulation_steps: micro-batches per optimizer update.
    gradient_checkpointing: bool.
    device: DeviceMemory (bytes, where the number comes from) or None when
      it could not be found out. The bytes are shared by
      `replicas.per_memory` replicas.
    replicas: Replicas of the run (ONE_DEVICE by default).
    device_kind: memory_model.GPU (default) or CPU, the time model the
      planner ranks plans by (`device_kind`).
  """

  @property
  def replica_micro_batch_size(self):
    """Examples of a micro-batch on one replica."""
    return self.micro_batch_size // self.replicas.total

  @property
  def replica_memory(self):
    """DeviceMemory one replica may use, or None when unknown."""
    if self.device is None:
      return None
    return _replica_memory(self.device, self.replicas)

  @property
  def replica_memory_bytes(self):
    """The bytes of `replica_memory`, or None when unknown."""
    memory = self.replica_memory
    return None if memory is None else memory.bytes

  @property
  def compute_dtype(self):
    """The tf.DType of BERT's activations."""
    return _COMPUTE_DTYPES[self.precision]

  def describe(self):
    """E.g. "micro-batch 4 x 8 accumulation steps, --precision=fp32, ..."."""
    steps = self.num_accumulation_steps
    split = ""
    if self.replicas.total > 1:
      split = " (%d per replica on %d replicas)" % (
          self.replica_micro_batch_size, self.replicas.total)
    return ("micro-batch %d%s x %d accumulation step%s, --precision=%s, "
            "gradient checkpointing %s" % (
                self.micro_batch_size, split, steps,
                "" if steps == 1 else "s", self.precision,
                "on" if self.gradient_checkpointing else "off"))


def _replica_memory(device, replicas):
  """DeviceMemory of one replica: the device's own, or its share of the RAM
  that the CPU replicas of a process share."""
  if replicas.per_memory == 1:
    return device
  return DeviceMemory(
      device.bytes / replicas.per_memory,
      "%s, %.2f GiB shared by %d CPU replicas" % (
          device.source, device.bytes / units.GIB, replicas.per_memory))


def describe_memory(memory):
  """E.g. "12.00 GiB (--device_memory_gb=12)"."""
  return "%.2f GiB (%s)" % (memory.bytes / units.GIB, memory.source)


# ------------------------------------------------------------ device memory


def available_ram(meminfo_path=MEMINFO):
  """DeviceMemory of MemAvailable in `meminfo_path`, or None if unreadable."""
  try:
    with open(meminfo_path) as f:
      for line in f:
        key, _, value = line.partition(":")
        if key == "MemAvailable":
          # /proc/meminfo counts in KiB although it writes "kB".
          return DeviceMemory(
              int(value.split()[0]) * 1024,
              "no GPU: the RAM available now, MemAvailable in %s" %
              meminfo_path)
  except (OSError, ValueError, IndexError):
    return None
  return None


def _smallest_gpu_memory():
  """The GPU with the least memory bounds what every replica may use."""
  limits = tf_internals.gpu_memory_limits()
  if not limits:
    return None
  name = min(limits, key=limits.get)
  return DeviceMemory(
      limits[name],
      "GPU %s, the memory TensorFlow may allocate on it%s" % (
          name, " (the smallest of %d GPUs)" % len(limits)
          if len(limits) > 1 else ""))


def device_memory(device_memory_gb=None):
  """The memory of a device: --device_memory_gb, the GPUs', or the RAM.

  Returns:
    DeviceMemory(bytes, source) or None when it cannot be found out.
  """
  if device_memory_gb is not None:
    if not (math.isfinite(device_memory_gb) and device_memory_gb > 0):
      raise cli.UserError("--device_memory_gb=%s must be positive (GiB of the "
                       "device, e.g. 12 or 16)." % device_memory_gb)
    return DeviceMemory(int(device_memory_gb * units.GIB),
                        "--device_memory_gb=%g" % device_memory_gb)
  if tf.config.list_physical_devices("GPU"):
    return _smallest_gpu_memory()
  return available_ram()


# ------------------------------------------------------------------ resolve


def parse_micro_batch_size(value):
  """None (flag empty), AUTO, or a positive int; UserError otherwise."""
  text = (value or "").strip().lower()
  if not text:
    return None
  if text == AUTO:
    return AUTO
  if not text.isdigit() or int(text) < 1:
    raise cli.UserError("--micro_batch_size=%s must be empty, a positive "
                        "integer or auto." % value)
  return int(text)


def accumulation_steps(train_batch_size, micro_batch_size=None,
                       num_accumulation_steps=None, replicas=ONE_DEVICE):
  """The accumulation steps of a run; the one place they are derived.

  Args:
    train_batch_size: --train_batch_size, examples per update over all
      replicas.
    micro_batch_size: examples per micro-batch (--micro_batch_size, or the
      planner's choice), or None to take `num_accumulation_steps`.
    num_accumulation_steps: --num_accumulation_steps if the command line set
      it (or RunConfig's, for the Estimator), else None (1).
    replicas: Replicas of the run.

  Returns:
    int k >= 1 with train_batch_size = k * micro-batch, the micro-batch
    splitting evenly over the replicas.

  Raises:
    cli.UserError naming the flags to change.
  """
  batch = train_batch_size
  if batch < 1:
    raise cli.UserError("--train_batch_size=%d must be at least 1." % batch)
  if micro_batch_size is None:
    steps = _steps_of_flag(batch, num_accumulation_steps)
    micro = batch // steps
    if micro % replicas.total:
      raise cli.UserError(
          "--train_batch_size=%d / --num_accumulation_steps=%d gives "
          "micro-batches of %d examples, which do not split evenly over the "
          "%d replicas of --distribution; choose a --train_batch_size that "
          "is a multiple of %d (accumulation steps x replicas)." % (
              batch, steps, micro, replicas.total, steps * replicas.total))
    return steps
  steps = _steps_of_micro_batch(batch, micro_batch_size,
                                num_accumulation_steps)
  if micro_batch_size % replicas.total:
    raise cli.UserError(
        "A micro-batch of %d examples (--train_batch_size=%d / %d "
        "accumulation steps) does not split evenly over the %d replicas of "
        "--distribution; make the micro-batch a multiple of %d." % (
            micro_batch_size, batch, steps, replicas.total, replicas.total))
  return steps


def _steps_of_flag(batch, num_accumulation_steps):
  """--num_accumulation_steps (1 when not given), checked against the
  batch."""
  steps = 1 if num_accumulation_steps is None else num_accumulation_steps
  if steps < 1:
    raise cli.UserError("--num_accumulation_steps=%d must be at least 1."
                        % steps)
  if batch % steps:
    raise cli.UserError(
        "--train_batch_size=%d is not a multiple of "
        "--num_accumulation_steps=%d; choose accumulation steps that "
        "divide the batch." % (batch, steps))
  return steps


def _steps_of_micro_batch(batch, micro_batch_size, num_accumulation_steps):
  """The steps a micro-batch size makes of the batch; a given
  --num_accumulation_steps must agree."""
  if batch % micro_batch_size:
    raise cli.UserError(
        "--micro_batch_size=%d does not divide --train_batch_size=%d; "
        "choose a divisor of --train_batch_size." % (micro_batch_size,
                                                     batch))
  steps = batch // micro_batch_size
  if num_accumulation_steps is not None and num_accumulation_steps != steps:
    raise cli.UserError(
        "--micro_batch_size=%d with --train_batch_size=%d means %d "
        "accumulation steps, but --num_accumulation_steps=%d was given; "
        "drop one of the two flags." % (micro_batch_size, batch, steps,
                                       num_accumulation_steps))
  return steps


def _replica_batch_size(train_batch_size, replicas):
  """--train_batch_size / replicas; UserError when it does not split."""
  if train_batch_size % replicas.total:
    raise cli.UserError(
        "--train_batch_size=%d does not split evenly over the %d replicas "
        "of --distribution; choose a multiple of %d." % (
            train_batch_size, replicas.total, replicas.total))
  return train_batch_size // replicas.total


def plan_for_replicas(model, train_batch_size, replicas, memory_bytes,
                      precision, allow_checkpointing, kind=memory_model.GPU):
  """The step memory model's plan for one replica (its share of
  `train_batch_size` in `memory_bytes`, the fastest on a device of `kind`),
  its micro-batch made global; None when not even one example fits."""
  found = model.plan(_replica_batch_size(train_batch_size, replicas),
                     memory_bytes, precision, allow_checkpointing,
                     device=kind)
  if found is None:
    return None
  return found._replace(micro_batch=found.micro_batch * replicas.total)


def fastest_for_replicas(model, plans, replicas, kind=memory_model.GPU):
  """Of `plans` (`plan_for_replicas`'s, or None), the one the step memory
  model predicts fastest on a device of `kind`, ranking each replica's
  share; None if all are None."""
  shares = [None if found is None else
            found._replace(micro_batch=found.micro_batch // replicas.total)
            for found in plans]
  picked = model.fastest(shares, kind)
  return None if picked is None else plans[shares.index(picked)]


def estimate_bytes(model, settings):
  """The step memory model's peak for one replica of `settings`."""
  return model.estimate_bytes(
      settings.replica_micro_batch_size, settings.precision,
      settings.gradient_checkpointing, settings.num_accumulation_steps)


def _check_auto(num_accumulation_steps, device, device_memory_gb, replicas):
  """What --micro_batch_size=auto needs: no accumulation steps of its own,
  the device's memory, and the same memory on every CPU worker."""
  if num_accumulation_steps is not None:
    raise cli.UserError(
        "--micro_batch_size=auto chooses the accumulation steps; drop "
        "--num_accumulation_steps=%d or give --micro_batch_size as an "
        "integer." % num_accumulation_steps)
  if device is None:
    raise cli.UserError(
        "--micro_batch_size=auto needs the device's memory, which could not "
        "be found out (no GPU and no readable %s); pass --device_memory_gb."
        % MEMINFO)
  if (replicas.total > replicas.local and device_memory_gb is None
      and not tf.config.list_physical_devices("GPU")):
    raise cli.UserError(
        "--micro_batch_size=auto with --distribution=multi_worker on CPUs "
        "needs --device_memory_gb, the same on every worker: the free RAM "
        "differs from machine to machine, and workers whose plans differ "
        "cannot train together.")


def _auto(model, request, device, replicas, kind):
  """The planner's settings for the device (never changing the precision).

  Each replica plans for its share of the micro-batch in its share of the
  memory: a GPU's own, or the RAM divided by the CPU replicas sharing it;
  the plan is the one predicted fastest on a device of `kind`. `request`
  holds the flag values `resolve` was given.
  """
  _check_auto(request.num_accumulation_steps, device,
              request.device_memory_gb, replicas)
  # An explicit --nogradient_checkpointing is honoured; otherwise the planner
  # turns checkpointing on when its plan is predicted faster (on a GPU) or
  # nothing fits without it.
  allow_checkpointing = request.gradient_checkpointing is not False
  memory = _replica_memory(device, replicas)
  found = plan_for_replicas(model, request.train_batch_size, replicas,
                            memory.bytes, request.precision,
                            allow_checkpointing, kind)
  if found is None:
    raise cli.UserError(
        "--micro_batch_size=auto: not even one example of --max_seq_length="
        "%d fits %s in --precision=%s%s. Lower --max_seq_length, use half "
        "precision or a smaller model, or set --device_memory_gb." %
        (request.max_seq_length, describe_memory(memory), request.precision,
         " with gradient checkpointing" if allow_checkpointing else ""))
  steps = accumulation_steps(request.train_batch_size, found.micro_batch,
                             None, replicas)
  settings = MemorySettings(
      request.precision, found.micro_batch, steps,
      found.gradient_checkpointing or bool(request.gradient_checkpointing),
      device, replicas, kind)
  logging.info("--micro_batch_size=auto: %s; planned peak %.2f GiB%s of "
               "%s; the fastest plan by the %s time model.",
               settings.describe(),
               estimate_bytes(model, settings) / units.GIB,
               " per replica" if replicas.total > 1 else "",
               describe_memory(memory), kind.upper())
  return settings


_Request = collections.namedtuple(
    "_Request", ["train_batch_size", "num_accumulation_steps", "precision",
                 "gradient_checkpointing", "device_memory_gb",
                 "max_seq_length"])


def resolve(model, *, train_batch_size, micro_batch_size,
            num_accumulation_steps, precision, gradient_checkpointing,
            device_memory_gb, max_seq_length, do_train, distribution=None):
  """The MemorySettings the memory flags ask for.

  Args:
    model: what a training step keeps in memory (memory_model.BertMemory or
      an object with its methods); asked only for --micro_batch_size=auto.
    train_batch_size: --train_batch_size.
    micro_batch_size: --micro_batch_size as typed ("", an integer or
      "auto").
    num_accumulation_steps: --num_accumulation_steps if the command line
      set it, else None.
    precision: --precision.
    gradient_checkpointing: --gradient_checkpointing if the command line
      set it (True or False), else None: off, unless auto needs it.
    device_memory_gb: --device_memory_gb, or None for the device's own.
    max_seq_length: --max_seq_length, named when nothing fits.
    do_train: whether the run trains (--micro_batch_size=auto plans only
      then).
    distribution: the run's tf.distribute strategy (startup.
      make_distribution), or None for one device.

  Returns:
    MemorySettings; micro_batch_size * num_accumulation_steps equals
    --train_batch_size.

  Raises:
    cli.UserError naming the flags to fix.
  """
  device = device_memory(device_memory_gb)
  replicas = replicas_of(distribution)
  kind = device_kind(distribution)
  requested = parse_micro_batch_size(micro_batch_size)
  if requested == AUTO and do_train:
    return _auto(model, _Request(
        train_batch_size, num_accumulation_steps, precision,
        gradient_checkpointing, device_memory_gb, max_seq_length), device,
                 replicas, kind)
  steps = accumulation_steps(
      train_batch_size, requested if isinstance(requested, int) else None,
      num_accumulation_steps, replicas if do_train else ONE_DEVICE)
  return MemorySettings(precision, train_batch_size // steps, steps,
                        bool(gradient_checkpointing), device, replicas, kind)
