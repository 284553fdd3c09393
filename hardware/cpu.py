# coding=utf-8
"""The CPU's feature flags, and the TensorFlow kernel settings they call for.

TensorFlow's x86 CPU kernels come in two families, Eigen's and oneDNN's.
Which one a process uses is fixed when TensorFlow loads, from the variable
TF_ENABLE_ONEDNN_OPTS (1: oneDNN, 0: Eigen); unset, TensorFlow picks oneDNN
only on CPUs with AVX-512-class neural-network features. So the choice has
to be made before the first `import tensorflow`: userio/quiet_tensorflow.py
asks `choose_kernels` just before it imports TensorFlow, with the
--precision of the command line (`requested_precision`), and imports it
inside `set_while_loading`.

What `kernel_settings` decides, when the user has not set the variable:

  * x86 CPU with AVX2 but without AVX-512, fp32: oneDNN, which trains and
    infers faster there than Eigen (docs/results.md, "CPU kernels on an
    AVX2 CPU").
  * x86 CPU without AVX-512, bf16: Eigen. oneDNN has no bfloat16 kernels
    below AVX-512: TensorFlow then falls back to Eigen's op by op, logging
    an error, and where ONEDNN_MAX_CPU_ISA caps oneDNN below AVX-512 on an
    AVX-512 CPU, TensorFlow still hands it the bfloat16 matmuls and the
    process aborts. Eigen runs bf16 by widening to float32 around each op,
    slower than fp32 there (startup/precision.py says so), but bf16 still
    halves the activation memory, so it is not refused.
  * Any other CPU (with AVX-512, or too old for AVX2, or no flags to read:
    not Linux, not x86): TensorFlow's own default.

A value the user gave TF_ENABLE_ONEDNN_OPTS is never changed; `conflict`
names the combination that runs badly or not at all (oneDNN on, bf16, no
AVX-512), which startup/precision.py refuses before the model is built.
oneDNN's own cap on the instructions it uses, ONEDNN_MAX_CPU_ISA, counts as
the CPU: capped at an AVX2 level, oneDNN behaves as on a CPU without
AVX-512.

The thread pools keep TensorFlow's defaults (docs/performance.md says
why).

This module imports nothing but the standard library, and no TensorFlow.
"""

import collections
import contextlib

CPUINFO_FILE = "/proc/cpuinfo"
# /proc/cpuinfo's names of the CPU features that give TensorFlow's oneDNN
# kernels a fast bfloat16 path (AVX-512 BF16, or AMX's tile unit); without
# them bf16 is converted to float32 and back around every op.
BF16_CPU_FEATURES = ("avx512_bf16", "amx_bf16")
# The variable TensorFlow reads once, at load, to choose its CPU kernels.
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# oneDNN's cap on the instruction sets it uses, and its values that stop
# below AVX-512.
ONEDNN_ISA_VARIABLE = "ONEDNN_MAX_CPU_ISA"
_ISAS_BELOW_AVX512 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
# How TensorFlow reads a boolean variable (case aside); other values it
# ignores with a warning.
_ENVIRON_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}
# --precision: the training scripts' default, and the value that lets the
# machine choose.
DEFAULT_PRECISION = "fp32"
AUTO_PRECISION = "auto"

KernelSettings = collections.namedtuple("KernelSettings", ["environ", "line"])
KernelSettings.__doc__ = """What `kernel_settings` decided.

Fields:
  environ: dict of the environment variables to set before TensorFlow
    loads (empty: TensorFlow's default, or the user's own setting, stays).
  line: "CPU kernels: ..." saying what runs and why, for the run's log.
"""


def cpu_features(cpuinfo_file=CPUINFO_FILE):
  """The feature flags of the first CPU listed in `cpuinfo_file` (a set;
  empty where the file is missing or lists none, e.g. off Linux)."""
  try:
    with open(cpuinfo_file, encoding="utf-8", errors="replace") as f:
      for line in f:
        name, _, value = line.partition(":")
        if name.strip() == "flags":
          return set(value.split())
  except OSError:
    pass
  return set()


def native_bf16_features(features):
  """The names in BF16_CPU_FEATURES that `features` has, in that order."""
  return [name for name in BF16_CPU_FEATURES if name in features]


def auto_precision(features):
  """What --precision=auto means on a CPU with `features` (no GPU).

  Returns:
    (precision, reason): ("bf16", e.g. "AVX512_BF16") where the CPU has a
    native bfloat16 path, else ("fp32", "no AVX512_BF16 or AMX").
  """
  native = native_bf16_features(features)
  if native:
    return "bf16", "/".join(name.upper() for name in native)
  return "fp32", "no AVX512_BF16 or AMX"


def requested_precision(args, default=DEFAULT_PRECISION):
  """The value of --precision among command-line `args` (sys.argv[1:]), or
  `default` (see `command_line_value`)."""
  return command_line_value(args, "precision", default)


def command_line_value(args, flag, default):
  """The value of --`flag` among command-line `args` (sys.argv[1:]), read
  as absl will read it (before absl does): --flag=X, --flag X, one dash or
  two, the last one counting, none after a bare "--". `default` when
  absent."""
  args = list(args)
  names = ("-" + flag, "--" + flag)
  value = default
  for i, arg in enumerate(args):
    if arg == "--":
      break
    name, equals, given = arg.partition("=")
    if name in names:
      if equals:
        value = given
      elif i + 1 < len(args):
        value = args[i + 1]
  return value


def _below_avx512(features, environ):
  """Whether oneDNN would run without AVX-512 on this x86 CPU: the CPU
  lacks it, or ONEDNN_MAX_CPU_ISA caps oneDNN below it. False when there
  are no flags to read (not x86 Linux: nothing known)."""
  if not features:
    return False
  isa = environ.get(ONEDNN_ISA_VARIABLE, "").strip().upper()
  return "avx512f" not in features or isa in _ISAS_BELOW_AVX512


def _cpu_precision(precision, features):
  """`precision` with auto resolved for the CPU."""
  if precision == AUTO_PRECISION:
    return auto_precision(features)[0]
  return precision


def kernel_settings(features, precision, environ):
  """The CPU kernels for a run (see the module docstring for the rules).

  Args:
    features: the CPU's feature flags (cpu_features()).
    precision: --precision as typed: fp32, fp16, bf16 or auto (auto as it
      resolves on this CPU); any other value counts as not bf16.
    environ: the environment (a mapping, only read).

  Returns:
    KernelSettings.
  """
  precision = _cpu_precision(precision, features)
  if ONEDNN_VARIABLE in environ:
    return KernelSettings({}, "CPU kernels: %s=%s, as set in the "
                          "environment." % (ONEDNN_VARIABLE,
                                            environ[ONEDNN_VARIABLE]))
  if not _below_avx512(features, environ):
    return KernelSettings({}, "CPU kernels: TensorFlow's default for this "
                          "CPU (set %s=0 or 1 to choose)." % ONEDNN_VARIABLE)
  if precision == "bf16":
    return KernelSettings(
        {ONEDNN_VARIABLE: "0"},
        "CPU kernels: Eigen's (%s=0), which run bfloat16 without AVX-512; "
        "--precision=fp32 runs faster on this CPU." % ONEDNN_VARIABLE)
  if "avx2" in features:
    return KernelSettings(
        {ONEDNN_VARIABLE: "1"},
        "CPU kernels: %s=1 (AVX2 CPU without AVX-512, where these kernels "
        "measured faster than Eigen's for fp32; set %s=0 for Eigen's)." % (
            ONEDNN_VARIABLE, ONEDNN_VARIABLE))
  return KernelSettings({}, "CPU kernels: TensorFlow's default (no AVX2 on "
                        "this CPU).")


def conflict(features, precision, environ):
  """One line when the environment turns oneDNN on for bf16 where oneDNN
  has no AVX-512 (see the module docstring); None otherwise.

  Args:
    features: the CPU's feature flags (cpu_features()).
    precision: the run's resolved precision (fp32, fp16 or bf16).
    environ: the environment TensorFlow loaded with.
  """
  value = environ.get(ONEDNN_VARIABLE)
  if (precision != "bf16" or not _below_avx512(features, environ) or
      not _ENVIRON_BOOLEANS.get(str(value).strip().lower())):
    return None
  return ("%s=%s turns on TensorFlow's oneDNN kernels, which have no "
          "bfloat16 path without AVX-512 (TensorFlow falls back to Eigen's "
          "with an error, or aborts where %s caps oneDNN below AVX-512); "
          "use --precision=fp32 (faster on this CPU) or set %s=0." % (
              ONEDNN_VARIABLE, value, ONEDNN_ISA_VARIABLE, ONEDNN_VARIABLE))


def choose_kernels(argv, environ, cpuinfo_file=CPUINFO_FILE):
  """The KernelSettings for the command `argv` (sys.argv) in `environ`
  (os.environ, only read) on this machine's CPU."""
  return kernel_settings(cpu_features(cpuinfo_file),
                         requested_precision(argv[1:]), environ)


@contextlib.contextmanager
def set_while_loading(settings, environ):
  """Sets the variables of `settings` in `environ` (os.environ) for the
  block that loads TensorFlow, and removes them after it.

  TensorFlow reads them once, as it loads; the processes this one starts
  (the scripts that reproduce.py and demo.py run, the tests' commands)
  choose for their own command lines, and would take a variable left set
  for the user's own.
  """
  environ.update(settings.environ)
  try:
    yield
  finally:
    for name in settings.environ:
      environ.pop(name, None)
