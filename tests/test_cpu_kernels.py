"""The CPU kernels chosen before TensorFlow loads (hardware/cpu.py),
--precision=auto (startup/precision.py), and the same numbers from both
kernel families.

The decisions are checked on made-up feature sets. The numbers are checked
by running a tiny BertModel and one AdamW step in two fresh processes, one
with Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0) and one with oneDNN's (=1):
each result must lie within a float32 error bound of a float64 NumPy
re-derivation, the bound carried op by op from the magnitudes of the values
(tests/rounding.py), so the two lie within twice that bound of each other.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import conftest
from hardware import cpu
from startup import shared_flags
from startup import precision as startup_precision
import rounding
import test_modeling

REPO_ROOT = conftest.REPO_ROOT
AVX2_ONLY = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
AVX512 = AVX2_ONLY | {"avx512f", "avx512dq", "avx512bw", "avx512vl"}
AVX512_BF16 = AVX512 | {"avx512_bf16"}
AMX = AVX512 | {"amx_tile", "amx_bf16"}
NO_AVX2 = frozenset({"fpu", "sse4_2"})
ONEDNN = cpu.ONEDNN_VARIABLE


# ------------------------------------------------------- feature flags


def test_cpu_features_reads_the_flags_line(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                     "flags\t\t: fpu avx avx2 fma\n\nprocessor\t: 1\n"
                     "flags\t\t: fpu avx avx2 fma\n")
  assert cpu.cpu_features(str(cpuinfo)) == {"fpu", "avx", "avx2", "fma"}
  assert cpu.cpu_features(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize("args,want", [
    ([], "fp32"),
    (["--precision=bf16"], "bf16"),
    (["--precision", "bf16"], "bf16"),
    (["-precision=auto"], "auto"),
    (["-precision", "fp16"], "fp16"),
    (["--do_train", "--precision=bf16", "--precision=fp32"], "fp32"),
    (["--precision=bf16", "--", "--precision=fp32"], "bf16"),
    (["--precision_x=bf16", "--xprecision=bf16"], "fp32"),
    (["--precision"], "fp32"),
])
def test_requested_precision_reads_the_command_line_as_absl(args, want):
  assert cpu.requested_precision(args) == want


# ------------------------------------------------------- kernel decision


@pytest.mark.parametrize("features,precision,want", [
    # AVX2 without AVX-512: oneDNN for fp32 (faster), Eigen for bf16 (oneDNN
    # has no bfloat16 path there); auto is fp32 there.
    (AVX2_ONLY, "fp32", {ONEDNN: "1"}),
    (AVX2_ONLY, "auto", {ONEDNN: "1"}),
    (AVX2_ONLY, "bf16", {ONEDNN: "0"}),
    (AVX2_ONLY, "fp16", {ONEDNN: "1"}),
    # AVX-512 CPUs keep TensorFlow's default, whatever the precision.
    (AVX512, "fp32", {}),
    (AVX512, "bf16", {}),
    (AVX512_BF16, "auto", {}),
    (AMX, "bf16", {}),
    # Too old for AVX2, or nothing known: TensorFlow's default, except that
    # bf16 never gets oneDNN without AVX-512.
    (NO_AVX2, "fp32", {}),
    (NO_AVX2, "bf16", {ONEDNN: "0"}),
    (frozenset(), "fp32", {}),
    (frozenset(), "bf16", {}),
])
def test_kernel_settings(features, precision, want):
  settings = cpu.kernel_settings(features, precision, {})
  assert settings.environ == want
  assert settings.line.startswith("CPU kernels: ")
  assert "\n" not in settings.line
  # The default run's output names no TensorFlow notice about oneDNN
  # (tests/test_output.py); the line names the variable instead.
  assert "oneDNN" not in settings.line
  if want:
    assert "%s=%s" % (ONEDNN, want[ONEDNN]) in settings.line


def test_kernel_lines_say_why_and_how_to_change():
  fp32 = cpu.kernel_settings(AVX2_ONLY, "fp32", {}).line
  assert "faster" in fp32 and "%s=0" % ONEDNN in fp32
  bf16 = cpu.kernel_settings(AVX2_ONLY, "bf16", {}).line
  assert "without AVX-512" in bf16 and "--precision=fp32" in bf16


def test_onednn_isa_cap_counts_as_the_cpu():
  capped = {cpu.ONEDNN_ISA_VARIABLE: "avx2"}
  assert cpu.kernel_settings(AVX512_BF16, "bf16", capped).environ == {
      ONEDNN: "0"}
  assert cpu.kernel_settings(AVX512_BF16, "fp32", capped).environ == {
      ONEDNN: "1"}
  uncapped = {cpu.ONEDNN_ISA_VARIABLE: "AVX512_CORE_BF16"}
  assert cpu.kernel_settings(AVX512_BF16, "bf16", uncapped).environ == {}


@pytest.mark.parametrize("value", ["0", "1", "true", "junk"])
@pytest.mark.parametrize("features", [AVX2_ONLY, AVX512])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "auto"])
def test_users_own_setting_is_kept(value, features, precision):
  settings = cpu.kernel_settings(features, precision, {ONEDNN: value})
  assert settings.environ == {}
  assert "%s=%s, as set in the environment" % (ONEDNN, value) in (
      settings.line)


@pytest.mark.parametrize("features,precision,value,refused", [
    (AVX2_ONLY, "bf16", "1", True),
    (AVX2_ONLY, "bf16", "True", True),
    (AVX2_ONLY, "bf16", "0", False),
    (AVX2_ONLY, "bf16", None, False),
    (AVX2_ONLY, "fp32", "1", False),
    (AVX512, "bf16", "1", False),
    (AVX512_BF16, "bf16", "1", False),
    (frozenset(), "bf16", "1", False),
])
def test_conflict(features, precision, value, refused):
  environ = {} if value is None else {ONEDNN: value}
  problem = cpu.conflict(features, precision, environ)
  if not refused:
    assert problem is None
    return
  assert "\n" not in problem
  assert "%s=%s" % (ONEDNN, value) in problem
  assert "--precision=fp32" in problem and "abort" in problem


def test_choice_is_set_while_tensorflow_loads_only(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("flags\t: %s\n" % " ".join(sorted(AVX2_ONLY)))
  environ = {"HOME": "/home/x"}
  settings = cpu.choose_kernels(["run_classifier.py", "--precision", "bf16"],
                                environ, str(cpuinfo))
  assert settings.environ == {ONEDNN: "0"}
  with cpu.set_while_loading(settings, environ):
    assert environ == {"HOME": "/home/x", ONEDNN: "0"}
  assert environ == {"HOME": "/home/x"}
  environ = {ONEDNN: "1"}
  with cpu.set_while_loading(cpu.choose_kernels(["x.py"], environ,
                                                str(cpuinfo)), environ):
    assert environ == {ONEDNN: "1"}
  assert environ == {ONEDNN: "1"}


def test_the_choice_outlives_the_variable():
  """TensorFlow reads the variable once, as it loads: removed afterwards,
  the kernels it chose stay (here Eigen's, whatever this CPU's default)."""
  code = ("import os; os.environ['%s'] = '0'\n"
          "import tensorflow as tf\n"
          "tf.config.list_physical_devices()\n"
          "del os.environ['%s']\n"
          "from tensorflow.python.util import _pywrap_util_port\n"
          "print(_pywrap_util_port.IsMklEnabled())" % (ONEDNN, ONEDNN))
  env = dict(os.environ)
  env.pop(ONEDNN, None)
  result = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300,
                          check=False)
  assert result.stdout.strip() == "False", result.stderr[-2000:]


# ------------------------------------------------------- --precision=auto


@pytest.mark.parametrize("features,gpus,want", [
    (AVX2_ONLY, [], ("fp32", "no AVX512_BF16 or AMX")),
    (AVX512, [], ("fp32", "no AVX512_BF16 or AMX")),
    (AVX512_BF16, [], ("bf16", "AVX512_BF16")),
    (AMX, [], ("bf16", "AMX_BF16")),
    (AMX | {"avx512_bf16"}, [], ("bf16", "AVX512_BF16/AMX_BF16")),
    (AVX2_ONLY, [(8, 0), (9, 0)], ("bf16", "GPU compute capability 8.0")),
    (AVX512_BF16, [(8, 6), (7, 5)],
     ("fp32", "GPU compute capability 7.5, below 8.0")),
])
def test_auto_precision(features, gpus, want):
  assert startup_precision.resolve_precision("auto", features, gpus) == want


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_other_precisions_stay(precision):
  assert startup_precision.resolve_precision(precision, AVX512_BF16, [(9, 0)]) == (
      precision, None)


def test_auto_is_a_choice_of_the_flag_and_fp32_the_default():
  from absl import flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  shared_flags.define_memory_flags(fv)
  fv(["x"])
  assert fv["precision"].value == "fp32"
  fv(["x", "--precision=auto"])
  read = shared_flags.read(fv)
  assert read.precision == "auto" and read.precision_reason is None


# ------------------------------------------------------- the same numbers


# The child process: builds the tiny BertModel, loads the weights, runs the
# forward pass and one AdamW step on loss = sum(pooled * R), and saves the
# results (and whether oneDNN ran) to the .npz it is given.
_CHILD = r"""
import sys
import numpy as np
from userio import quiet_tensorflow  # noqa: F401
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
import modeling
import optimization

data = dict(np.load(sys.argv[1]))
config = modeling.BertConfig.from_json_file(sys.argv[2])
with tf.Graph().as_default():
  model = modeling.BertModel(
      config, is_training=False, input_ids=tf.constant(data.pop("ids")),
      input_mask=tf.constant(data.pop("mask")),
      token_type_ids=tf.constant(data.pop("types")))
  loss = tf.reduce_sum(model.get_pooled_output() * data.pop("r"))
  tvars = tf.compat.v1.trainable_variables()
  optimizer = optimization.AdamWeightDecayOptimizer(
      learning_rate=float(data.pop("lr")),
      weight_decay_rate=float(data.pop("wd")),
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
  train = optimizer.apply_gradients(zip(tf.gradients(loss, tvars), tvars))
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    holders = [tf.compat.v1.placeholder(tf.float32, v.shape) for v in tvars]
    sess.run([v.assign(h) for v, h in zip(tvars, holders)],
             {h: data[v.op.name] for v, h in zip(tvars, holders)})
    layers, pooled = sess.run((model.get_all_encoder_layers(),
                               model.get_pooled_output()))
    sess.run(train)
    out = {"updated/" + v.op.name: value
           for v, value in zip(tvars, sess.run(tvars))}
out.update({"layer_%d" % i: value for i, value in enumerate(layers)})
np.savez(sys.argv[3], pooled=pooled,
         onednn=_pywrap_util_port.IsMklEnabled(), **out)
"""

# One narrow layer: the worst-case bounds grow with every op and with the
# width of every sum, and stay far below bfloat16's rounding only for a
# model this small (test_bounds_would_catch_bfloat16 checks that they do).
SMALL = dict(hidden_size=8, num_attention_heads=2, intermediate_size=12,
             num_hidden_layers=1)
KERNEL_SCALE = 0.5
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.01
ADAM_EPSILON = 1e-6
BETA_1, BETA_2 = 0.9, 0.999
U = rounding.unit_roundoff(tf.float32)


def _run_child(tmp_path, onednn, inputs, config_file):
  out = str(tmp_path / ("onednn_%s.npz" % onednn))
  env = dict(conftest.env_without_compilation_cache(), **{ONEDNN: onednn})
  env.pop(cpu.ONEDNN_ISA_VARIABLE, None)
  result = subprocess.run(
      [sys.executable, "-c", _CHILD, inputs, config_file, out],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return dict(np.load(out))


# Running bounds: each function returns (float64 value, bound on the error
# of the float32 computation of it), from the inputs' values and bounds.
# A sum of k float32 terms is off by at most k * u times the sum of their
# magnitudes (whatever the order the kernels add them in), elementwise
# functions by a few u of their result, plus the propagated input error.


def _dense(x, ex, w, prefix):
  kernel, bias = w[prefix + "/kernel"], w[prefix + "/bias"]
  magnitude = (np.abs(x) + ex) @ np.abs(kernel) + np.abs(bias)
  return (x @ kernel + bias,
          ex @ np.abs(kernel) + (kernel.shape[0] + 1) * U * magnitude)


def _layer_norm(x, ex, w, prefix):
  """LayerNorm's value and bound, and those of its normalized z."""
  gamma, beta = w[prefix + "/gamma"], w[prefix + "/beta"]
  n = x.shape[-1]
  mean = x.mean(-1, keepdims=True)
  z = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12)
  # Rounding the mean and the difference acts as an error of the input.
  input_error = ex + (n + 2) * U * np.abs(x).mean(-1, keepdims=True) + (
      U * np.abs(x))
  ez = rounding.layer_norm_bound(x, input_error, 1.0) + (n + 6) * U * np.abs(z)
  value = z * gamma + beta
  return (value, ez * np.abs(gamma) + 2 * U * (np.abs(z * gamma) +
                                               np.abs(beta)), z, ez)


def _add(a, ea, b, eb):
  return a + b, ea + eb + U * np.abs(a + b)


def _gelu(x, ex):
  """GELU (tanh form): the input's error times the slope, and the rounding
  of 1 + tanh, a few u of |x|."""
  gelu = test_modeling._np_gelu  # pylint: disable=protected-access
  step = 1e-4
  slope = np.abs(gelu(x + step) - gelu(x - step)) / (2 * step)
  return gelu(x), slope * ex + 10 * U * np.abs(x)


def _heads(t, heads):
  batch, seq, hidden = t.shape
  return t.reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)


def _attention(x, ex, mask, w, prefix, heads):
  (q, eq), (k, ek), (v, ev) = [
      [_heads(t, heads) for t in _dense(x, ex, w, prefix + name)]
      for name in ("/query", "/key", "/value")]
  d = q.shape[-1]
  kt, ekt = k.transpose(0, 1, 3, 2), ek.transpose(0, 1, 3, 2)
  scores = q @ kt / np.sqrt(d) + (1.0 - mask[:, None, None, :]) * -10000.0
  escores = (eq @ np.abs(kt) + (np.abs(q) + eq) @ ekt + (d + 1) * U * (
      (np.abs(q) + eq) @ (np.abs(kt) + ekt))) / np.sqrt(d) + 2 * U * np.abs(
          scores)
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  seq = probs.shape[-1]
  eprobs = probs * (escores + (probs * escores).sum(-1, keepdims=True)) + (
      seq + 4) * U * probs
  context = probs @ v
  econtext = eprobs @ np.abs(v) + probs @ ev + (seq + 1) * U * (
      (probs + eprobs) @ (np.abs(v) + ev))
  merge = lambda t: t.transpose(0, 2, 1, 3).reshape(x.shape)
  return merge(context), merge(econtext)


def _bert_with_bounds(w, cfg, ids, mask, types):
  """The tiny BERT's layers and pooled output in float64 with bounds, and
  what the pooler's and the last LayerNorm's gradients need."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  mask = np.asarray(mask, np.float64)
  parts = [w["bert/embeddings/word_embeddings"][ids],
           w["bert/embeddings/token_type_embeddings"][types],
           w["bert/embeddings/position_embeddings"][:ids.shape[1]][None]]
  emb = sum(parts)
  h, eh, z, ez = _layer_norm(emb, 2 * U * sum(np.abs(p) for p in parts), w,
                             "bert/embeddings/LayerNorm")
  layers = []
  for layer in range(cfg.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % layer
    att, eatt = _attention(h, eh, mask, w, p + "attention/self",
                           cfg.num_attention_heads)
    att, eatt = _add(*_dense(att, eatt, w, p + "attention/output/dense"), h,
                     eh)
    att, eatt, _, _ = _layer_norm(att, eatt, w,
                                  p + "attention/output/LayerNorm")
    inter, einter = _gelu(*_dense(att, eatt, w, p + "intermediate/dense"))
    out, eout = _add(*_dense(inter, einter, w, p + "output/dense"), att, eatt)
    h, eh, z, ez = _layer_norm(out, eout, w, p + "output/LayerNorm")
    layers.append((h, eh))
  dense, edense = _dense(h[:, 0], eh[:, 0], w, "bert/pooler/dense")
  pooled = np.tanh(dense)
  epooled = (1 - pooled ** 2) * edense + 4 * U * np.abs(pooled)
  cls = (h[:, 0], eh[:, 0], z[:, 0], ez[:, 0])
  return layers, (pooled, epooled), cls


def _sum_rows(a, ea):
  """Σ over the batch (rows) of a float32 product with its bound."""
  return a.sum(0), ea.sum(0) + (a.shape[0] + 1) * U * (np.abs(a) + ea).sum(0)


def _head_gradients(w, cfg, r, pooled, epooled, cls):
  """d sum(pooled * r) / d the pooler's weights and the last LayerNorm's,
  with bounds: {name: (gradient, bound)}."""
  h, eh, z, ez = cls
  kernel = np.asarray(w["bert/pooler/dense/kernel"], np.float64)
  last = "bert/encoder/layer_%d/output/LayerNorm/" % (
      cfg.num_hidden_layers - 1)
  dz = r * (1 - pooled ** 2)
  edz = np.abs(r) * (2 * np.abs(pooled) * epooled + 3 * U * (1 + pooled ** 2))
  grads = {"bert/pooler/dense/bias": _sum_rows(dz, edz)}
  grads["bert/pooler/dense/kernel"] = (
      h.T @ dz, eh.T @ np.abs(dz) + (np.abs(h) + eh).T @ edz + (
          h.shape[0] + 1) * U * (np.abs(h) + eh).T @ (np.abs(dz) + edz))
  dh = dz @ kernel.T
  edh = edz @ np.abs(kernel.T) + (kernel.shape[1] + 1) * U * (
      (np.abs(dz) + edz) @ np.abs(kernel.T))
  grads[last + "beta"] = _sum_rows(dh, edh)
  grads[last + "gamma"] = _sum_rows(
      dh * z, edh * np.abs(z) + (np.abs(dh) + edh) * ez + U * np.abs(dh * z))
  return grads


def _adam_step_with_bound(value, grad, egrad, decay):
  """Google's AdamW first step from zero slots, in float64, with the bound
  of its float32 computation from a gradient known within `egrad`."""
  c1, c2 = 1 - BETA_1, np.sqrt(1 - BETA_2)
  direction = c1 * grad / (c2 * np.abs(grad) + ADAM_EPSILON)
  # The direction's slope in the gradient is largest nearest to 0.
  nearest = np.maximum(np.abs(grad) - egrad, 0.0)
  slope = c1 * ADAM_EPSILON / (c2 * nearest + ADAM_EPSILON) ** 2
  moved = np.minimum(slope * egrad, 2 * c1 / c2)
  wd = WEIGHT_DECAY if decay else 0.0
  update = direction + wd * value
  bound = LEARNING_RATE * moved + 12 * U * (
      np.abs(value) + LEARNING_RATE * (np.abs(direction) + wd * np.abs(value)))
  return value - LEARNING_RATE * update, bound


def _small_model():
  """The config, float32 weights and loss weights r [2, hidden] of the
  check."""
  cfg = test_modeling._tiny_config(**SMALL)  # pylint: disable=protected-access
  weights = test_modeling._random_weights(  # pylint: disable=protected-access
      cfg, seed=5)
  for name in weights:
    if name.endswith("kernel"):
      weights[name] *= KERNEL_SCALE
  r = np.random.RandomState(6).randn(2, cfg.hidden_size).astype(np.float32)
  return cfg, weights, r


@pytest.fixture(scope="module")
def both_kernels(tmp_path_factory):
  """The tiny model's weights and inputs, and what each kernel family
  computed from them: {"0": Eigen's results, "1": oneDNN's}."""
  tmp_path = tmp_path_factory.mktemp("cpu_kernels")
  cfg, weights, r = _small_model()
  config_file = str(tmp_path / "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(cfg.to_dict(), f)
  inputs = str(tmp_path / "inputs.npz")
  np.savez(inputs, ids=test_modeling.IDS, mask=test_modeling.MASK,
           types=test_modeling.TYPES, r=r, lr=LEARNING_RATE,
           wd=WEIGHT_DECAY, **weights)
  runs = {value: _run_child(tmp_path, value, inputs, config_file)
          for value in ("0", "1")}
  return cfg, weights, r, runs


@pytest.mark.slow
def test_both_kernel_families_ran(both_kernels):
  _, _, _, runs = both_kernels
  assert not runs["0"]["onednn"] and runs["1"]["onednn"]


def _assert_both_within(runs, key, want, bound, what):
  for value, name in (("0", "Eigen"), ("1", "oneDNN")):
    rounding.assert_within_bound(runs[value][key], want, bound,
                                 "%s, %s's kernels" % (what, name))
  rounding.assert_within_bound(runs["0"][key], runs["1"][key], 2 * bound,
                               "%s, Eigen's against oneDNN's" % what)


def test_bounds_would_catch_bfloat16():
  """The bounds of the check below are far tighter than bfloat16's unit
  roundoff relative to the values: a kernel that rounded to bfloat16 on the
  way would fail it."""
  cfg, weights, r = _small_model()
  layers, pooled, cls = _bert_with_bounds(
      weights, cfg, test_modeling.IDS, test_modeling.MASK,
      test_modeling.TYPES)
  grads = _head_gradients(weights, cfg, r, *pooled, cls)
  u_bf16 = rounding.unit_roundoff(tf.bfloat16)
  for value, bound in layers + [pooled] + list(grads.values()):
    assert bound.max() < u_bf16 / 8 * np.abs(value).max()


@pytest.mark.slow
def test_same_outputs_either_way(both_kernels):
  cfg, weights, _, runs = both_kernels
  layers, (pooled, epooled), _ = _bert_with_bounds(
      weights, cfg, test_modeling.IDS, test_modeling.MASK,
      test_modeling.TYPES)
  for i, (want, bound) in enumerate(layers):
    _assert_both_within(runs, "layer_%d" % i, want, bound, "layer %d" % i)
  _assert_both_within(runs, "pooled", pooled, epooled, "pooled output")


@pytest.mark.slow
def test_same_training_step_either_way(both_kernels):
  """The AdamW step of the weights whose gradients the re-derivation
  covers (the pooler's and the last LayerNorm's); every other weight must
  have moved by at most the largest step Adam can take, and stay
  finite."""
  cfg, weights, r, runs = both_kernels
  _, (pooled, epooled), cls = _bert_with_bounds(
      weights, cfg, test_modeling.IDS, test_modeling.MASK,
      test_modeling.TYPES)
  grads = _head_gradients(weights, cfg, r, pooled, epooled, cls)
  for name, (grad, egrad) in grads.items():
    want, bound = _adam_step_with_bound(
        weights[name].astype(np.float64), grad, egrad,
        decay=name.endswith("kernel"))
    _assert_both_within(runs, "updated/" + name, want, bound, name)
  largest = LEARNING_RATE * ((1 - BETA_1) / np.sqrt(1 - BETA_2) + (
      WEIGHT_DECAY * max(np.abs(v).max() for v in weights.values())))
  for name, value in weights.items():
    for run in runs.values():
      moved = np.abs(run["updated/" + name] - value)
      assert np.all(moved <= largest * (1 + 1e-5)), name


# ------------------------------------------------------- end to end


def _run_classifier(tmp_path, precision, actions=("--do_train",),
                    **environ):
  """run_classifier.py on the MRPC sample with a tiny model, trained for one
  update by default (`actions`), with --precision `precision` (None: not
  given), in a fresh process (the kernels are chosen as TensorFlow loads)
  with `environ` added; returns the CompletedProcess."""
  env = conftest.env_without_compilation_cache()
  for name in (ONEDNN, cpu.ONEDNN_ISA_VARIABLE):
    env.pop(name, None)
  env.update(environ)
  args = ["--task_name=MRPC",
          "--data_dir=" + os.path.join(REPO_ROOT, "sample_data",
                                       "mrpc_sample"),
          "--vocab_file=" + os.path.join(conftest.ASSETS_DIR, "bert_vocab",
                                         "uncased", "vocab.txt"),
          "--bert_config_file=" + os.path.join(
              REPO_ROOT, "sample_data", "tiny_bert_config.json"),
          "--output_dir=" + str(tmp_path / "out"), "--max_seq_length=32",
          "--train_batch_size=8", "--num_train_epochs=0.05"] + list(actions)
  if precision is not None:
    args += ["--precision", precision]
  return subprocess.run([sys.executable, "run_classifier.py"] + args,
                        cwd=REPO_ROOT, env=env, capture_output=True,
                        text=True, timeout=900, check=False)


@pytest.mark.slow
def test_auto_says_what_it_chose(tmp_path):
  result = _run_classifier(tmp_path, "auto")
  assert result.returncode == 0, result.stderr[-3000:]
  want = startup_precision.resolve_precision("auto", cpu.cpu_features(),
                                   startup_precision.gpu_capabilities())
  assert "precision=%s (auto: %s" % want in result.stderr, result.stderr
  lines = [line for line in result.stderr.splitlines()
           if "CPU kernels: " in line]
  assert len(lines) == 1, result.stderr


@pytest.mark.slow
def test_export_without_precision_computes_as_trained(tmp_path):
  """Trained in bf16, then exported by a second command without
  --precision: the export computes in bf16 where this CPU has a native
  bfloat16 path, in fp32 elsewhere, and the Settings line says which."""
  trained = _run_classifier(tmp_path, "bf16")
  assert trained.returncode == 0, trained.stderr[-3000:]
  with open(tmp_path / "out" / "run_info.json") as f:
    assert json.load(f)["precision"] == "bf16"
  exported = _run_classifier(
      tmp_path, None, actions=["--export_dir=" + str(tmp_path / "export")])
  assert exported.returncode == 0, exported.stderr[-3000:]
  features = cpu.cpu_features()
  native = bool({"avx512_bf16", "amx_bf16"} & features)
  if native:
    assert "precision=bf16 (as trained)" in exported.stderr, exported.stderr
  else:
    assert ("precision=fp32 (trained in bf16, not fast here: no AVX512_BF16 "
            "or AMX; --precision=bf16 keeps it)") in exported.stderr, (
                exported.stderr)
  (saved,) = [os.path.join(root, "saved_model.pb")
              for root, _, files in os.walk(tmp_path / "export")
              if "saved_model.pb" in files]
  # The encoder's matmuls; the head computes its logits in float32 either way.
  assert (tf.bfloat16 in _matmul_types(saved)) == native


def _matmul_types(saved_model_pb):
  """The dtypes (attribute T) of every MatMul-kind node of a SavedModel's
  graphs and functions."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=import-outside-toplevel
  model = saved_model_pb2.SavedModel()
  with open(saved_model_pb, "rb") as f:
    model.ParseFromString(f.read())
  found = set()
  for meta in model.meta_graphs:
    nodes = list(meta.graph_def.node)
    for function in meta.graph_def.library.function:
      nodes += list(function.node_def)
    found |= {tf.dtypes.as_dtype(node.attr["T"].type) for node in nodes
              if node.op in ("MatMul", "BatchMatMulV2")}
  return found


@pytest.mark.parametrize("trained,features,gpus,environ,want", [
    (None, AVX512_BF16, [], {}, ("fp32", None)),
    ("fp32", AMX, [], {}, ("fp32", None)),
    ("bf16", AVX512_BF16, [], {}, ("bf16", "as trained")),
    ("bf16", AMX, [], {}, ("bf16", "as trained")),
    ("bf16", AVX512, [], {}, (
        "fp32", "trained in bf16, not fast here: no AVX512_BF16 or AMX; "
        "--precision=bf16 keeps it")),
    ("bf16", AVX2_ONLY, [], {}, (
        "fp32", "trained in bf16, not fast here: no AVX512_BF16 or AMX; "
        "--precision=bf16 keeps it")),
    ("bf16", AVX512_BF16, [], {ONEDNN: "1", cpu.ONEDNN_ISA_VARIABLE: "AVX2"},
     ("fp32", "trained in bf16, not fast here: CPU kernels without bf16; "
      "--precision=bf16 keeps it")),
    ("bf16", AVX2_ONLY, [(8, 0)], {}, ("bf16", "as trained")),
    ("bf16", AVX512_BF16, [(7, 5)], {}, (
        "fp32", "trained in bf16, not fast here: GPU compute capability 7.5, "
        "below 8.0; --precision=bf16 keeps it")),
    ("fp16", AVX512_BF16, [(7, 5)], {}, ("fp16", "as trained")),
    ("fp16", AMX, [], {}, ("fp32", "trained in fp16, which needs a GPU")),
])
def test_precision_as_trained(trained, features, gpus, environ, want):
  assert startup_precision.precision_as_trained(
      trained, features, gpus, environ) == want


@pytest.mark.slow
def test_bf16_runs_where_onednn_lacks_avx512(tmp_path):
  """oneDNN capped at AVX2 aborts at a bfloat16 matmul; the run chooses
  Eigen's kernels and trains."""
  result = _run_classifier(tmp_path, "bf16",
                           **{cpu.ONEDNN_ISA_VARIABLE: "AVX2"})
  assert result.returncode == 0, result.stderr[-3000:]
  assert "CPU kernels: Eigen's (%s=0)" % ONEDNN in result.stderr
  assert "precision=bf16" in result.stderr


def test_users_onednn_with_bf16_without_avx512_is_refused(tmp_path):
  result = _run_classifier(tmp_path, "bf16",
                           **{cpu.ONEDNN_ISA_VARIABLE: "AVX2", ONEDNN: "1"})
  assert result.returncode == 2, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("run_classifier.py: error: %s=1 " % ONEDNN), last
  assert "--precision=fp32" in last
  assert "Traceback" not in result.stderr
