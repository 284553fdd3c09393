# coding=utf-8
"""What Google's published BERT code needs from TensorFlow 1, on TF 2.21.

bench/throughput.py's "google" peer runs Google's own modules from PyPI
(bert-tensorflow 1.0.4: `bert.modeling`, `bert.optimization`,
`bert.run_classifier`, installed by bench/setup_google_env.sh), unchanged.
They import `tensorflow.compat.v1 as tf`, which TF 2.21 still has, and
three things it no longer has:

  * `tensorflow.contrib.layers.layer_norm` (modeling.layer_norm): contrib
    was removed in TF 2.0; `layer_norm` below makes the same variables
    (`<scope>/beta`, `<scope>/gamma`, scope "LayerNorm" by default) and the
    same arithmetic (moments over the last axis, epsilon 1e-12).
  * `tf.layers.dense` (every projection of modeling.py): TF 2.21's
    `tf.compat.v1.layers` refuses to build layers under Keras 3; `dense`
    below makes the TF1 layer's variables (`<name>/kernel`, `<name>/bias`)
    and computes matmul, bias add, activation, as it did on 2-D inputs
    (the only ones modeling.py gives it).
  * Dimension-valued shapes (`shape[-1].value` in run_classifier's
    create_model): TF1 shapes held `Dimension` objects;
    `tf.compat.v1.disable_v2_tensorshape()` turns them back on.

Only the process that runs the google peer calls `import_google_bert`;
importing this module changes nothing.
"""

import sys
import types

import tensorflow as tf

v1 = tf.compat.v1

# contrib's layer_norm default, which modeling.layer_norm relies on.
LAYER_NORM_EPSILON = 1e-12


def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
  """Replaces tf.contrib.layers.layer_norm for modeling.layer_norm's call.

  Normalizes `inputs` over its last axis and applies a learned offset
  (`beta`, zeros) and scale (`gamma`, ones) of the last axis's width, in
  variable scope `scope` ("LayerNorm" when None), in the input's dtype.

  Args:
    inputs: float Tensor [..., width].
    begin_norm_axis, begin_params_axis: only -1 (the last axis) is
      supported, the one value modeling.py passes.
    scope: variable scope name.

  Returns:
    Tensor of the input's shape and dtype.

  Raises:
    ValueError: another axis was asked for.
  """
  if begin_norm_axis != -1 or begin_params_axis != -1:
    raise ValueError("this layer_norm normalizes the last axis only.")
  width = inputs.shape[-1]
  width = getattr(width, "value", width)
  with v1.variable_scope(scope, default_name="LayerNorm"):
    beta = v1.get_variable("beta", shape=[width], dtype=inputs.dtype,
                           initializer=v1.zeros_initializer())
    gamma = v1.get_variable("gamma", shape=[width], dtype=inputs.dtype,
                            initializer=v1.ones_initializer())
    mean, variance = tf.nn.moments(inputs, [inputs.shape.ndims - 1],
                                   keepdims=True)
    return tf.nn.batch_normalization(inputs, mean, variance, offset=beta,
                                     scale=gamma,
                                     variance_epsilon=LAYER_NORM_EPSILON)


def dense(inputs, units, activation=None, name=None, kernel_initializer=None):
  """Replaces tf.layers.dense for modeling.py's 2-D calls.

  Args:
    inputs: float Tensor [rows, width].
    units: output width.
    activation: (optional) function applied to the result.
    name: variable scope of `kernel` [width, units] and `bias` [units]
      ("dense" when None).
    kernel_initializer: (optional) initializer of the kernel (Glorot
      uniform when None, TF1's default); the bias starts at zero.

  Returns:
    Tensor [rows, units].

  Raises:
    ValueError: the input is not 2-D.
  """
  if inputs.shape.ndims != 2:
    raise ValueError("this dense takes 2-D inputs only, got shape %s." %
                     inputs.shape)
  width = inputs.shape[-1]
  width = getattr(width, "value", width)
  with v1.variable_scope(name, default_name="dense"):
    kernel = v1.get_variable(
        "kernel", shape=[width, units], dtype=inputs.dtype,
        initializer=kernel_initializer or v1.glorot_uniform_initializer())
    bias = v1.get_variable("bias", shape=[units], dtype=inputs.dtype,
                           initializer=v1.zeros_initializer())
    outputs = tf.nn.bias_add(tf.matmul(inputs, kernel), bias)
    return activation(outputs) if activation is not None else outputs


def contrib_module():
  """A `tensorflow.contrib` module holding `layers.layer_norm`."""
  contrib = types.ModuleType("tensorflow.contrib")
  contrib.layers = types.ModuleType("tensorflow.contrib.layers")
  contrib.layers.layer_norm = layer_norm
  return contrib


class _V1WithLayers(types.ModuleType):
  """tf.compat.v1 as modeling.py sees it, with `layers.dense` restored."""

  layers = types.SimpleNamespace(dense=dense)

  def __getattr__(self, name):
    return getattr(v1, name)


def import_google_bert():
  """Imports Google's modules (bert-tensorflow) through the shims.

  Call once, in the process that runs them, before building their graph.

  Returns:
    (bert.modeling, bert.optimization, bert.run_classifier) modules.
  """
  v1.disable_v2_tensorshape()
  contrib = contrib_module()
  sys.modules.setdefault("tensorflow.contrib", contrib)
  sys.modules.setdefault("tensorflow.contrib.layers", contrib.layers)
  from bert import modeling  # pylint: disable=g-import-not-at-top
  from bert import optimization  # pylint: disable=g-import-not-at-top
  from bert import run_classifier  # pylint: disable=g-import-not-at-top
  modeling.tf = _V1WithLayers("tensorflow.compat.v1")
  return modeling, optimization, run_classifier
