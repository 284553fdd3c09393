# coding=utf-8
"""The BERT model ("Bidirectional Encoder Representations from Transformers").

Graph-mode `tf.compat.v1` re-implementation of the model in Google's original
BERT code. Public names, signatures, variable names and shapes, and the math
(tanh-approximated GELU, LayerNorm with epsilon 1e-12, additive attention mask
of -10000) are those of the original, so Google's released checkpoints load
unchanged.

Additions, all keyword arguments with defaults:
  * `BertModel(..., gradient_checkpointing=True)` recomputes each transformer
    layer but the last in the backward pass (`recompute_grad`) to save memory.
  * `BertModel(..., compute_dtype=tf.float16 | tf.bfloat16)` runs matmuls and
    activations in reduced precision while the variables stay float32.
  * `BertModel(..., skip_padding=True)` runs the feed-forward layers on the
    non-padding positions only (the pooled output is unchanged).
  * `dropout` is stateless: its mask depends only on (graph seed, dropout
    site, step), see docs/architecture.md "Dropout randomness".
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import collections
import contextlib
import copy
import functools
import json
import math
import re
import threading
import zlib

import tensorflow as tf

# Gradient checkpointing (`recompute_grad`) relies on custom gradients, which
# in graph mode only support resource variables.
tf.compat.v1.enable_resource_variables()

MICRO_STEP_COLLECTION = "micro_step"

_COMPUTE_DTYPES = (tf.float32, tf.float16, tf.bfloat16)

# Added to the attention scores of masked positions before the softmax; large
# enough that exp() of it is exactly 0 in float32.
_MASK_ADDER = -10000.0

_LAYER_NORM_EPSILON = 1e-12

# Training graphs of sequences up to this many tokens keep attention's
# probabilities and dropout mask and the intermediate GELU output for the
# backward pass, as autodiff does; longer sequences compute them again there
# (`_attention_context`, `_matmul_of_activation`). Keeping is faster (bf16
# BERT-Base training on CPU: 9% at 128 tokens, 17% at 384); computing
# again is what fits 512 tokens, where attention's [A, S, S] tensors are the
# largest of a layer (docs/memory.md). 384 is SQuAD's length, 128 GLUE's.
_KEEP_FOR_SEQ_LENGTH_AT_MOST = 384

# `recomputing` is True while `recompute_grad` builds a layer's recomputation
# in this thread (tf.distribute builds each replica in a thread of its own).
# The recomputed activations live only as long as that layer's backward
# pass, so attention and the output matmul keep them then, as autodiff does,
# instead of computing them a third time.
_graph_building = threading.local()


def _computes_again_in_backward(seq_length):
  """Whether the backward pass of the layer being built computes attention's
  probabilities and mask and GELU's output again instead of keeping them.

  Yes for sequences longer than `_KEEP_FOR_SEQ_LENGTH_AT_MOST` tokens (a
  length unknown when the graph is built counts as long), except inside a
  layer's recomputation, whose activations live only during that layer's
  own backward pass.
  """
  if _building_recomputation():
    return False
  return not (isinstance(seq_length, int) and
              seq_length <= _KEEP_FOR_SEQ_LENGTH_AT_MOST)


@contextlib.contextmanager
def _recomputation():
  """Marks the ops built inside as a layer's recomputation."""
  outer = _building_recomputation()
  _graph_building.recomputing = True
  try:
    yield
  finally:
    _graph_building.recomputing = outer


def _building_recomputation():
  """True while this thread builds a layer's recomputation."""
  return getattr(_graph_building, "recomputing", False)


class BertConfig(object):
  """Configuration for `BertModel`."""

  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02):
    """Constructs BertConfig.

    Args:
      vocab_size: Vocabulary size of `input_ids`.
      hidden_size: Size of the encoder layers and the pooler layer.
      num_hidden_layers: Number of transformer layers.
      num_attention_heads: Number of attention heads in each attention layer.
      intermediate_size: Size of the feed-forward ("intermediate") layer.
      hidden_act: Activation of the intermediate layer (name or function).
      hidden_dropout_prob: Dropout probability of the embeddings, the
        attention output and the layer output.
      attention_probs_dropout_prob: Dropout probability of the attention
        probabilities.
      max_position_embeddings: Longest sequence the model can take.
      type_vocab_size: Vocabulary size of `token_type_ids`.
      initializer_range: Stddev of the truncated normal weight initializer.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object):
    """Constructs a `BertConfig` from a Python dictionary of parameters."""
    config = BertConfig(vocab_size=None)
    for (key, value) in json_object.items():
      config.__dict__[key] = value
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """Constructs a `BertConfig` from a json file of parameters.

    Raises:
      FileNotFoundError: `json_file` does not exist.
      ValueError: the file is not a JSON object with an integer "vocab_size".
    """
    if not tf.io.gfile.exists(json_file):
      raise FileNotFoundError(
          "BERT config file %s does not exist; set --bert_config_file to the "
          "bert_config.json shipped with the model." % json_file)
    with tf.io.gfile.GFile(json_file, "r") as reader:
      text = reader.read()
    try:
      json_object = json.loads(text)
    except ValueError as e:
      raise ValueError(
          "BERT config file %s (--bert_config_file) is not valid JSON: %s"
          % (json_file, e)) from e
    if not isinstance(json_object, dict) or not isinstance(
        json_object.get("vocab_size"), int):
      raise ValueError(
          "BERT config file %s (--bert_config_file) must be a JSON object "
          "with an integer \"vocab_size\", as Google's bert_config.json."
          % json_file)
    return cls.from_dict(json_object)

  def to_dict(self):
    """Serializes this instance to a Python dictionary."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Serializes this instance to a JSON string."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel(object):
  """BERT model.

  Example usage:

  ```python
  input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
  input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
  token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])

  config = modeling.BertConfig(vocab_size=32000, hidden_size=512,
    num_hidden_layers=8, num_attention_heads=6, intermediate_size=1024)

  model = modeling.BertModel(config=config, is_training=True,
    input_ids=input_ids, input_mask=input_mask, token_type_ids=token_type_ids)

  label_embeddings = tf.compat.v1.get_variable(...)
  pooled_output = model.get_pooled_output()
  logits = tf.matmul(pooled_output, label_embeddings)
  ```
  """

  def __init__(self,
               config,
               is_training,
               input_ids,
               input_mask=None,
               token_type_ids=None,
               use_one_hot_embeddings=False,
               scope=None,
               *,
               gradient_checkpointing=False,
               compute_dtype=tf.float32,
               skip_padding=False):
    """Constructor for BertModel.

    Args:
      config: `BertConfig` instance.
      is_training: bool. True for training, False for eval (no dropout).
      input_ids: int32 Tensor of shape [batch_size, seq_length].
      input_mask: (optional) int32 Tensor of shape [batch_size, seq_length].
      token_type_ids: (optional) int32 Tensor of shape [batch_size,
        seq_length].
      use_one_hot_embeddings: (optional) bool. Look up the word embeddings
        with a one-hot matmul instead of a gather.
      scope: (optional) variable scope. Defaults to "bert".
      gradient_checkpointing: recompute each transformer layer but the last
        in the backward pass instead of keeping its activations.
      compute_dtype: tf.float32, tf.float16 or tf.bfloat16; the dtype of the
        matmuls, activations and outputs. Variables stay float32.
      skip_padding: run the encoder's feed-forward layers, LayerNorms and
        dropout on the positions where `input_mask` is 1 (and each first
        position) only; attention still runs over all positions, masked as
        always. The pooled output and the encoder layers' values at those
        positions are the same as without it (dropout masks included); the
        encoder layers are 0 at the other positions, where Google's model
        has values no head should read. An example that is all padding is
        computed whole. Gains in proportion to a batch's padding (GLUE's
        is often half or more); costs memory copies (query, key and value
        scattered to all positions, the context gathered back) per layer.

    Raises:
      ValueError: The config is invalid or one of the input tensor shapes
        is invalid.
    """
    compute_dtype = _check_compute_dtype(compute_dtype)
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    input_shape = get_shape_list(input_ids, expected_rank=2)
    batch_size = input_shape[0]
    seq_length = input_shape[1]

    if input_mask is None:
      input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)

    if token_type_ids is None:
      token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

    with tf.compat.v1.variable_scope(scope, default_name="bert"):
      with tf.compat.v1.variable_scope("embeddings"):
        (self.embedding_output, self.embedding_table) = embedding_lookup(
            input_ids=input_ids,
            vocab_size=config.vocab_size,
            embedding_size=config.hidden_size,
            initializer_range=config.initializer_range,
            word_embedding_name="word_embeddings",
            use_one_hot_embeddings=use_one_hot_embeddings)

        self.embedding_output = embedding_postprocessor(
            input_tensor=self.embedding_output,
            use_token_type=True,
            token_type_ids=token_type_ids,
            token_type_vocab_size=config.type_vocab_size,
            token_type_embedding_name="token_type_embeddings",
            use_position_embeddings=True,
            position_embedding_name="position_embeddings",
            initializer_range=config.initializer_range,
            max_position_embeddings=config.max_position_embeddings,
            dropout_prob=config.hidden_dropout_prob,
            compute_dtype=compute_dtype)

      intermediate_act_fn = _activation(config.hidden_act, is_training)
      with tf.compat.v1.variable_scope("encoder"):
        # [batch_size, seq_length, seq_length] float32 mask of the keys each
        # query position may attend to.
        attention_mask = create_attention_mask_from_input_mask(
            input_ids, input_mask)

        layout = (_RealTokens(input_mask, batch_size, seq_length)
                  if skip_padding else
                  _AllPositions(batch_size, seq_length))
        embedding_rows = layout.pack(reshape_to_matrix(self.embedding_output))
        all_layer_rows = _encoder_layer_rows(
            embedding_rows, layout, attention_mask, config.hidden_size,
            config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, intermediate_act_fn,
            config.hidden_dropout_prob, config.attention_probs_dropout_prob,
            config.initializer_range, gradient_checkpointing)
        self.all_encoder_layers = [
            tf.reshape(layout.unpack(rows),
                       [batch_size, seq_length, config.hidden_size])
            for rows in all_layer_rows]

        # The pooler reads the first token's final hidden state only. It is
        # computed by its own first-token pass through the last layer, so a
        # graph that fetches only the pooled output (classification) runs
        # that layer's query, attention output and feed-forward for one
        # position instead of all; TensorFlow prunes the full layer's unused
        # ops. The values, dropout masks included, are the full layer's.
        last_layer_rows = ([embedding_rows] + all_layer_rows)[-2]
        first_token_tensor = _first_token_of_last_layer(
            last_layer_rows, layout, attention_mask, config,
            intermediate_act_fn)

      self.sequence_output = self.all_encoder_layers[-1]
      # The pooler maps the first token's ([CLS]) final hidden state to a
      # fixed-size representation of the whole segment pair.
      with tf.compat.v1.variable_scope("pooler"):
        self.pooled_output = dense(
            first_token_tensor,
            config.hidden_size,
            "dense",
            activation=tf.tanh,
            kernel_initializer=create_initializer(config.initializer_range))

  def get_pooled_output(self):
    """[batch_size, hidden_size] tanh-pooled first token, compute dtype."""
    return self.pooled_output

  def get_sequence_output(self):
    """Gets final hidden layer of encoder.

    Returns:
      Tensor of shape [batch_size, seq_length, hidden_size] (compute dtype),
      the final hidden state of the transformer encoder.
    """
    return self.sequence_output

  def get_all_encoder_layers(self):
    """List of num_hidden_layers [batch_size, seq_length, hidden_size]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """Gets output of the embedding lookup (i.e., input to the transformer).

    Returns:
      Tensor of shape [batch_size, seq_length, hidden_size] (compute dtype):
      word + token type + position embeddings after LayerNorm and dropout.
    """
    return self.embedding_output

  def get_embedding_table(self):
    """The float32 [vocab_size, hidden_size] word embedding variable."""
    return self.embedding_table


def gelu(x):
  """Gaussian Error Linear Unit, tanh approximation (as the original).

  The backward pass keeps only `x` and recomputes the tanh from it: plain
  autodiff of the formula keeps about four [..., width] intermediates, which
  for the [batch * seq, intermediate_size] input of every layer was the
  largest activation term after attention (see docs/memory.md). Both passes
  are XLA-compiled elementwise kernels: as separate TensorFlow ops, the
  formula and its derivative were a dozen passes over the layer's widest
  tensor (10% of a bf16 BERT-Base training step on CPU).

  Args:
    x: float Tensor to perform activation on.

  Returns:
    `x` with the GELU activation applied, same shape and dtype.
  """
  return _tanh_gelu(tf.convert_to_tensor(x))


_GELU_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def _gelu_tanh(x):
  """tanh(sqrt(2/pi) * (x + 0.044715 x^3)), the core of the approximation."""
  return tf.tanh(_GELU_SQRT_2_OVER_PI * (x + _GELU_CUBIC * x * x * x))


def _at_least_float32(x):
  """`x` cast to float32 if it is float16 or bfloat16, else `x` itself."""
  if x.dtype in (tf.float16, tf.bfloat16):
    return tf.cast(x, tf.float32)
  return x


def _compiled_kernel(fn):
  """`fn` as an XLA-compiled tf.function whose call sites share one trace.

  A tf.function traces a new function, which XLA compiles anew, for each
  colocation context it is called in, and autodiff builds each gradient op
  colocated with its forward op: the kernels that backward passes call
  would be traced and compiled once per layer (about 100 compilations for
  BERT-Large with checkpointing, 4-7 s of its first step, each executable
  kept). A call here leaves the colocation context and places the call on
  the device the colocation gives it, which is the same placement.
  """
  compiled = tf.function(fn, jit_compile=True, autograph=False)

  @functools.wraps(fn)
  def call(*args):
    graph = tf.compat.v1.get_default_graph()
    colocated_with = list(graph._colocation_stack.peek_objs())  # pylint: disable=protected-access
    if not colocated_with:
      return compiled(*args)
    with graph.colocate_with(None, ignore_existing=True):
      with graph.device(colocated_with[0].device):
        return compiled(*args)

  return call


# The two kernels compute float16 / bfloat16 inputs in float32 and round once
# at the end: rounding after every op would cost XLA a conversion per op, and
# is less precise.
@_compiled_kernel
def _gelu_forward(x):
  """0.5 x (1 + tanh(...)), shape and dtype of `x`."""
  wide = _at_least_float32(x)
  return tf.cast(wide * (0.5 * (1.0 + _gelu_tanh(wide))), x.dtype)


@_compiled_kernel
def _gelu_backward(x, output_grad):
  """output_grad * d gelu(x) / dx, shape and dtype of `x`."""
  wide = _at_least_float32(x)
  tanh = _gelu_tanh(wide)
  inner_derivative = _GELU_SQRT_2_OVER_PI * (
      1.0 + 3.0 * _GELU_CUBIC * wide * wide)
  derivative = 0.5 * (1.0 + tanh) + (
      0.5 * wide * (1.0 - tanh * tanh) * inner_derivative)
  return tf.cast(_at_least_float32(output_grad) * derivative, x.dtype)


@tf.custom_gradient
def _tanh_gelu(x):
  """`gelu`, whose gradient needs nothing but `x`."""
  def grad_fn(output_grad):
    return _gelu_backward(x, output_grad)

  return _gelu_forward(x), grad_fn


def _fusable_gelu(x):
  """`gelu` as `tf.nn.gelu(approximate=True)` writes it: the same formula,
  in the form TensorFlow's grappler fuses, on CPU, with the matmul and bias
  before it into one oneDNN kernel (7-9% of a BERT-Base inference step).
  Its gradient is plain autodiff, which keeps more than `gelu`'s."""
  return tf.nn.gelu(x, approximate=True)


def gelu_exact(x):
  """GELU with the exact normal CDF: x * (1 + erf(x / sqrt(2))) / 2.

  Google's configs say "gelu" for the tanh approximation (`gelu`); models
  trained with the erf form (Hugging Face's "gelu", e.g. MiniLM) name this
  one "gelu_exact" in their bert_config.json. The two differ by up to about
  1e-3 per value.
  """
  return tf.nn.gelu(tf.convert_to_tensor(x), approximate=False)


def _activation(activation_string, is_training):
  """`get_activation`, with the fusable GELU when not training."""
  activation = get_activation(activation_string)
  if activation is gelu and not is_training:
    return _fusable_gelu
  return activation


def get_activation(activation_string):
  """Maps a string to a Python function, e.g., "relu" => `tf.nn.relu`.

  Args:
    activation_string: String name of the activation function, or a
      function (returned as is).

  Returns:
    A Python function for the activation, or None for "linear" / empty.

  Raises:
    ValueError: The `activation_string` does not name a known activation.
  """
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  act = activation_string.lower()
  activations = {"linear": None, "relu": tf.nn.relu, "gelu": gelu,
                 "gelu_exact": gelu_exact, "tanh": tf.tanh}
  if act not in activations:
    raise ValueError("Unsupported activation: %s (hidden_act in the BERT "
                     "config must be one of %s)"
                     % (act, ", ".join(sorted(activations))))
  return activations[act]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Maps the variables in `tvars` to the same-named checkpoint variables.

  Args:
    tvars: list of variables (usually the trainable variables).
    init_checkpoint: checkpoint prefix, e.g. ".../bert_model.ckpt".

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict of
    checkpoint name -> variable name for `tf.compat.v1.train.
    init_from_checkpoint`, and a dict whose keys are the initialized names,
    each both as "name" and "name:0".

  Raises:
    ValueError: the checkpoint cannot be read.
  """
  name_to_variable = collections.OrderedDict()
  for var in tvars:
    name = var.name
    m = re.match("^(.*):\\d+$", name)
    if m is not None:
      name = m.group(1)
    name_to_variable[name] = var

  try:
    init_vars = tf.train.list_variables(init_checkpoint)
  except (tf.errors.NotFoundError, tf.errors.DataLossError,
          ValueError) as e:
    raise ValueError(
        "Cannot read checkpoint %s: %s. Set --init_checkpoint to the "
        "checkpoint prefix (e.g. .../bert_model.ckpt, without .index or "
        ".data-*)." % (init_checkpoint, e)) from e

  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for (name, _) in init_vars:
    if name not in name_to_variable:
      continue
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1

  return (assignment_map, initialized_variable_names)


def dropout(input_tensor, dropout_prob, name=None):
  """Stateless dropout: the mask depends on (graph seed, site, step).

  The site is the current variable scope name plus `name`, so a layer that is
  recomputed in the backward pass (gradient checkpointing) draws the same
  mask. The step is the first tensor of the graph collection "micro_step",
  else the global step; with neither, this is ordinary stateful dropout.

  Args:
    input_tensor: float Tensor of any shape.
    dropout_prob: Python float, the probability of dropping out a value
      (NOT of keeping it, as in the original).
    name: (optional) distinguishes several dropout sites in one variable
      scope.

  Returns:
    A version of `input_tensor` with dropout applied, same shape and dtype.
  """
  if not _check_dropout_prob(dropout_prob):
    return input_tensor
  keep = _dropout_keep_mask(input_tensor, dropout_prob, name)
  return _apply_keep_mask(input_tensor, keep, dropout_prob)


def _dropout_keep_mask(input_tensor, dropout_prob, name, draw_shape=None):
  """bool Tensor shaped like `input_tensor`, True where a value is kept.

  Stateless (see `dropout`) when the graph has a step, else stateful.
  With `draw_shape`, the mask is drawn for (and shaped like) a tensor of that
  shape, of which the caller slices the part `input_tensor` holds.
  """
  shape = tf.shape(input_tensor) if draw_shape is None else draw_shape
  return _keep_mask_drawer(shape, dropout_prob, name)()


def _keep_mask_drawer(shape, dropout_prob, name):
  """A function `draw(after=None)` -> bool keep mask of `shape`.

  Every call of a stateless drawer draws the same mask again, after the
  tensor `after` exists: a backward pass redraws a mask instead of keeping
  it. Without a step (stateful dropout) the mask is drawn once, and every
  call returns that tensor.
  """
  step = _dropout_step()
  if step is None:
    # A bool mask (1 byte) is what the backward pass keeps; the float32
    # uniform values are freed right after the comparison.
    keep = tf.random.uniform(shape) >= dropout_prob

    def drawn_once(after=None):
      del after  # A stateful mask cannot be drawn again; it is kept.
      return keep

    return drawn_once
  seed = tf.stack([tf.constant(_dropout_site_seed(name), tf.int64), step])
  threshold = tf.constant(_drop_threshold_16bit(dropout_prob), tf.uint16)

  def draw(after=None):
    return _stateless_keep_mask_16bit(
        tf.cast(shape, tf.int64),
        seed if after is None else _after(after, seed), threshold)

  return draw


def _drop_threshold_16bit(dropout_prob):
  """Python int t: a uniform 16-bit value below t drops (rate t / 65536).

  The drop rate is `dropout_prob` rounded to a multiple of 1/65536 (0.1 ->
  0.100006); the kept values are still scaled by 1 / (1 - dropout_prob).
  """
  return int(round(dropout_prob * 65536))


# SplitMix64 (Steele, Lea and Flood, 2014; the generator of Java's
# SplittableRandom): output i of the stream with key k is
# finalize(k + i * gamma).
_SPLITMIX64_GAMMA = 0x9E3779B97F4A7C15
_SPLITMIX64_FINALIZER = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB),
                         (31, None))


def _splitmix64_finalize(z):
  """SplitMix64's output function of uint64 Tensor `z`, elementwise."""
  for shift, multiplier in _SPLITMIX64_FINALIZER:
    z = tf.bitwise.bitwise_xor(
        z, tf.bitwise.right_shift(z, tf.constant(shift, tf.uint64)))
    if multiplier is not None:
      z *= tf.constant(multiplier, tf.uint64)
  return z


@_compiled_kernel
def _stateless_keep_mask_16bit(shape, seed, threshold):
  """bool Tensor of `shape`: uniform 16-bit values >= `threshold`.

  The values are a function of `seed` alone: the SplitMix64 stream keyed
  by both seed words, each 64-bit output giving four 16-bit values. It is
  one compiled kernel of integer arithmetic that vectorizes, where
  TensorFlow's Philox kernel takes 5x as long for the same bits' worth
  (an attention mask of BERT-Base, 384 tokens, batch 4: 1.8 against 8.8 ms
  on this project's CPU); compiled, the numbers are the same with and
  without --use_xla. A drop rate needs no finer resolution than 16 bits.

  Args:
    shape: int64 Tensor [rank], the mask's shape (a compile-time constant).
    seed: int64 Tensor [2], the stateless seed.
    threshold: uint16 scalar Tensor.
  """
  size = tf.reduce_prod(shape)
  words = tf.bitcast(seed, tf.uint64)
  key = _splitmix64_finalize(
      tf.bitwise.bitwise_xor(words[0], _splitmix64_finalize(words[1])))
  counter = tf.bitcast(tf.range(1, (size + 3) // 4 + 1, dtype=tf.int64),
                       tf.uint64)
  bits = _splitmix64_finalize(
      key + counter * tf.constant(_SPLITMIX64_GAMMA, tf.uint64))
  # [draws, 4] -> [4 * draws]; the slice drops the unused values, if any.
  values = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
  return tf.reshape(values >= threshold, shape)


def _after(dependency, tensor):
  """Identity of `tensor` that exists only once `dependency` does.

  A backward pass recomputes a forward value from it: the control
  dependency keeps grappler from merging the recomputation with the forward
  op it repeats, which would keep the forward tensor alive instead.
  """
  with tf.control_dependencies([dependency]):
    return tf.identity(tensor)


def _first_token_dropout(first_token, seq_length, dropout_prob):
  """`dropout` of [batch_size, width] first-position rows of a layer.

  The mask is the first position's rows of the mask that `dropout` draws
  for the layer's whole [batch_size * seq_length, width] tensor in the same
  variable scope.
  """
  if not _check_dropout_prob(dropout_prob):
    return first_token
  batch_size, width = get_shape_list(first_token, expected_rank=2)
  keep = _dropout_keep_mask(first_token, dropout_prob, None,
                            draw_shape=[batch_size * seq_length, width])
  keep = tf.reshape(keep, [batch_size, seq_length, width])[:, 0, :]
  return _apply_keep_mask(first_token, keep, dropout_prob)


def _apply_keep_mask(input_tensor, keep, dropout_prob):
  """Zeroes `input_tensor` where `keep` is False and scales the rest up."""
  scale = tf.cast(1.0 / (1.0 - dropout_prob), input_tensor.dtype)
  return _zero_dropped(input_tensor * scale, keep)


def _zero_dropped(input_tensor, keep):
  """`input_tensor` with 0 where the bool Tensor `keep` is False."""
  return tf.where(keep, input_tensor, tf.zeros([], dtype=input_tensor.dtype))


def _check_dropout_prob(dropout_prob):
  """False for no dropout (None or 0), True for a valid probability."""
  if dropout_prob is None or dropout_prob == 0.0:
    return False
  if not 0.0 < dropout_prob < 1.0:
    raise ValueError("dropout_prob must be in [0, 1), got %r (check "
                     "hidden_dropout_prob / attention_probs_dropout_prob in "
                     "the BERT config)." % (dropout_prob,))
  return True


def _dropout_step():
  """int64 scalar step for dropout masks, or None when there is none."""
  graph = tf.compat.v1.get_default_graph()
  steps = graph.get_collection(MICRO_STEP_COLLECTION)
  step = steps[0] if steps else tf.compat.v1.train.get_global_step(graph)
  if step is None:
    return None
  return tf.cast(step, tf.int64)


def _dropout_site_seed(name):
  """Non-negative int64 seed: graph seed (high bits) and site key (low)."""
  graph_seed = tf.compat.v1.get_default_graph().seed or 0
  site = "%s/%s" % (tf.compat.v1.get_variable_scope().name, name or "dropout")
  site_key = zlib.crc32(site.encode("utf-8"))
  return ((graph_seed & 0x7FFFFFFF) << 32) | site_key


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, statistics in float32.

  The backward pass keeps the normalized float32 values and the inverse
  standard deviations only (see `_normalize`).

  Args:
    input_tensor: float Tensor [..., width].
    name: (optional) variable scope; "LayerNorm" (Google's name) by default.

  Returns:
    Tensor of the same shape and dtype as `input_tensor`. Creates
    `<name>/beta` and `<name>/gamma` of shape [width].
  """
  width = input_tensor.shape[-1]
  # A fixed scope name (never uniquified) keeps variable names stable when a
  # layer is rebuilt for gradient recomputation.
  with tf.compat.v1.variable_scope(name or "LayerNorm"):
    beta = tf.compat.v1.get_variable(
        "beta", [width], initializer=tf.compat.v1.zeros_initializer())
    gamma = tf.compat.v1.get_variable(
        "gamma", [width], initializer=tf.compat.v1.ones_initializer())
  output = _normalize(tf.cast(input_tensor, tf.float32), gamma, beta)
  return tf.cast(output, input_tensor.dtype)


@tf.custom_gradient
def _normalize(x, gamma, beta):
  """(x - mean) / sqrt(variance + 1e-12) * gamma + beta over the last axis.

  Autodiff of the formula keeps two [..., width] float32 tensors per call
  (the input and the scale broadcast to it); this gradient needs only the
  normalized values and the [..., 1] inverse standard deviations.

  Args:
    x: float32 Tensor [..., width].
    gamma, beta: float32 Tensors [width].

  Returns:
    float32 Tensor [..., width].
  """
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  inverse_std = tf.math.rsqrt(variance + _LAYER_NORM_EPSILON)
  normalized = (x - mean) * inverse_std
  output = normalized * gamma + beta

  def grad_fn(output_grad):
    outer_axes = list(range(output_grad.shape.ndims - 1))
    scaled_grad = output_grad * gamma
    # d/dx of the normalized values: the gradient minus its mean and minus
    # its projection on the normalized values, over the standard deviation.
    x_grad = inverse_std * (
        scaled_grad
        - tf.reduce_mean(scaled_grad, axis=-1, keepdims=True)
        - normalized * tf.reduce_mean(scaled_grad * normalized, axis=-1,
                                      keepdims=True))
    gamma_grad = tf.reduce_sum(output_grad * normalized, axis=outer_axes)
    beta_grad = tf.reduce_sum(output_grad, axis=outer_axes)
    return x_grad, gamma_grad, beta_grad

  return output, grad_fn


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  """Runs layer normalization followed by dropout."""
  output_tensor = layer_norm(input_tensor, name)
  output_tensor = dropout(output_tensor, dropout_prob)
  return output_tensor


def create_initializer(initializer_range=0.02):
  """Creates a `truncated_normal_initializer` with the given range."""
  return tf.compat.v1.truncated_normal_initializer(stddev=initializer_range)


def dense(x, units, name, activation=None, kernel_initializer=None, *,
          input_activation=None):
  """Fully connected layer with Google's variable names.

  Args:
    x: float Tensor [batch, in_width] in the compute dtype.
    units: int, output width.
    name: variable scope; creates `<name>/kernel` [in_width, units] and
      `<name>/bias` [units], both float32.
    activation: (optional) function applied to the output.
    kernel_initializer: (optional) defaults to `create_initializer()`.
    input_activation: (optional) function applied to `x` first, whose
      result the backward pass computes again instead of keeping it (see
      `_matmul_of_activation`).

  Returns:
    Tensor [batch, units] in the dtype of `x`.
  """
  assert_rank(x, 2)
  in_width = x.shape[-1]
  with tf.compat.v1.variable_scope(name):
    kernel = tf.compat.v1.get_variable(
        "kernel", [in_width, units],
        initializer=kernel_initializer or create_initializer())
    bias = tf.compat.v1.get_variable(
        "bias", [units], initializer=tf.compat.v1.zeros_initializer())
  # Master weights stay float32; cast at use for reduced-precision compute.
  if input_activation is None:
    output = tf.matmul(x, tf.cast(kernel, x.dtype))
  else:
    output = _matmul_of_activation(x, tf.cast(kernel, x.dtype),
                                   input_activation)
  output = _bias_add(output, tf.cast(bias, x.dtype))
  if activation is not None:
    output = activation(output)
  return output


def _bias_add(value, bias):
  """tf.nn.bias_add of `value` [batch, units] and `bias` [units].

  In bfloat16 graphs the bias's gradient is a `reduce_sum` of the incoming
  gradient's rows: TensorFlow's BiasAddGrad sums bfloat16 values in
  bfloat16 (measured: off by 5 on a sum of 1,024 standard normal values,
  about 5%); `reduce_sum` sums in float32 and rounds once, and is faster.
  """
  if value.dtype != tf.bfloat16 or tf.executing_eagerly():
    return tf.nn.bias_add(value, bias)
  with tf.compat.v1.get_default_graph().gradient_override_map(
      {"BiasAdd": _BIAS_GRADIENT_BY_SUM}):
    return tf.nn.bias_add(value, bias)


_BIAS_GRADIENT_BY_SUM = "BertBiasAddGradientBySum"


@tf.RegisterGradient(_BIAS_GRADIENT_BY_SUM)
def _bias_add_gradient_by_sum(op, output_grad):
  """Gradients of BiasAdd (value [..., units], bias [units]); `_bias_add`."""
  del op  # The gradient needs no forward tensor.
  rows = tf.reshape(output_grad, [-1, tf.shape(output_grad)[-1]])
  return output_grad, tf.reduce_sum(rows, axis=0)


def _matmul_of_activation(x, kernel, activation):
  """matmul(activation(x), kernel), keeping only `x` for the backward pass.

  Autodiff keeps `activation(x)` for the kernel's gradient besides what the
  activation's own gradient keeps (`gelu`'s: `x`). Here the backward pass
  computes the activation again, one elementwise pass, and keeps nothing
  else: for a BERT layer's [batch * seq, intermediate_size] GELU output that
  is the largest tensor a layer keeps (16 MiB per layer for BERT-Large at
  512 tokens and batch 2, in float32). The gradients are the same. Used
  where `_computes_again_in_backward` says so.

  Args:
    x: Tensor [batch, in_width] in the compute dtype.
    kernel: Tensor [in_width, units] in the compute dtype.
    activation: elementwise function.

  Returns:
    Tensor [batch, units].
  """
  @tf.custom_gradient
  def matmul_fn(x, kernel):
    def grad_fn(output_grad):
      x_again = _after(output_grad, x)
      activated = activation(x_again)
      kernel_grad = tf.matmul(activated, output_grad, transpose_a=True)
      activated_grad = tf.matmul(output_grad, kernel, transpose_b=True)
      x_grad = tf.gradients(activated, x_again, grad_ys=activated_grad)[0]
      return x_grad, kernel_grad

    return tf.matmul(activation(x), kernel), grad_fn

  return matmul_fn(x, kernel)


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
  """Looks up word embeddings for id tensor.

  Args:
    input_ids: int32 Tensor of shape [batch_size, seq_length] containing word
      ids.
    vocab_size: int. Size of the embedding vocabulary.
    embedding_size: int. Width of the word embeddings.
    initializer_range: float. Embedding initialization range.
    word_embedding_name: string. Name of the embedding table.
    use_one_hot_embeddings: bool. If True, use a one-hot matmul for the
      lookup; if False, use `tf.gather()`.

  Returns:
    (output, embedding_table): float32 Tensor [batch_size, seq_length,
    embedding_size] and the float32 [vocab_size, embedding_size] variable.
  """
  # Ids of shape [batch_size, seq_length] become [batch_size, seq_length, 1].
  if input_ids.shape.ndims == 2:
    input_ids = tf.expand_dims(input_ids, axis=-1)

  embedding_table = tf.compat.v1.get_variable(
      name=word_embedding_name,
      shape=[vocab_size, embedding_size],
      initializer=create_initializer(initializer_range))

  flat_input_ids = tf.reshape(input_ids, [-1])
  if use_one_hot_embeddings:
    one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
    output = tf.matmul(one_hot_input_ids, embedding_table)
  else:
    output = tf.gather(embedding_table, flat_input_ids)

  input_shape = get_shape_list(input_ids)
  output = tf.reshape(output,
                      input_shape[0:-1] + [input_shape[-1] * embedding_size])
  return (output, embedding_table)


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1,
                            *,
                            compute_dtype=None):
  """Adds token type and position embeddings, then LayerNorm and dropout.

  The sum and LayerNorm run in the dtype of `input_tensor` (float32 from
  `embedding_lookup`); the result is cast to `compute_dtype` before dropout.

  Args:
    input_tensor: float Tensor of shape [batch_size, seq_length,
      embedding_size].
    use_token_type: bool. Whether to add embeddings for `token_type_ids`.
    token_type_ids: (optional) int32 Tensor of shape [batch_size,
      seq_length]. Must be specified if `use_token_type` is True.
    token_type_vocab_size: int. The vocabulary size of `token_type_ids`.
    token_type_embedding_name: string. Name of the token type table.
    use_position_embeddings: bool. Whether to add position embeddings.
    position_embedding_name: string. Name of the position table.
    initializer_range: float. Range of the weight initialization.
    max_position_embeddings: int. Longest sequence the table covers.
    dropout_prob: float. Dropout probability applied to the final output.
    compute_dtype: (optional) dtype of the output; the input's by default.

  Returns:
    Tensor [batch_size, seq_length, embedding_size] in `compute_dtype`.

  Raises:
    ValueError: One of the tensor shapes or input values is invalid.
  """
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size = input_shape[0]
  seq_length = input_shape[1]
  width = input_shape[2]

  output = input_tensor

  if use_token_type:
    if token_type_ids is None:
      raise ValueError("`token_type_ids` must be specified if "
                       "`use_token_type` is True.")
    token_type_table = tf.compat.v1.get_variable(
        name=token_type_embedding_name,
        shape=[token_type_vocab_size, width],
        initializer=create_initializer(initializer_range))
    # A one-hot matmul, as in Google's code, rather than a gather: the table's
    # gradient is then dense, which is how Google's global-norm clip counts
    # it (a gather's gradient would count every looked-up row).
    one_hot_ids = tf.one_hot(tf.reshape(token_type_ids, [-1]),
                             depth=token_type_vocab_size)
    token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
    token_type_embeddings = tf.reshape(token_type_embeddings,
                                       [batch_size, seq_length, width])
    output += tf.cast(token_type_embeddings, output.dtype)

  if use_position_embeddings:
    if isinstance(seq_length, int) and seq_length > max_position_embeddings:
      raise ValueError(
          "Sequence length %d exceeds max_position_embeddings=%d of the BERT "
          "config; lower --max_seq_length." % (seq_length,
                                               max_position_embeddings))
    full_position_embeddings = tf.compat.v1.get_variable(
        name=position_embedding_name,
        shape=[max_position_embeddings, width],
        initializer=create_initializer(initializer_range))
    # The table covers max_position_embeddings positions; the first
    # seq_length rows are broadcast over the batch.
    position_embeddings = tf.slice(full_position_embeddings, [0, 0],
                                   [seq_length, -1])
    output += tf.cast(tf.expand_dims(position_embeddings, 0), output.dtype)

  output = layer_norm(output)
  output = tf.cast(output, compute_dtype or output.dtype)
  return dropout(output, dropout_prob)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """Create 3D attention mask from a 2D tensor mask.

  Args:
    from_tensor: 2D or 3D Tensor of shape [batch_size, from_seq_length, ...].
    to_mask: int32 Tensor of shape [batch_size, to_seq_length].

  Returns:
    float32 Tensor of shape [batch_size, from_seq_length, to_seq_length].
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  batch_size = from_shape[0]
  from_seq_length = from_shape[1]

  to_shape = get_shape_list(to_mask, expected_rank=2)
  to_seq_length = to_shape[1]

  to_mask = tf.cast(
      tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)

  # Every query position attends to the same keys (padding is masked only
  # on the key side), so a broadcast over from_seq_length suffices.
  broadcast_ones = tf.ones(
      shape=[batch_size, from_seq_length, 1], dtype=tf.float32)

  return broadcast_ones * to_mask


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None,
                    *,
                    dropout_from_seq_length=None,
                    from_layout=None,
                    to_layout=None):
  """Multi-headed scaled dot-product attention from `from_tensor` to
  `to_tensor` ("Attention Is All You Need").

  The softmax runs in float32; the matmuls, the scores' scaling and mask
  addition (see `_attention_probs`) in the dtype of `from_tensor`.

  Args:
    from_tensor: Tensor [batch_size, from_seq_length, from_width] or its 2D
      form [batch_size * from_seq_length, from_width].
    to_tensor: Tensor [batch_size, to_seq_length, to_width] or 2D likewise.
    attention_mask: (optional) float32 Tensor [batch_size, from_seq_length,
      to_seq_length], 1 where attention is allowed and 0 where not.
    num_attention_heads: int. Number of attention heads.
    size_per_head: int. Size of each attention head.
    query_act: (optional) Activation function for the query transform.
    key_act: (optional) Activation function for the key transform.
    value_act: (optional) Activation function for the value transform.
    attention_probs_dropout_prob: (optional) float. Dropout probability of
      the attention probabilities.
    initializer_range: float. Range of the weight initializer.
    do_return_2d_tensor: bool. Return [batch_size * from_seq_length,
      num_attention_heads * size_per_head] instead of the 3D form.
    batch_size: (optional) int. Needed when the inputs are 2D.
    from_seq_length: (optional) Needed when the inputs are 2D.
    to_seq_length: (optional) Needed when the inputs are 2D.
    dropout_from_seq_length: (optional) draw the attention dropout mask as
      for this many query positions and use its first `from_seq_length`
      rows: with the first positions of a sequence as `from_tensor`, the
      result is those rows of the whole sequence's, dropout included.
    from_layout: (optional) with 2D inputs, `_RealTokens` whose rows
      `from_tensor` holds instead of all `batch_size * from_seq_length`
      positions; the 2D result then has the same rows.
    to_layout: (optional) likewise for `to_tensor`.

  Returns:
    Tensor [batch_size, from_seq_length, num_attention_heads *
    size_per_head] (or its 2D form), in the dtype of `from_tensor`.

  Raises:
    ValueError: Any of the arguments or tensor shapes are invalid.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])

  if len(from_shape) != len(to_shape):
    raise ValueError(
        "The rank of `from_tensor` must match the rank of `to_tensor`.")

  if len(from_shape) == 3:
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]
    to_seq_length = to_shape[1]
  elif (batch_size is None or from_seq_length is None or
        to_seq_length is None):
    raise ValueError(
        "When passing in rank 2 tensors to attention_layer, the values "
        "for `batch_size`, `from_seq_length`, and `to_seq_length` "
        "must all be specified.")

  # B = batch size, F = from_seq_length, T = to_seq_length,
  # N = num_attention_heads, H = size_per_head.
  from_tensor_2d = reshape_to_matrix(from_tensor)
  to_tensor_2d = reshape_to_matrix(to_tensor)
  initializer = create_initializer(initializer_range)
  width = num_attention_heads * size_per_head

  # [B*F, N*H], [B*T, N*H], [B*T, N*H]
  query_layer = dense(from_tensor_2d, width, "query", activation=query_act,
                      kernel_initializer=initializer)
  key_layer = dense(to_tensor_2d, width, "key", activation=key_act,
                    kernel_initializer=initializer)
  value_layer = dense(to_tensor_2d, width, "value", activation=value_act,
                      kernel_initializer=initializer)
  # Attention itself runs on all positions, padding included (masked).
  if from_layout is not None:
    query_layer = from_layout.unpack(query_layer)
  if to_layout is not None:
    key_layer = to_layout.unpack(key_layer)
    value_layer = to_layout.unpack(value_layer)

  # [B, N, F, H], [B, N, T, H], [B, N, T, H]
  query_layer = _transpose_for_scores(query_layer, batch_size,
                                      num_attention_heads, from_seq_length,
                                      size_per_head)
  key_layer = _transpose_for_scores(key_layer, batch_size,
                                    num_attention_heads, to_seq_length,
                                    size_per_head)
  value_layer = _transpose_for_scores(value_layer, batch_size,
                                      num_attention_heads, to_seq_length,
                                      size_per_head)

  adder = None
  if attention_mask is not None:
    # [B, 1, F, T], broadcast over the heads.
    attention_mask = tf.expand_dims(
        tf.cast(attention_mask, tf.float32), axis=[1])
    adder = (1.0 - attention_mask) * _MASK_ADDER

  # Dropping whole tokens to attend to is unusual but follows the original
  # Transformer paper.
  draw_keep = None
  if _check_dropout_prob(attention_probs_dropout_prob):
    draw_keep = _attention_keep_mask_drawer(
        [batch_size, num_attention_heads, from_seq_length, to_seq_length],
        attention_probs_dropout_prob, dropout_from_seq_length)

  # [B, N, F, H]
  context_layer = _attention_context(query_layer, key_layer, value_layer,
                                     adder, draw_keep,
                                     attention_probs_dropout_prob)

  # [B, N, F, H] -> [B, F, N, H]
  context_layer = tf.transpose(a=context_layer, perm=[0, 2, 1, 3])

  if do_return_2d_tensor:
    # [B*F, N*H]
    context_layer = tf.reshape(context_layer,
                               [batch_size * from_seq_length, width])
    return (context_layer if from_layout is None
            else from_layout.pack(context_layer))
  # [B, F, N*H]
  return tf.reshape(context_layer, [batch_size, from_seq_length, width])


def _attention_keep_mask_drawer(probs_shape, dropout_prob,
                                dropout_from_seq_length=None):
  """`_keep_mask_drawer` of the attention probabilities [B, N, F, T].

  With `dropout_from_seq_length`, each draw is the first F query rows of
  the mask drawn for that many query positions.
  """
  if dropout_from_seq_length is None:
    return _keep_mask_drawer(probs_shape, dropout_prob, "attention_probs")
  batch_size, num_heads, from_seq_length, to_seq_length = probs_shape
  draw_all_rows = _keep_mask_drawer(
      [batch_size, num_heads, dropout_from_seq_length, to_seq_length],
      dropout_prob, "attention_probs")

  def draw_first_rows(after=None):
    return draw_all_rows(after)[:, :, :from_seq_length, :]

  return draw_first_rows


def _attention_probs(query, key, adder):
  """float32 softmax(query key^T / sqrt(H) + adder): [B, N, F, T].

  The scaling and the mask addition run in the compute dtype, where grappler
  fuses them into the matmul (bfloat16 BERT-Base at 384 tokens: the scores'
  forward pass 15 -> 10 ms per layer), and the softmax in float32. In
  reduced precision the matmul rounds the scores to the compute dtype either
  way; scaling by a power of two (1/8 for 64-wide heads) and adding 0 change
  no unmasked score, and a masked one still gets a probability of exactly 0.
  (Other head sizes' scales are rounded to the compute dtype, a relative
  change below that of the scores' own rounding.)

  Args:
    query: Tensor [B, N, F, H] in the compute dtype.
    key: Tensor [B, N, T, H] in the compute dtype.
    adder: (optional) float32 Tensor [B, 1, F, T], 0 where attention is
      allowed and _MASK_ADDER where not.
  """
  dtype = query.dtype
  scores = tf.matmul(query, key, transpose_b=True)
  scores *= tf.constant(_score_scale(query), dtype)
  if adder is not None:
    scores += tf.cast(adder, dtype)
  return tf.nn.softmax(tf.cast(scores, tf.float32))


def _score_scale(query):
  """1 / sqrt(size_per_head) of a [B, N, F, H] query."""
  return 1.0 / math.sqrt(float(get_shape_list(query)[-1]))


def _attention_context(query, key, value, adder, draw_keep, dropout_prob):
  """matmul(dropout(softmax(query key^T / sqrt(H) + adder)), value).

  Three ways to the same gradients, by what the layer can afford to keep:

  * Sequences of at most `_KEEP_FOR_SEQ_LENGTH_AT_MOST` tokens: autodiff,
    which keeps the float32 probabilities, the dropped probabilities and
    the mask, the fastest.
  * Longer sequences: the backward pass keeps query, key and value, which
    the matmuls' own gradients need anyway, and nothing of size
    [B, N, F, T]: it computes the probabilities again and draws the dropout
    mask again, as FlashAttention does. Autodiff would keep, for BERT-Large
    at 512 tokens, 36 MiB per layer and example in float32.
  * A layer's recomputation (gradient checkpointing), whose activations
    live only during that layer's backward pass: the backward pass keeps
    the probabilities and the mask, but neither the dropped probabilities
    nor anything else of size [B, N, F, T], and takes the softmax's row
    sums from the context instead (FlashAttention's sum(dO * O)). At its
    peak it holds two [B, N, F, T] tensors where autodiff holds four: this
    is where a checkpointed model's peak comes (docs/memory.md).

  Args:
    query: Tensor [B, N, F, H] in the compute dtype.
    key: Tensor [B, N, T, H] in the compute dtype.
    value: Tensor [B, N, T, H] in the compute dtype.
    adder: (optional) float32 Tensor [B, 1, F, T], see `_attention_probs`.
    draw_keep: (optional) `_keep_mask_drawer` of the attention dropout mask;
      None for no dropout.
    dropout_prob: Python float, the attention dropout probability.

  Returns:
    Tensor [B, N, F, H] in the compute dtype.
  """
  dtype = value.dtype
  # Dropout's 1 / (1 - p) scales the context [B, N, F, H] instead of the
  # probabilities [B, N, F, T]: the same product up to rounding, with fewer
  # multiplications.
  keep_scale = (tf.constant(1.0 / (1.0 - dropout_prob), dtype) if draw_keep
                else None)

  def dropped_probs(probs, keep):
    """The probabilities in the compute dtype, zero where dropped (unscaled)."""
    probs = tf.cast(probs, dtype)
    if keep is None:
      return probs
    return _zero_dropped(probs, keep)

  def forward(query, key, value):
    """(context, float32 probabilities, keep mask or None)."""
    keep = draw_keep() if draw_keep else None
    probs = _attention_probs(query, key, adder)
    output = tf.matmul(dropped_probs(probs, keep), value)
    if keep_scale is not None:
      output *= keep_scale
    return output, probs, keep

  keeps_probs = _building_recomputation()
  if not keeps_probs and not _computes_again_in_backward(
      get_shape_list(key)[2]):
    return forward(query, key, value)[0]

  @tf.custom_gradient
  def context_fn(query, key, value):
    output, kept_probs, kept_keep = forward(query, key, value)

    def grad_fn(context_grad):
      if keeps_probs:
        query_again = query
        probs, keep = kept_probs, kept_keep
      else:
        query_again = _after(context_grad, query)
        probs = _attention_probs(query_again, key, adder)
        keep = draw_keep(after=context_grad) if draw_keep else None
      scaled_grad = (context_grad if keep_scale is None
                     else context_grad * keep_scale)
      # The dropped probabilities exist only for the value's gradient, and
      # the probabilities' gradient waits for it, so that the two [B, N, F,
      # T] tensors are never alive at once.
      value_grad = tf.matmul(
          dropped_probs(_after(context_grad, probs), keep), scaled_grad,
          transpose_a=True)
      probs_grad = tf.matmul(_after(value_grad, scaled_grad), value,
                             transpose_b=True)
      if keep is not None:
        probs_grad = _zero_dropped(probs_grad, keep)
      probs_grad = tf.cast(probs_grad, tf.float32)
      # Softmax Jacobian-vector product p * (g - sum(g * p)), then the
      # scaling, in float32; the matmuls' gradients in the compute dtype.
      if keeps_probs:
        # sum(g * p) over the keys is sum(context_grad * context) over the
        # head's width: a [B, N, F, H] product instead of a [B, N, F, T] one.
        row_sums = tf.reduce_sum(
            tf.cast(context_grad, tf.float32) * tf.cast(output, tf.float32),
            axis=-1, keepdims=True)
      else:
        row_sums = tf.reduce_sum(probs_grad * probs, axis=-1, keepdims=True)
      scores_grad = tf.cast(probs * (probs_grad - row_sums), dtype)
      # The scores' scale multiplies the [B, N, F, H] gradients, not the
      # [B, N, F, T] one: grappler would push a constant factor of the
      # product down to the probabilities, computing a scaled copy of them
      # as soon as they exist.
      scale = tf.constant(_score_scale(query), dtype)
      query_grad = tf.matmul(scores_grad, key) * scale
      key_grad = tf.matmul(scores_grad, query_again, transpose_a=True) * scale
      return query_grad, key_grad, value_grad

    return output, grad_fn

  return context_fn(query, key, value)


def _first_token_of_last_layer(layer_rows, layout, attention_mask, config,
                               intermediate_act_fn):
  """[batch_size, hidden_size]: the last encoder layer's first position.

  Runs the last layer (its variables, in scope "layer_<n-1>" of the current
  "encoder" scope) with the first position as the only query: keys and
  values still cover every position, the rest is one row per example.

  Args:
    layer_rows: Tensor [rows, hidden_size], the last layer's input at the
      positions `layout` holds.
    layout: `_AllPositions` or `_RealTokens`.
    attention_mask: float32 Tensor [batch_size, seq_length, seq_length].
    config: the model's `BertConfig` (dropout already off in eval mode).
    intermediate_act_fn: the activation the full layer uses.
  """
  with tf.compat.v1.variable_scope(
      "layer_%d" % (config.num_hidden_layers - 1), reuse=True):
    residual_sum = _transformer_layer_body(
        layer_rows, layout, attention_mask, config.hidden_size,
        config.num_attention_heads, config.intermediate_size,
        intermediate_act_fn, config.hidden_dropout_prob,
        config.attention_probs_dropout_prob, config.initializer_range,
        first_token_only=True)
    with tf.compat.v1.variable_scope("output"):
      return layer_norm(residual_sum)


class _AllPositions(object):
  """Rows of a layer's 2-D activations: every position of the batch.

  A layer's [batch_size * seq_length, width] activations, in row-major
  order of (example, position), as in Google's model. `_RealTokens` holds
  the non-padding positions alone; both offer the same methods, so a layer
  is built the same way for either.
  """

  def __init__(self, batch_size, seq_length):
    self.batch_size = batch_size
    self.seq_length = seq_length

  def pack(self, padded):
    """[batch_size * seq_length, width] -> this layout's rows."""
    return padded

  def unpack(self, rows):
    """This layout's rows -> [batch_size * seq_length, width]."""
    return rows

  def first_rows(self, rows):
    """[batch_size, width]: each example's first position (its [CLS])."""
    width = get_shape_list(rows, expected_rank=2)[1]
    return tf.reshape(rows, [self.batch_size, self.seq_length, width])[:, 0]

  def dropout(self, rows, dropout_prob):
    """`dropout` of rows, with the mask `dropout` draws for all positions."""
    return dropout(rows, dropout_prob)


class _RealTokens(_AllPositions):
  """Rows of a layer's 2-D activations: the batch's non-padding positions.

  The rows are [num_tokens, width], in row-major order of (example,
  position). Each example's first position is a row even where its mask
  is 0, so that the pooler has one row per example; an example that is all
  padding (one that fills up the last batch) has all its positions as
  rows, since Google's model lets each of them attend to all.

  Each row's values are those of the same position in a layer of all
  positions: the feed-forward layers, LayerNorms and dropout work on each
  position alone, with the masks drawn for all positions, and attention
  runs in the padded layout (`unpack`), where padding positions are
  masked out as keys (their probability is exactly 0) and their queries'
  results are dropped.
  """

  def __init__(self, input_mask, batch_size, seq_length):
    super(_RealTokens, self).__init__(batch_size, seq_length)
    is_real = tf.not_equal(input_mask, 0)
    first_position = tf.equal(tf.range(seq_length), 0)
    all_padding = tf.logical_not(
        tf.reduce_any(is_real, axis=1, keepdims=True))
    # [batch_size * seq_length] bool, True for the positions that are rows.
    is_row = tf.reshape(
        tf.logical_or(tf.logical_or(is_real, first_position), all_padding),
        [-1])
    # [num_tokens]: the position of each row.
    self._positions = tf.where(is_row)[:, 0]
    num_rows = tf.size(self._positions, out_type=tf.int64)
    # [batch_size * seq_length]: each position's row; num_rows (a zero row
    # appended by `unpack`) for the others.
    row_number = tf.cumsum(tf.cast(is_row, tf.int64)) - 1
    self._rows_of_positions = tf.where(is_row, row_number, num_rows)
    # [batch_size]: the row of each example's first position.
    self._first_rows = tf.gather(
        self._rows_of_positions,
        tf.range(tf.cast(batch_size, tf.int64)) *
        tf.cast(seq_length, tf.int64))

  # pack and unpack are each other's gradient. Both are gathers: TensorFlow's
  # ScatterNd (autodiff's gradient of a gather) copies row by row on one
  # thread, 3x the time of a gather for BERT-Base's [4096, 768] float32.

  def pack(self, padded):
    @tf.custom_gradient
    def pack_fn(padded):
      return tf.gather(padded, self._positions), self.unpack

    return pack_fn(padded)

  def unpack(self, rows):
    """Rows -> [batch_size * seq_length, width], zero at padding."""
    @tf.custom_gradient
    def unpack_fn(rows):
      width = get_shape_list(rows, expected_rank=2)[1]
      rows_and_zero = tf.concat([rows, tf.zeros([1, width], rows.dtype)], 0)
      return tf.gather(rows_and_zero, self._rows_of_positions), self.pack

    return unpack_fn(rows)

  def first_rows(self, rows):
    return tf.gather(rows, self._first_rows)

  def dropout(self, rows, dropout_prob):
    if not _check_dropout_prob(dropout_prob):
      return rows
    width = get_shape_list(rows, expected_rank=2)[1]
    keep = _dropout_keep_mask(
        rows, dropout_prob, None,
        draw_shape=[self.batch_size * self.seq_length, width])
    return _apply_keep_mask(rows, self.pack(keep), dropout_prob)


def _transpose_for_scores(input_tensor, batch_size, num_attention_heads,
                          seq_length, width):
  """[batch*seq, heads*width] -> [batch, heads, seq, width]."""
  output_tensor = tf.reshape(
      input_tensor, [batch_size, seq_length, num_attention_heads, width])
  return tf.transpose(a=output_tensor, perm=[0, 2, 1, 3])


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False,
                      *,
                      gradient_checkpointing=False):
  """Multi-headed, multi-layer Transformer encoder ("Attention Is All You
  Need"), as in the original BERT.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, hidden_size].
    attention_mask: (optional) float32 Tensor [batch_size, seq_length,
      seq_length], 1 where attention is allowed and 0 where not.
    hidden_size: int. Hidden size of the Transformer.
    num_hidden_layers: int. Number of layers (blocks) in the Transformer.
    num_attention_heads: int. Number of attention heads in the Transformer.
    intermediate_size: int. The size of the feed forward layer.
    intermediate_act_fn: function. The non-linear activation function to
      apply to the output of the intermediate/feed-forward layer.
    hidden_dropout_prob: float. Dropout probability for the hidden layers.
    attention_probs_dropout_prob: float. Dropout probability of the
      attention probabilities.
    initializer_range: float. Range of the initializer.
    do_return_all_layers: Whether to return all layers or just the final
      layer.
    gradient_checkpointing: recompute each layer but the last in the
      backward pass (`recompute_grad`) instead of keeping its activations.

  Returns:
    float Tensor [batch_size, seq_length, hidden_size] (dtype of
    `input_tensor`), the final hidden layer; or the list of all layers'.

  Raises:
    ValueError: A Tensor shape or parameter is invalid.
  """
  batch_size, seq_length, _ = get_shape_list(input_tensor, expected_rank=3)
  layout = _AllPositions(batch_size, seq_length)
  all_layer_rows = _encoder_layer_rows(
      reshape_to_matrix(input_tensor), layout, attention_mask, hidden_size,
      num_hidden_layers, num_attention_heads, intermediate_size,
      intermediate_act_fn, hidden_dropout_prob, attention_probs_dropout_prob,
      initializer_range, gradient_checkpointing)
  all_layer_outputs = [
      tf.reshape(rows, [batch_size, seq_length, hidden_size])
      for rows in all_layer_rows]
  if do_return_all_layers:
    return all_layer_outputs
  return all_layer_outputs[-1]


def _encoder_layer_rows(input_rows, layout, attention_mask, hidden_size,
                        num_hidden_layers, num_attention_heads,
                        intermediate_size, intermediate_act_fn,
                        hidden_dropout_prob, attention_probs_dropout_prob,
                        initializer_range, gradient_checkpointing):
  """`transformer_model` on the rows of `layout`.

  Args:
    input_rows: Tensor [rows, hidden_size], the encoder's input at the
      positions `layout` holds.
    layout: `_AllPositions` or `_RealTokens`.
    (the rest as `transformer_model`)

  Returns:
    list of num_hidden_layers Tensors [rows, hidden_size], each layer's
    output.
  """
  if hidden_size % num_attention_heads != 0:
    raise ValueError(
        "The hidden size (%d) is not a multiple of the number of attention "
        "heads (%d)" % (hidden_size, num_attention_heads))

  input_width = get_shape_list(input_rows, expected_rank=2)[1]
  # The residual connections add the input to every layer's output, so the
  # widths must agree.
  if input_width != hidden_size:
    raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                     (input_width, hidden_size))

  def layer_body(layer_rows):
    """One layer up to the sum that its last LayerNorm normalizes."""
    return _transformer_layer_body(
        layer_rows, layout, attention_mask, hidden_size, num_attention_heads,
        intermediate_size, intermediate_act_fn, hidden_dropout_prob,
        attention_probs_dropout_prob, initializer_range)

  reuse = None
  checkpointed_body = layer_body
  if gradient_checkpointing:
    # The recomputed part ends before the layer's last LayerNorm, which
    # keeps its [batch * seq, hidden] input for its own gradient. In
    # exchange the recomputation never runs the layer's output matmul (about
    # 30% of its matmul work): no gradient reads that matmul's result, so
    # TensorFlow prunes it.
    checkpointed_body = recompute_grad(layer_body)
    # The recomputation in the backward pass re-enters a layer's variable
    # scope and must find the variables the forward pass created.
    reuse = tf.compat.v1.AUTO_REUSE

  prev_output = input_rows
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    # The last layer's backward pass runs right after the head's, so
    # recomputing it would hold as much memory as keeping its activations
    # does, and cost a layer's forward pass for nothing.
    last = layer_idx == num_hidden_layers - 1
    with tf.compat.v1.variable_scope("layer_%d" % layer_idx, reuse=reuse):
      residual_sum = (layer_body if last else checkpointed_body)(prev_output)
      with tf.compat.v1.variable_scope("output"):
        prev_output = layer_norm(residual_sum)
      all_layer_outputs.append(prev_output)
  return all_layer_outputs


def recompute_grad(layer_fn):
  """`layer_fn` whose activations are recomputed in the backward pass.

  Graph-mode gradient checkpointing: the forward pass keeps only the input
  and output of `layer_fn`; the gradient runs `layer_fn` again and
  differentiates the copy. Unlike `tf.recompute_grad`, the whole
  recomputation (dropout masks and attention bias included) waits on the
  incoming gradient through a control dependency. `tf.recompute_grad` ties
  only the input to it through arithmetic that grappler simplifies away, so
  on TF 2.21 every layer was recomputed during the forward pass and nothing
  was saved (measured with TF's allocator statistics).

  Args:
    layer_fn: callable Tensor -> Tensor that reads its variables with
      `get_variable` in the current variable scope (resource variables).

  Returns:
    callable with the same signature and forward values.
  """

  @tf.custom_gradient
  def recomputed(layer_input):
    scope = tf.compat.v1.get_variable_scope()
    output = layer_fn(layer_input)

    def grad_fn(output_grad, variables=None):
      variables = list(variables or [])
      with tf.control_dependencies([output_grad]):
        input_again = tf.identity(layer_input)
        with tf.compat.v1.variable_scope(scope, reuse=True), _recomputation():
          output_again = layer_fn(input_again)
      grads = tf.gradients(
          output_again, [input_again] + variables, grad_ys=output_grad,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      return grads[0], grads[1:]

    return output, grad_fn

  return recomputed


def _transformer_layer_body(layer_rows, layout, attention_mask, hidden_size,
                            num_attention_heads, intermediate_size,
                            intermediate_act_fn, hidden_dropout_prob,
                            attention_probs_dropout_prob, initializer_range,
                            first_token_only=False):
  """One encoder layer but its last LayerNorm: self-attention and
  feed-forward, each with a residual connection (the first also with its
  LayerNorm).

  Args:
    layer_rows: Tensor [rows, hidden_size], the layer's input at the
      positions `layout` holds.
    layout: `_AllPositions` or `_RealTokens`.
    (the rest as `transformer_model`)
    first_token_only: compute the first position's output alone (attending
      to all positions), with the dropout masks of the whole layer's.

  Returns:
    Tensor [rows, hidden_size] ([batch_size, hidden_size] with
    `first_token_only`), dtype of `layer_rows`: the feed-forward output
    plus its residual, which the caller normalizes with the LayerNorm in
    variable scope "output".
  """
  batch_size, seq_length = layout.batch_size, layout.seq_length
  initializer = create_initializer(initializer_range)
  # The query positions: all of the layout's, or the first alone.
  query_input, query_length, query_layout = layer_rows, seq_length, layout
  hidden_dropout = functools.partial(layout.dropout,
                                     dropout_prob=hidden_dropout_prob)
  if first_token_only:
    query_input, query_length = layout.first_rows(layer_rows), 1
    query_layout = None
    if attention_mask is not None:
      attention_mask = attention_mask[:, 0:1, :]
    hidden_dropout = functools.partial(
        _first_token_dropout, seq_length=seq_length,
        dropout_prob=hidden_dropout_prob)

  with tf.compat.v1.variable_scope("attention"):
    with tf.compat.v1.variable_scope("self"):
      # [rows, H], or [B, H] for the first position alone
      attention_output = attention_layer(
          from_tensor=query_input,
          to_tensor=layer_rows,
          attention_mask=attention_mask,
          num_attention_heads=num_attention_heads,
          size_per_head=hidden_size // num_attention_heads,
          attention_probs_dropout_prob=attention_probs_dropout_prob,
          initializer_range=initializer_range,
          do_return_2d_tensor=True,
          batch_size=batch_size,
          from_seq_length=query_length,
          to_seq_length=seq_length,
          dropout_from_seq_length=seq_length if first_token_only else None,
          from_layout=query_layout,
          to_layout=layout)

    with tf.compat.v1.variable_scope("output"):
      attention_output = dense(attention_output, hidden_size, "dense",
                               kernel_initializer=initializer)
      attention_output = hidden_dropout(attention_output)
      attention_output = layer_norm(attention_output + query_input)

  # Evaluation graphs apply their GELU in the intermediate layer, where
  # grappler fuses it with the matmul. Training graphs of long sequences
  # (outside a recomputation) apply the activation in the output layer, whose
  # backward pass computes it again instead of keeping its
  # [rows, intermediate_size] result.
  activation_in_output = (
      intermediate_act_fn not in (None, _fusable_gelu) and
      _computes_again_in_backward(seq_length))
  with tf.compat.v1.variable_scope("intermediate"):
    # [rows, intermediate_size]
    intermediate_output = dense(
        attention_output, intermediate_size, "dense",
        activation=None if activation_in_output else intermediate_act_fn,
        kernel_initializer=initializer)

  with tf.compat.v1.variable_scope("output"):
    layer_output = dense(
        intermediate_output, hidden_size, "dense",
        kernel_initializer=initializer,
        input_activation=(intermediate_act_fn if activation_in_output
                          else None))
    layer_output = hidden_dropout(layer_output)
  return layer_output + attention_output


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns a list of the shape of tensor, preferring static dimensions.

  Args:
    tensor: A tf.Tensor object to find the shape of.
    expected_rank: (optional) int or list of ints. The expected rank of
      `tensor`; a ValueError is raised if it differs.
    name: Optional name of the tensor for the error message.

  Returns:
    A list with one entry per dimension: a Python int where the dimension is
    static, else an int32 scalar Tensor.
  """
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)

  shape = tensor.shape.as_list()

  non_static_indexes = [index for (index, dim) in enumerate(shape)
                        if dim is None]
  if not non_static_indexes:
    return shape

  dyn_shape = tf.shape(tensor)
  for index in non_static_indexes:
    shape[index] = dyn_shape[index]
  return shape


def reshape_to_matrix(input_tensor):
  """Reshapes a >= rank 2 tensor to a rank 2 tensor (i.e., a matrix)."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                     (input_tensor.shape))
  if ndims == 2:
    return input_tensor

  width = input_tensor.shape[-1]
  output_tensor = tf.reshape(input_tensor, [-1, width])
  return output_tensor


def reshape_from_matrix(output_tensor, orig_shape_list):
  """Reshapes a rank 2 tensor back to its original rank >= 2 tensor."""
  if len(orig_shape_list) == 2:
    return output_tensor

  output_shape = get_shape_list(output_tensor)

  orig_dims = orig_shape_list[0:-1]
  width = output_shape[-1]

  return tf.reshape(output_tensor, orig_dims + [width])


def assert_rank(tensor, expected_rank, name=None):
  """Raises an exception if the tensor rank is not of the expected rank.

  Args:
    tensor: A tf.Tensor to check the rank of.
    expected_rank: Python integer or list of integers, expected rank.
    name: Optional name of the tensor for the error message.

  Raises:
    ValueError: If the expected shape doesn't match the actual shape.
  """
  if name is None:
    # Eager tensors have no name.
    name = getattr(tensor, "name", "tensor")

  if isinstance(expected_rank, int):
    expected_rank = [expected_rank]

  actual_rank = tensor.shape.ndims
  if actual_rank not in expected_rank:
    raise ValueError(
        "For the tensor `%s`, the actual rank `%d` (shape = %s) is not equal "
        "to the expected rank `%s`" %
        (name, actual_rank, str(tensor.shape), str(expected_rank)))


def _check_compute_dtype(compute_dtype):
  """Returns `compute_dtype` as a tf.DType, or raises ValueError."""
  dtype = tf.as_dtype(compute_dtype)
  if dtype not in _COMPUTE_DTYPES:
    raise ValueError("compute_dtype must be one of %s, got %s."
                     % (", ".join(d.name for d in _COMPUTE_DTYPES), dtype.name))
  return dtype
