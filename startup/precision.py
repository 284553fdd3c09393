# coding=utf-8
"""The precision a run computes in, and what the hardware says about it.

--precision=auto becomes bf16 where the hardware computes bfloat16 natively
(a CPU with AVX512_BF16 or AMX, a GPU of compute capability 8.0 or more) and
fp32 elsewhere. A run that only evaluates, predicts or exports, without
--precision, computes in the precision its model was trained in where that
is fast here (run_info.json records it), else in fp32. fp16 is refused on a
machine without a GPU; bf16 is refused where the environment turned on CPU
kernels that abort on it, and noted where the CPU has no fast path for it.
"""

import dataclasses
import os

from absl import logging
import tensorflow as tf

from checkpoints import run_info
from engine import tf_internals
from hardware import cpu
from userio import cli
from userio import quiet_tensorflow

# The compute capability from which a GPU has bfloat16 tensor cores
# (Ampere); --precision=auto picks bf16 there.
BF16_GPU_CAPABILITY = (8, 0)


def precision_note(precision, features):
  """One line when --precision has no fast path on a CPU with `features`
  (hardware/cpu.cpu_features), naming the faster precision; None otherwise
  (fp32 is always fast; fp16 on a CPU is refused by `check_flags`)."""
  if precision == "bf16" and not cpu.native_bf16_features(features):
    return ("Note: this CPU has no fast bfloat16 path (no AVX512_BF16 or "
            "AMX in %s), so --precision=bf16 runs slower here than "
            "--precision=fp32, which would be faster; bf16 still halves the "
            "activation memory." % cpu.CPUINFO_FILE)
  return None


def note_slow_precision(precision):
  """Logs `precision_note` for a run on the CPU (no GPU visible)."""
  if precision != "bf16" or tf.config.list_physical_devices("GPU"):
    return
  note = precision_note(precision, cpu.cpu_features())
  if note:
    logging.info("%s", note)


def resolve_precision(precision, features, gpus):
  """--precision with auto resolved: bf16 where the hardware has a native
  bfloat16 path, else fp32.

  Args:
    precision: the flag's value (fp32, fp16, bf16 or auto).
    features: the CPU's feature flags (hardware/cpu.cpu_features).
    gpus: the (major, minor) compute capabilities of the visible GPUs
      (gpu_capabilities(); empty: none); with GPUs they decide, all of them
      at least BF16_GPU_CAPABILITY for bf16.

  Returns:
    (precision, reason): the precision to run with and, for auto, why it
    was chosen (e.g. "AVX512_BF16"); reason is None for the other values.
  """
  if precision != cpu.AUTO_PRECISION:
    return precision, None
  if not gpus:
    return cpu.auto_precision(features)
  lowest = min(gpus)
  if lowest >= BF16_GPU_CAPABILITY:
    return "bf16", "GPU compute capability %d.%d" % lowest
  return "fp32", "GPU compute capability %d.%d, below %d.%d" % (
      lowest + BF16_GPU_CAPABILITY)


def gpu_capabilities():
  """The (major, minor) compute capability of each visible GPU ((0, 0)
  where TensorFlow does not say)."""
  return [tuple(tf.config.experimental.get_device_details(gpu).get(
      "compute_capability") or (0, 0))
          for gpu in tf.config.list_physical_devices("GPU")]


def precision_as_trained(trained, features, gpus, environ):
  """The precision of a run that does not train, has no --precision and
  reads a model trained in `trained`: that one where the hardware has a
  fast path for it, else fp32.

  Args:
    trained: the precision run_info.json records (None: not recorded).
    features, gpus: as for `resolve_precision`.
    environ: the environment TensorFlow loaded with (cpu.conflict).

  Returns:
    (precision, reason): reason, for the Settings line, is None when
    `trained` is fp32 or unknown.
  """
  if trained in (None, "fp32"):
    return "fp32", None
  if trained == "fp16":  # refused on CPUs (check_precision)
    return ("fp16", "as trained") if gpus else (
        "fp32", "trained in fp16, which needs a GPU")
  fast, why = resolve_precision(cpu.AUTO_PRECISION, features, gpus)
  if fast == "bf16" and (gpus or not cpu.conflict(features, trained,
                                                   environ)):
    return trained, "as trained"
  return "fp32", ("trained in bf16, not fast here: %s; --precision=bf16 "
                  "keeps it" % (why if fast != "bf16"
                                else "CPU kernels without bf16"))


def resolve_precision_flag(shared, *, do_train):
  """`shared` with its precision settled for this machine: --precision=auto
  resolved, and a run that does not train and was given no --precision
  computing as its folder's model trained (`precision_as_trained`); the
  reason goes to its precision_reason field."""
  if (not do_train and "precision" in shared.defined and
      "precision" not in shared.given and shared.output_dir):
    trained = (run_info.read(shared.output_dir) or {}).get(
        run_info.PRECISION_FIELD)
    precision, reason = precision_as_trained(
        trained, cpu.cpu_features(), gpu_capabilities(), os.environ)
  else:
    precision, reason = resolve_precision(
        shared.precision, cpu.cpu_features(), gpu_capabilities())
    reason = reason and "auto: " + reason
  if reason is None:
    return shared
  return dataclasses.replace(shared, precision=precision,
                             precision_reason=reason)


def check_cpu_kernels(precision):
  """Refuses bf16 where the environment turned on CPU kernels that abort
  on it (hardware/cpu.conflict); a run on GPUs is not concerned."""
  if precision != "bf16" or tf.config.list_physical_devices("GPU"):
    return
  problem = cpu.conflict(cpu.cpu_features(), precision, os.environ)
  if problem:
    raise cli.UserError(problem)


def log_cpu_kernels():
  """Logs the line of the CPU kernels this process loaded TensorFlow with
  (userio/quiet_tensorflow.py), when it chose them."""
  if quiet_tensorflow.CPU_KERNELS is not None:
    logging.info("%s", quiet_tensorflow.CPU_KERNELS.line)


def check_precision(precision):
  """fp16 has no fast kernels on CPUs: refused unless a GPU is present."""
  if precision != "fp16":
    return
  if tf_internals.gpu_memory_limits() == {}:  # None: a GPU of unknown size.
    raise cli.UserError(
        "--precision=fp16 on a machine without a GPU: CPUs run float16 far "
        "slower than float32. Use --precision=bf16 (fast on CPUs with "
        "AVX-512 or AMX) or --precision=fp32.")

