# coding=utf-8
"""Kernels compiled with XLA: GELU's two passes, dropout bits, and the
softmax cross-entropy's two passes.

Written as separate TensorFlow ops, GELU's formula and its derivative are a
dozen passes over a layer's widest tensor, TensorFlow's Philox random
kernel is several times slower than the counter-based generator below, and
its softmax cross-entropy makes several passes over float32 copies of a
[positions, vocabulary] logits tensor; as one compiled kernel each, they
are a single pass (measured in docs/results.md, "Speed").
"""

import functools
import math

import tensorflow as tf

GELU_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715

# SplitMix64 (Steele, Lea and Flood, 2014; the generator of Java's
# SplittableRandom): output i of the stream with key k is
# finalize(k + i * gamma).
_SPLITMIX64_GAMMA = 0x9E3779B97F4A7C15
_SPLITMIX64_FINALIZER = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB),
                         (31, None))


def compiled_kernel(fn):
  """`fn` as an XLA-compiled function traced once per input signature.

  A tf.function traces itself again in every graph, and in every
  colocation context within one (autodiff builds each gradient op
  colocated with its forward op, so a backward-pass kernel would be traced
  and compiled once per layer). Here each signature (the inputs' dtypes and
  shapes) is traced once per process, in a graph of its own, and that
  concrete function serves every call in every graph: a training script's
  train and eval graphs, or a test's many small graphs, trace nothing
  twice. A call leaves the colocation and is placed on the device of its
  first placed input instead (where the colocation would have put it).
  """
  compiled = tf.function(fn, jit_compile=True, autograph=False)
  traced = {}

  @functools.wraps(fn)
  def call(*args):
    args = [tf.convert_to_tensor(arg) for arg in args]
    signature = tuple((arg.dtype, None if arg.shape.rank is None
                       else tuple(arg.shape.as_list())) for arg in args)
    concrete = traced.get(signature)
    if concrete is None:
      with tf.Graph().as_default():
        concrete = compiled.get_concrete_function(
            *[tf.TensorSpec(arg.shape, arg.dtype) for arg in args])
      traced[signature] = concrete
    graph = tf.compat.v1.get_default_graph()
    device = next((arg.device for arg in args if arg.device), None)
    with graph.colocate_with(None, ignore_existing=True), graph.device(device):
      return concrete(*args)

  return call


def at_least_float32(x):
  """`x` cast to float32 if it is float16 or bfloat16, else `x` itself."""
  if x.dtype in (tf.float16, tf.bfloat16):
    return tf.cast(x, tf.float32)
  return x


def gelu_tanh(x):
  """tanh(sqrt(2/pi) * (x + 0.044715 x^3)), the core of the approximation."""
  return tf.tanh(GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x))


# Both GELU kernels compute float16 / bfloat16 inputs in float32 and round
# once at the end, which is cheaper in XLA and more precise than rounding
# after every op.
@compiled_kernel
def gelu_forward(x):
  """0.5 x (1 + gelu_tanh(x)), shape and dtype of `x`."""
  wide = at_least_float32(x)
  return tf.cast(wide * (0.5 * (1.0 + gelu_tanh(wide))), x.dtype)


@compiled_kernel
def gelu_backward(x, output_grad):
  """output_grad * d gelu(x) / dx, shape and dtype of `x`."""
  wide = at_least_float32(x)
  tanh = gelu_tanh(wide)
  inner_derivative = GELU_SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * wide *
                                            wide)
  derivative = 0.5 * (1.0 + tanh) + (
      0.5 * wide * (1.0 - tanh * tanh) * inner_derivative)
  return tf.cast(at_least_float32(output_grad) * derivative, x.dtype)


def _splitmix64_finalize(z):
  """SplitMix64's output function of uint64 Tensor `z`, elementwise."""
  for shift, multiplier in _SPLITMIX64_FINALIZER:
    z = tf.bitwise.bitwise_xor(
        z, tf.bitwise.right_shift(z, tf.constant(shift, tf.uint64)))
    if multiplier is not None:
      z *= tf.constant(multiplier, tf.uint64)
  return z


@compiled_kernel
def keep_mask_16bit(shape, seed, threshold, offset):
  """bool Tensor of `shape`: uniform 16-bit values >= `threshold`.

  The values are positions `offset`, `offset` + 1, ... of a stream that
  depends on `seed` alone: the SplitMix64 stream keyed by both seed words,
  each 64-bit output cut into four 16-bit values (a drop rate needs no
  finer resolution). Value n of the stream is the 16-bit part n % 4
  (little-endian) of output n // 4 + 1, so a mask drawn at an offset is
  exactly that slice of a larger mask drawn at offset 0. Compiled, the bits
  are the same with and without --use_xla.

  Args:
    shape: int64 Tensor [rank], the mask's shape (a compile-time constant).
    seed: int64 Tensor [2].
    threshold: uint16 scalar Tensor.
    offset: int64 scalar Tensor >= 0, the stream position of the mask's
      first value (in row-major order).
  """
  size = tf.reduce_prod(shape)
  words = tf.bitcast(seed, tf.uint64)
  key = _splitmix64_finalize(
      tf.bitwise.bitwise_xor(words[0], _splitmix64_finalize(words[1])))
  # One output more than the mask needs: an offset that is not a multiple
  # of 4 starts inside an output and ends inside another.
  counter = tf.bitcast(
      offset // 4 + tf.range(1, (size + 3) // 4 + 2, dtype=tf.int64),
      tf.uint64)
  bits = _splitmix64_finalize(
      key + counter * tf.constant(_SPLITMIX64_GAMMA, tf.uint64))
  # [draws, 4] -> [4 * draws]; the slice drops the values before the offset
  # and after the mask's last one.
  values = tf.slice(tf.reshape(tf.bitcast(bits, tf.uint16), [-1]),
                    tf.reshape(offset % 4, [1]), tf.reshape(size, [1]))
  return tf.reshape(values >= threshold, shape)


def _biased_float32_logits(logits, bias):
  """float32 logits [rows, classes] + float32 bias [classes]."""
  return at_least_float32(logits) + bias


@compiled_kernel
def softmax_cross_entropy_forward(logits, bias, labels):
  """(loss, log_sum_exp), float32 [rows]: -log softmax(logits + bias)[label]
  and the logsumexp of each row of logits + bias.

  Args:
    logits: float Tensor [rows, classes], any float dtype.
    bias: float32 Tensor [classes].
    labels: int32 Tensor [rows], each in [0, classes).
  """
  wide = _biased_float32_logits(logits, bias)
  log_sum_exp = tf.reduce_logsumexp(wide, axis=-1)
  return log_sum_exp - tf.gather(wide, labels, batch_dims=1), log_sum_exp


@compiled_kernel
def softmax_cross_entropy_backward(logits, bias, labels, log_sum_exp,
                                   loss_grad):
  """Gradients of `softmax_cross_entropy_forward`'s loss: (logits' in the
  logits' dtype, bias' in float32), from the row's softmax minus its
  one-hot label, scaled by `loss_grad` [rows]."""
  wide = _biased_float32_logits(logits, bias)
  probs = tf.exp(wide - log_sum_exp[:, None])
  rows_grad = (probs - tf.one_hot(labels, logits.shape[-1], dtype=tf.float32)
              ) * loss_grad[:, None]
  return tf.cast(rows_grad, logits.dtype), tf.reduce_sum(rows_grad, axis=0)
