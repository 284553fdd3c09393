# coding=utf-8
"""BERT, the model: `BertConfig`, `BertModel` and its building blocks.

The structure, the public names and signatures, the variable names and
shapes and the math are those of Google's original modeling.py (GELU in its
tanh form, LayerNorm epsilon 1e-12, -10000 added to masked attention
scores), so Google's checkpoints load unchanged:

  BertModel -> embedding_lookup, embedding_postprocessor
            -> transformer_model -> attention_layer -> dense, layer_norm,
                                    dropout, gelu
            -> pooler (dense with tanh)

Abilities beyond the original are keyword arguments with defaults
(gradient checkpointing, float16 / bfloat16 compute, skipping padding, how
much the backward pass keeps). `transformer_model` runs its layer loop as
Google's does; the machinery behind those abilities sits in engine/ behind
small named calls: layer_stack (gradient checkpointing across layers, the
last layer's first-token pass), lean_gradients (hand-written backward
passes and what each keeps), dropout_masks (stateless masks),
padding_layout (real-token rows), xla_kernels (compiled elementwise
kernels) and config_checks (the config's keys and values).
"""

import collections
import copy
import json
import re

import tensorflow as tf

from engine import config_checks
from engine import dropout_masks
from engine import layer_stack
from engine import lean_gradients
from engine import padding_layout
from engine import weight_casts

# Custom gradients need resource variables in graph mode.
tf.compat.v1.enable_resource_variables()

_COMPUTE_DTYPES = (tf.float32, tf.float16, tf.bfloat16)

# Added to the attention scores of masked positions before the softmax;
# exp() of it is exactly 0 in float32.
_MASK_ADDER = -10000.0

class BertConfig(object):
  """The sizes and hyperparameters of a `BertModel` (bert_config.json)."""

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
    """Stores the model's shape.

    Args:
      vocab_size: number of WordPiece ids (rows of the word embeddings).
      hidden_size: width of every encoder layer and of the pooled output.
      num_hidden_layers: number of transformer layers.
      num_attention_heads: heads per attention layer; divides hidden_size.
      intermediate_size: width of each layer's feed-forward projection.
      hidden_act: the feed-forward activation's name ("gelu": the tanh
        approximation; "gelu_exact": the erf form; "relu", "tanh",
        "linear") or a function.
      hidden_dropout_prob: dropout rate of the embeddings and layer outputs.
      attention_probs_dropout_prob: dropout rate of attention probabilities.
      max_position_embeddings: rows of the position table (longest input).
      type_vocab_size: rows of the segment (token type) table.
      initializer_range: stddev of the truncated normal initializer.
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
    """A config from a dict of bert_config.json's keys; absent keys take
    the defaults of `__init__` (all but vocab_size).

    Raises:
      ValueError: a key is unknown (the message suggests the closest known
        one) or a value has the wrong type or range.
    """
    return cls._from_dict(json_object, "the BERT config")

  @classmethod
  def _from_dict(cls, json_object, where):
    config_checks.check_values(json_object, where,
                               BertConfig(vocab_size=None).to_dict(),
                               get_activation)
    config = BertConfig(vocab_size=None)
    for (key, value) in json_object.items():
      config.__dict__[key] = value
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """A config from a bert_config.json file, which must hold every key.

    Raises:
      FileNotFoundError: `json_file` does not exist.
      ValueError: the file is not valid JSON, lacks a key, or `from_dict`
        refuses it; the message names the file.
    """
    if not tf.io.gfile.exists(json_file):
      raise FileNotFoundError(
          "BERT config file %s does not exist; set --bert_config_file to the "
          "bert_config.json shipped with the model." % json_file)
    with tf.io.gfile.GFile(json_file, "r") as reader:
      text = reader.read()
    where = "--bert_config_file=%s" % json_file
    try:
      json_object = json.loads(text)
    except ValueError as e:
      raise ValueError("%s is not valid JSON: %s" % (where, e)) from e
    # A misspelt key is named as such before the key it hides is missed.
    config = cls._from_dict(json_object, where)
    config_checks.check_complete(json_object, where)
    return config

  def to_dict(self):
    """A deep copy of the fields as a dict."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """The fields as indented JSON with sorted keys."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel(object):
  """The BERT encoder with its embeddings and pooler.

  Example:

  ```python
  config = modeling.BertConfig(vocab_size=30522, hidden_size=256,
      num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
  input_ids = tf.constant([[101, 7592, 2088, 102], [101, 2088, 102, 0]])
  model = modeling.BertModel(config, is_training=False, input_ids=input_ids,
                             input_mask=tf.cast(input_ids > 0, tf.int32))
  pooled = model.get_pooled_output()      # [2, 256]
  tokens = model.get_sequence_output()    # [2, 4, 256]
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
               skip_padding=False,
               keep_activations_up_to=(
                   lean_gradients.DEFAULT_KEEP_ACTIVATIONS_UP_TO)):
    """Builds the model's graph in variable scope `scope` ("bert").

    Args:
      config: a `BertConfig`.
      is_training: True builds dropout; False turns every dropout off.
      input_ids: int32 Tensor [batch_size, seq_length] of WordPiece ids.
      input_mask: (optional) int32 Tensor [batch_size, seq_length], 1 for
        real tokens and 0 for padding; all ones by default.
      token_type_ids: (optional) int32 Tensor [batch_size, seq_length] of
        segment ids; all zeros by default.
      use_one_hot_embeddings: look the word embeddings up with a one-hot
        matmul rather than a gather.
      scope: (optional) variable scope, "bert" by default.
      gradient_checkpointing: recompute every layer but the last in the
        backward pass instead of keeping its activations (same gradients,
        much less memory, about a fifth more time).
      compute_dtype: tf.float32, tf.float16 or tf.bfloat16: the dtype of
        the matmuls, activations and outputs; variables stay float32.
      skip_padding: run the feed-forward layers, LayerNorms and dropout on
        the real tokens only (padding_layout.RealTokens); attention still
        covers every position. The pooled output and the real tokens'
        values are unchanged (dropout masks included); padding positions of
        the encoder layers are 0 instead of values no head should read.
      keep_activations_up_to: sequences longer than this compute attention's
        probabilities and mask and the GELU output again in the backward
        pass rather than keep them (lean_gradients.BackwardPolicy); None
        keeps them at any length.

    Raises:
      ValueError: the config or an input shape is invalid.
    """
    compute_dtype = _check_compute_dtype(compute_dtype)
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
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

      with tf.compat.v1.variable_scope("encoder"):
        # [batch_size, seq_length, seq_length]: which keys each query
        # position may attend to.
        attention_mask = create_attention_mask_from_input_mask(
            input_ids, input_mask)
        self.all_encoder_layers, first_token_tensor = transformer_model(
            input_tensor=self.embedding_output,
            attention_mask=attention_mask,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            intermediate_act_fn=_activation(config.hidden_act, is_training),
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range,
            do_return_all_layers=True,
            gradient_checkpointing=gradient_checkpointing,
            skip_padding_mask=input_mask if skip_padding else None,
            return_first_token=True,
            keep_activations_up_to=keep_activations_up_to)

      self.sequence_output = self.all_encoder_layers[-1]
      # The pooler turns the [CLS] position's last hidden state into one
      # vector for the whole input (what sentence-level heads read).
      with tf.compat.v1.variable_scope("pooler"):
        self.pooled_output = dense(
            first_token_tensor,
            config.hidden_size,
            "dense",
            activation=tf.tanh,
            kernel_initializer=create_initializer(config.initializer_range))

  def get_pooled_output(self):
    """[batch_size, hidden_size], the pooler's tanh output (compute dtype)."""
    return self.pooled_output

  def get_sequence_output(self):
    """[batch_size, seq_length, hidden_size], the last encoder layer's
    output for every position (compute dtype)."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """The num_hidden_layers encoder outputs, first to last, each
    [batch_size, seq_length, hidden_size]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """[batch_size, seq_length, hidden_size]: the summed word, segment and
    position embeddings after LayerNorm and dropout (the encoder's input)."""
    return self.embedding_output

  def get_embedding_table(self):
    """The float32 [vocab_size, hidden_size] word embedding variable."""
    return self.embedding_table


def gelu(x):
  """GELU in Google's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi)
  (x + 0.044715 x^3))), of `x`'s shape and dtype; its backward pass keeps
  only `x` (lean_gradients.tanh_gelu)."""
  return lean_gradients.tanh_gelu(tf.convert_to_tensor(x))


def gelu_exact(x):
  """GELU with the exact normal CDF: x (1 + erf(x / sqrt(2))) / 2.

  Hugging Face's "gelu" (e.g. MiniLM was trained with it); bert_config.json
  names it "gelu_exact". It differs from `gelu` by up to about 1e-3.
  """
  return tf.nn.gelu(tf.convert_to_tensor(x), approximate=False)


def _fusable_gelu(x):
  """`gelu` written as tf.nn.gelu(approximate=True), the form that grappler
  fuses with the preceding matmul and bias on CPU. Plain autodiff, so only
  for graphs that are not trained."""
  return tf.nn.gelu(x, approximate=True)


def _activation(activation_string, is_training):
  """`get_activation`, with the fusable GELU in graphs not trained."""
  activation = get_activation(activation_string)
  if activation is gelu and not is_training:
    return _fusable_gelu
  return activation


def get_activation(activation_string):
  """The function of an activation name: "relu", "gelu", "gelu_exact",
  "tanh" (any case); None for "linear", "" or None; a function is returned
  as it is. ValueError for any other name."""
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  act = activation_string.lower()
  activations = {"linear": None, "relu": tf.nn.relu, "gelu": gelu,
                 "gelu_exact": gelu_exact, "tanh": tf.tanh}
  if act not in activations:
    raise ValueError("hidden_act %s is not an activation this model knows; "
                     "the BERT config may name %s."
                     % (act, ", ".join(sorted(activations))))
  return activations[act]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Pairs the variables in `tvars` with checkpoint variables of the same
  name.

  Args:
    tvars: variables (usually the trainable ones).
    init_checkpoint: a checkpoint prefix, e.g. ".../bert_model.ckpt".

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict checkpoint
    name -> variable name for `tf.compat.v1.train.init_from_checkpoint`,
    and a dict whose keys are the names it covers, each with and without
    ":0".

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
  """Zeroes each value with probability `dropout_prob` and scales the rest
  by 1 / (1 - dropout_prob).

  The mask is stateless (engine/dropout_masks.py): a function of the graph seed,
  the call's site (variable scope and `name`, unique in the graph), the
  update and each value's place in the update's whole batch, so a
  recomputed layer draws it again exactly, and micro-batches of an update
  draw the masks of one big batch.

  Args:
    input_tensor: float Tensor whose leading dimension is the batch (or its
      rows, example-major, as `reshape_to_matrix` gives them).
    dropout_prob: the probability of DROPPING a value (the original's
      convention, not TensorFlow's keep probability); None or 0 for none.
    name: (optional) names the site within the current variable scope.

  Returns:
    A Tensor of the shape and dtype of `input_tensor`.
  """
  if not dropout_masks.check_prob(dropout_prob):
    return input_tensor
  keep = dropout_masks.keep_mask(tf.shape(input_tensor), dropout_prob, name,
                                 after=input_tensor)
  return dropout_masks.apply_keep_mask(input_tensor, keep, dropout_prob)


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, computed in float32.

  Args:
    input_tensor: float Tensor [..., width].
    name: (optional) variable scope, "LayerNorm" (Google's) by default.

  Returns:
    A Tensor of the shape and dtype of `input_tensor`. Creates
    `<name>/beta` and `<name>/gamma`, float32 [width].
  """
  width = input_tensor.shape[-1]
  # A fixed scope name (never made unique) finds the same variables when a
  # layer is built again for recomputation.
  with tf.compat.v1.variable_scope(name or "LayerNorm"):
    beta = tf.compat.v1.get_variable(
        "beta", [width], initializer=tf.compat.v1.zeros_initializer())
    gamma = tf.compat.v1.get_variable(
        "gamma", [width], initializer=tf.compat.v1.ones_initializer())
  output = lean_gradients.normalize(tf.cast(input_tensor, tf.float32), gamma,
                                    beta)
  return tf.cast(output, input_tensor.dtype)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None, *,
                           output_dtype=None):
  """`layer_norm`, cast to `output_dtype` (if given), then `dropout`."""
  output_tensor = layer_norm(input_tensor, name)
  if output_dtype is not None:
    output_tensor = tf.cast(output_tensor, output_dtype)
  return dropout(output_tensor, dropout_prob)


def create_initializer(initializer_range=0.02):
  """A truncated normal initializer with stddev `initializer_range`."""
  return tf.compat.v1.truncated_normal_initializer(stddev=initializer_range)


def dense(x, units, name, activation=None, kernel_initializer=None, *,
          input_activation=None):
  """A fully connected layer with the variable names of tf.layers.dense.

  Args:
    x: float Tensor [rows, in_width] in the compute dtype.
    units: output width.
    name: variable scope; creates float32 `<name>/kernel` [in_width, units]
      and `<name>/bias` [units].
    activation: (optional) function applied to the output.
    kernel_initializer: (optional) `create_initializer()` by default.
    input_activation: (optional) function applied to `x` first, which the
      backward pass computes again rather than keep
      (lean_gradients.matmul_of_activation).

  Returns:
    Tensor [rows, units] in the dtype of `x`.
  """
  assert_rank(x, 2)
  kernel, bias = _dense_weights(x.shape[-1], units, name, kernel_initializer,
                                x.dtype)
  if input_activation is None:
    output = tf.matmul(x, kernel)
  else:
    output = lean_gradients.matmul_of_activation(x, kernel, input_activation)
  output = lean_gradients.bias_add(output, bias)
  if activation is not None:
    output = activation(output)
  return output


def _dense_weights(in_width, units, name, kernel_initializer, dtype):
  """(kernel [in_width, units], bias [units]) of the dense layer `name`:
  its float32 variables, cast to the compute dtype where they are used."""
  with tf.compat.v1.variable_scope(name):
    kernel = tf.compat.v1.get_variable(
        "kernel", [in_width, units],
        initializer=kernel_initializer or create_initializer())
    bias = tf.compat.v1.get_variable(
        "bias", [units], initializer=tf.compat.v1.zeros_initializer())
  return weight_casts.in_dtype(kernel, dtype), weight_casts.in_dtype(bias,
                                                                    dtype)


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
  """The word embeddings of `input_ids`.

  Args:
    input_ids: int32 Tensor [batch_size, seq_length] (or with a trailing
      axis of ids per position).
    vocab_size: rows of the table.
    embedding_size: width of the table.
    initializer_range: stddev of the table's initializer.
    word_embedding_name: the table's variable name.
    use_one_hot_embeddings: a one-hot matmul instead of `tf.gather`.

  Returns:
    (output, embedding_table): float32 [batch_size, seq_length,
    embedding_size] and the float32 [vocab_size, embedding_size] variable.
  """
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
    # Rows of a read of the table, not a gather on the variable itself: that
    # op (ResourceGather) puts the variable in copy-on-read mode for good,
    # after which every whole-table read (a checkpoint's save, an output
    # layer tied to the table) copies all vocab_size rows first.
    output = tf.gather(tf.convert_to_tensor(embedding_table), flat_input_ids)

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
  """Adds segment and position embeddings to the word embeddings, then
  LayerNorm (in the input's dtype) and dropout (in `compute_dtype`).

  Args:
    input_tensor: float Tensor [batch_size, seq_length, width].
    use_token_type: add the rows of `token_type_ids` (int32 [batch_size,
      seq_length], then required) from the segment table, which has
      `token_type_vocab_size` rows and is named `token_type_embedding_name`.
    use_position_embeddings: add the first seq_length rows of the position
      table (`max_position_embeddings` rows, `position_embedding_name`).
    initializer_range: stddev of the tables' initializer.
    dropout_prob: dropout rate of the result.
    compute_dtype: (optional) dtype of the result; the input's by default.

  Returns:
    Tensor [batch_size, seq_length, width] in `compute_dtype`.

  Raises:
    ValueError: `token_type_ids` is missing, or the sequence is longer than
      the position table.
  """
  batch_size, seq_length, width = get_shape_list(input_tensor,
                                                 expected_rank=3)
  output = input_tensor

  if use_token_type:
    if token_type_ids is None:
      raise ValueError("use_token_type=True needs token_type_ids.")
    token_type_table = tf.compat.v1.get_variable(
        name=token_type_embedding_name,
        shape=[token_type_vocab_size, width],
        initializer=create_initializer(initializer_range))
    # A one-hot matmul, as Google's: the table's gradient is then dense,
    # and the global-norm clip counts it as Google's does.
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
    # Position i of every example gets row i of the table.
    position_embeddings = tf.slice(full_position_embeddings, [0, 0],
                                   [seq_length, -1])
    output += tf.cast(tf.expand_dims(position_embeddings, 0), output.dtype)

  return layer_norm_and_dropout(output, dropout_prob,
                                output_dtype=compute_dtype)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """The 3-D attention mask of a batch from its 2-D input mask.

  Args:
    from_tensor: Tensor [batch_size, from_seq_length, ...] (the queries).
    to_mask: int32 Tensor [batch_size, to_seq_length], 1 for the keys that
      may be attended to.

  Returns:
    float32 Tensor [batch_size, from_seq_length, to_seq_length].
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  batch_size = from_shape[0]
  from_seq_length = from_shape[1]
  to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]

  to_mask = tf.cast(
      tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
  # Only keys are masked: every query row is the same, so a broadcast of
  # the key mask over the query positions is the whole mask.
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
                    to_layout=None,
                    backward_policy=None,
                    attention_bias=None):
  """Scaled dot-product attention with several heads, from the positions
  of `from_tensor` (queries) to those of `to_tensor` (keys and values).

  Shapes below: B batch, F from_seq_length, T to_seq_length, N heads,
  H size_per_head. The softmax runs in float32, the rest in the dtype of
  `from_tensor`.

  Args:
    from_tensor: Tensor [B, F, from_width], or [B * F, from_width].
    to_tensor: Tensor [B, T, to_width], or [B * T, to_width].
    attention_mask: (optional) float32 Tensor [B, F, T], 1 where a query
      may attend to a key, 0 where not.
    num_attention_heads: N.
    size_per_head: H.
    query_act, key_act, value_act: (optional) the projections' activations.
    attention_probs_dropout_prob: dropout rate of the probabilities.
    initializer_range: stddev of the projections' initializer.
    do_return_2d_tensor: return [B * F, N * H] rather than [B, F, N * H].
    batch_size, from_seq_length, to_seq_length: B, F and T; needed with
      2-D inputs.
    dropout_from_seq_length: (optional) draw the dropout mask as for this
      many query positions and use its first F rows (the queries are the
      first F positions of such a sequence).
    from_layout, to_layout: (optional) with 2-D inputs, the
      padding_layout objects whose rows the inputs hold; the 2-D result
      has the rows of `from_layout`.
    backward_policy: (optional) lean_gradients.BackwardPolicy; None
      differentiates with plain autodiff.
    attention_bias: (optional) float32 Tensor [B, 1, F, T] added to the
      scores (`attention_bias_from_mask`), in place of attention_mask.

  Returns:
    Tensor [B, F, N * H] (or [B * F, N * H]) in the dtype of `from_tensor`.

  Raises:
    ValueError: the ranks differ, 2-D inputs come without the sizes, or
      both attention_mask and attention_bias are given.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
  if len(from_shape) != len(to_shape):
    raise ValueError(
        "from_tensor has rank %d and to_tensor rank %d; give both as 2-D or "
        "both as 3-D." % (len(from_shape), len(to_shape)))
  if len(from_shape) == 3:
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]
    to_seq_length = to_shape[1]
  elif (batch_size is None or from_seq_length is None or
        to_seq_length is None):
    raise ValueError(
        "attention_layer on 2-D inputs needs batch_size, from_seq_length "
        "and to_seq_length.")

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
  # Attention itself covers every position, padding included (masked).
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

  if attention_mask is not None:
    if attention_bias is not None:
      raise ValueError("attention_layer takes attention_mask or "
                       "attention_bias, not both.")
    attention_bias = attention_bias_from_mask(attention_mask)

  # Dropping out whole keys is unusual, but it is what the Transformer
  # paper (and Google's BERT) does.
  draw_keep = None
  if dropout_masks.check_prob(attention_probs_dropout_prob):
    draw_keep = dropout_masks.keep_mask_drawer(
        [batch_size, num_attention_heads, from_seq_length, to_seq_length],
        attention_probs_dropout_prob, "attention_probs",
        drawn_rows=dropout_from_seq_length)

  # [B, N, F, H]
  context_layer = lean_gradients.attention_context(
      query_layer, key_layer, value_layer, attention_bias, draw_keep,
      attention_probs_dropout_prob, backward_policy)

  # [B, F, N, H]
  context_layer = tf.transpose(a=context_layer, perm=[0, 2, 1, 3])

  if do_return_2d_tensor:
    context_layer = tf.reshape(context_layer,
                               [batch_size * from_seq_length, width])
    return (context_layer if from_layout is None
            else from_layout.pack(context_layer))
  return tf.reshape(context_layer, [batch_size, from_seq_length, width])


def _transpose_for_scores(input_tensor, batch_size, num_attention_heads,
                          seq_length, width):
  """[batch * seq, heads * width] -> [batch, heads, seq, width]."""
  output_tensor = tf.reshape(
      input_tensor, [batch_size, seq_length, num_attention_heads, width])
  return tf.transpose(a=output_tensor, perm=[0, 2, 1, 3])


def attention_bias_from_mask(attention_mask):
  """float32 [B, 1, F, T]: 0 where `attention_mask` [B, F, T] is 1 and
  -10000 where it is 0, added to every head's scores before the softmax."""
  attention_mask = tf.expand_dims(tf.cast(attention_mask, tf.float32), axis=1)
  return (1.0 - attention_mask) * _MASK_ADDER


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
                      gradient_checkpointing=False,
                      skip_padding_mask=None,
                      return_first_token=False,
                      keep_activations_up_to=(
                          lean_gradients.DEFAULT_KEEP_ACTIVATIONS_UP_TO)):
  """The Transformer encoder: a stack of self-attention + feed-forward
  layers, each part with a residual connection and LayerNorm.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, hidden_size].
    attention_mask: (optional) float32 Tensor [batch_size, seq_length,
      seq_length], 1 where a position may attend to another.
    hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
    hidden_dropout_prob, attention_probs_dropout_prob, initializer_range:
      as the `BertConfig` fields of these names.
    intermediate_act_fn: the feed-forward activation (a function).
    do_return_all_layers: return every layer's output, not only the last.
    gradient_checkpointing: recompute every layer but the last in the
      backward pass (layer_stack.LayerStack).
    skip_padding_mask: (optional) int Tensor [batch_size, seq_length]; the
      feed-forward layers, LayerNorms and dropout then run on its real
      tokens only (padding_layout.RealTokens), and the outputs are 0 at
      padding positions.
    return_first_token: also return the last layer's output at each
      example's first position, [batch_size, hidden_size], computed by a
      pass of the last layer with that position as the only query (the
      same values and dropout masks). A graph that reads only this output
      never computes the last layer's other queries.
    keep_activations_up_to: see lean_gradients.BackwardPolicy.

  Returns:
    The last layer's output [batch_size, seq_length, hidden_size] (dtype of
    `input_tensor`), or the list of all layers' outputs; with
    `return_first_token`, a pair (that, first-position output).

  Raises:
    ValueError: hidden_size is not a multiple of the heads, or the input's
      width is not hidden_size.
  """
  if hidden_size % num_attention_heads != 0:
    raise ValueError(
        "hidden_size %d does not split evenly over %d attention heads." %
        (hidden_size, num_attention_heads))
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size, seq_length, input_width = input_shape
  # The residual connections add each layer's input to its output.
  if input_width != hidden_size:
    raise ValueError("input_tensor is %d wide; the residual connections "
                     "need hidden_size (%d)." % (input_width, hidden_size))

  layout = padding_layout.of_mask(skip_padding_mask, batch_size, seq_length)
  policy = lean_gradients.BackwardPolicy(keep_activations_up_to)
  # Made once for all layers: a recomputed layer would otherwise make its
  # own copy under its gradient's control dependencies, and when the mask
  # is a constant, grappler folds each copy into a [B, 1, S, S] constant
  # that the session keeps (8 MiB per layer at batch 8, 512 tokens).
  attention_bias = (None if attention_mask is None
                    else attention_bias_from_mask(attention_mask))

  def layer(layer_input, recomputing=False, first_token_only=False):
    """One layer up to the sum that its last LayerNorm normalizes."""
    return _transformer_layer(
        layer_input, layout, attention_bias, hidden_size, num_attention_heads,
        intermediate_size, intermediate_act_fn, hidden_dropout_prob,
        attention_probs_dropout_prob, initializer_range,
        policy._replace(in_recomputation=recomputing), first_token_only)

  layers = layer_stack.LayerStack(
      layer, layer_norm, "output", gradient_checkpointing,
      bool(hidden_dropout_prob or attention_probs_dropout_prob))
  prev_output = layout.pack(reshape_to_matrix(input_tensor))
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with tf.compat.v1.variable_scope("layer_%d" % layer_idx,
                                     reuse=layers.reuse):
      residual_sum = layers.residual_sum(
          prev_output, recompute=layer_idx < num_hidden_layers - 1)
      prev_output = layers.output(residual_sum)
    all_layer_outputs.append(prev_output)

  final_outputs = [reshape_from_matrix(layout.unpack(rows), input_shape)
                   for rows in all_layer_outputs]
  outputs = final_outputs if do_return_all_layers else final_outputs[-1]
  if not return_first_token:
    return outputs
  with tf.compat.v1.variable_scope("layer_%d" % (num_hidden_layers - 1),
                                   reuse=True):
    return outputs, layers.first_token_output()


def _transformer_layer(layer_input, layout, attention_bias, hidden_size,
                       num_attention_heads, intermediate_size,
                       intermediate_act_fn, hidden_dropout_prob,
                       attention_probs_dropout_prob, initializer_range, policy,
                       first_token_only=False):
  """One encoder layer but its last LayerNorm.

  Args:
    layer_input: Tensor [rows, hidden_size], the layer's input at the
      positions of `layout`.
    layout: padding_layout.AllPositions or RealTokens.
    attention_bias: (optional) float32 Tensor [batch_size, 1, seq_length,
      seq_length] (`attention_bias_from_mask`).
    policy: lean_gradients.BackwardPolicy of the layer.
    first_token_only: compute the first position's output alone (attending
      to every position), with the dropout masks of the whole layer.
    (the rest as `transformer_model`)

  Returns:
    Tensor [rows, hidden_size] ([batch_size, hidden_size] with
    `first_token_only`): the feed-forward output plus its residual, which
    the caller normalizes in variable scope "output".
  """
  initializer = create_initializer(initializer_range)
  queries = _queries(layer_input, layout, attention_bias, first_token_only)
  with tf.compat.v1.variable_scope("attention"):
    with tf.compat.v1.variable_scope("self"):
      attention_output = attention_layer(
          from_tensor=queries.rows,
          to_tensor=layer_input,
          num_attention_heads=num_attention_heads,
          size_per_head=hidden_size // num_attention_heads,
          attention_probs_dropout_prob=attention_probs_dropout_prob,
          initializer_range=initializer_range,
          do_return_2d_tensor=True,
          batch_size=layout.batch_size,
          from_seq_length=queries.seq_length,
          to_seq_length=layout.seq_length,
          dropout_from_seq_length=queries.drawn_seq_length,
          from_layout=queries.packed_layout,
          to_layout=layout,
          backward_policy=policy,
          attention_bias=queries.attention_bias)
    with tf.compat.v1.variable_scope("output"):
      attention_output = dense(attention_output, hidden_size, "dense",
                               kernel_initializer=initializer)
      attention_output = queries.layout.dropout(attention_output,
                                                hidden_dropout_prob)
      attention_output = layer_norm(attention_output + queries.rows)

  layer_output = _feed_forward(attention_output, intermediate_size,
                               intermediate_act_fn, initializer, layout,
                               policy)
  with tf.compat.v1.variable_scope("output"):
    layer_output = queries.layout.dropout(layer_output, hidden_dropout_prob)
  return layer_output + attention_output


_Queries = collections.namedtuple("_Queries", [
    "rows", "seq_length", "layout", "packed_layout", "drawn_seq_length",
    "attention_bias"])


def _queries(layer_input, layout, attention_bias, first_token_only):
  """The positions a layer's attention computes outputs for, as a _Queries:
  the rows of `layout`, or with `first_token_only` each example's first
  position alone, [batch_size, width] (for the pooler), whose attention
  dropout mask is the first row of the whole sequence's (drawn for
  `drawn_seq_length` queries)."""
  if not first_token_only:
    return _Queries(layer_input, layout.seq_length, layout, layout, None,
                    attention_bias)
  return _Queries(
      layout.first_rows(layer_input), 1,
      padding_layout.FirstPositions(layout.batch_size, layout.seq_length),
      None, layout.seq_length,
      None if attention_bias is None else attention_bias[:, :, 0:1, :])


def _feed_forward(rows, intermediate_size, activation, initializer, layout,
                  policy):
  """The "intermediate" and "output" dense layers of an encoder layer over
  `rows` [rows, width], in the form `policy` chooses for the backward pass.
  """
  width = int(rows.shape[-1])
  row_groups = policy.row_groups(
      layout.seq_length,
      lean_gradients.rows_if_known(layout.batch_size, layout.seq_length))
  if row_groups > 1:
    weights = []
    for scope, in_width, units in (("intermediate", width, intermediate_size),
                                   ("output", intermediate_size, width)):
      with tf.compat.v1.variable_scope(scope):
        weights += _dense_weights(in_width, units, "dense", initializer,
                                  rows.dtype)
    return lean_gradients.feed_forward_in_row_groups(
        rows, *weights, activation or tf.identity, row_groups)
  # Where the backward pass computes the activation again, it is applied in
  # the output layer's matmul (which then keeps only its input); elsewhere
  # in the intermediate layer, where grappler fuses it with the matmul.
  activation_in_output = (activation not in (None, _fusable_gelu) and
                          policy.computes_again(layout.seq_length))
  with tf.compat.v1.variable_scope("intermediate"):
    intermediate_output = dense(
        rows, intermediate_size, "dense",
        activation=None if activation_in_output else activation,
        kernel_initializer=initializer)
  with tf.compat.v1.variable_scope("output"):
    return dense(intermediate_output, width, "dense",
                 kernel_initializer=initializer,
                 input_activation=activation if activation_in_output else None)


def get_shape_list(tensor, expected_rank=None, name=None):
  """The dimensions of `tensor`: Python ints where static, else int32
  scalar Tensors.

  Args:
    tensor: a tf.Tensor.
    expected_rank: (optional) int or list of ints; other ranks raise
      ValueError.
    name: (optional) the tensor's name for the error message.
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
  """[..., width] -> [rows, width]; a matrix is returned as it is."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError("reshape_to_matrix needs a tensor of rank 2 or more, "
                     "got shape %s." % (input_tensor.shape,))
  if ndims == 2:
    return input_tensor
  width = input_tensor.shape[-1]
  return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """[rows, width] -> `orig_shape_list`'s leading dimensions + [width]."""
  if len(orig_shape_list) == 2:
    return output_tensor
  width = get_shape_list(output_tensor)[-1]
  return tf.reshape(output_tensor, orig_shape_list[0:-1] + [width])


def assert_rank(tensor, expected_rank, name=None):
  """Raises ValueError if the rank of `tensor` is not `expected_rank` (an
  int or a list of allowed ints)."""
  if name is None:
    # Eager tensors have no name.
    name = getattr(tensor, "name", "tensor")
  if isinstance(expected_rank, int):
    expected_rank = [expected_rank]
  actual_rank = tensor.shape.ndims
  if actual_rank not in expected_rank:
    raise ValueError(
        "%s has rank %s (shape %s), not the expected rank %s." %
        (name, actual_rank, tensor.shape, expected_rank))


def _check_compute_dtype(compute_dtype):
  """`compute_dtype` as a tf.DType, or ValueError."""
  dtype = tf.as_dtype(compute_dtype)
  if dtype not in _COMPUTE_DTYPES:
    raise ValueError("compute_dtype must be one of %s, got %s."
                     % (", ".join(d.name for d in _COMPUTE_DTYPES), dtype.name))
  return dtype
