# coding=utf-8
"""SQuAD's model: BERT with the span head, its loss, the model_fn and the
export's serving input.

`create_model` adds `cls/squad/output_weights` [2, hidden] and
`cls/squad/output_bias` [2] on BERT's sequence output, giving start and end
logits for every position; `squad_head` is it as the runner calls a head,
the loss the mean of the start and end cross-entropies (`_position_loss`).
"""

import tensorflow as tf

import modeling
from runner import estimator as estimator_lib
from runner import serving_input
from runner import training_graph


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings, *, gradient_checkpointing=False,
                 compute_dtype=tf.float32):
  """BERT plus the span head.

  Args:
    bert_config: modeling.BertConfig.
    is_training: bool, enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    use_one_hot_embeddings: bool, embedding lookup by one-hot matmul.
    gradient_checkpointing: recompute each layer in the backward pass.
    compute_dtype: dtype of BERT's activations (the head runs in float32).

  Returns:
    (start_logits, end_logits), float32 [B, S].
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype)
  final_hidden = tf.cast(model.get_sequence_output(), tf.float32)
  batch_size, seq_length, hidden_size = modeling.get_shape_list(
      final_hidden, expected_rank=3)
  output_weights = tf.compat.v1.get_variable(
      "cls/squad/output_weights", [2, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "cls/squad/output_bias", [2],
      initializer=tf.compat.v1.zeros_initializer())
  final_hidden_matrix = tf.reshape(final_hidden,
                                   [batch_size * seq_length, hidden_size])
  logits = tf.matmul(final_hidden_matrix, output_weights, transpose_b=True)
  logits = tf.nn.bias_add(logits, output_bias)
  logits = tf.reshape(logits, [batch_size, seq_length, 2])
  start_logits, end_logits = tf.unstack(tf.transpose(logits, [2, 0, 1]),
                                        axis=0)
  return start_logits, end_logits


def _position_loss(logits, positions, seq_length):
  """Mean cross-entropy of float32 `logits` [B, S] at int `positions` [B]."""
  one_hot_positions = tf.one_hot(positions, depth=seq_length,
                                 dtype=tf.float32)
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  return -tf.reduce_mean(tf.reduce_sum(one_hot_positions * log_probs, axis=-1))


def squad_head(features, mode, settings):
  """`create_model` on a batch of `input_fn_builder`'s features, as
  runner/training_graph.model_fn_builder calls a head (TRAIN and PREDICT).

  TRAIN: loss = (start cross-entropy + end cross-entropy) / 2 against the
  features "start_positions"/"end_positions". PREDICT: "unique_ids",
  "start_logits", "end_logits".
  """
  if mode == estimator_lib.ModeKeys.EVAL:
    raise ValueError("SQuAD is evaluated from its predictions (the official "
                     "metrics); its model has no EVAL mode.")
  start_logits, end_logits = create_model(
      bert_config=settings.bert_config,
      is_training=mode == estimator_lib.ModeKeys.TRAIN,
      input_ids=features["input_ids"], input_mask=features["input_mask"],
      segment_ids=features["segment_ids"],
      use_one_hot_embeddings=settings.use_one_hot_embeddings,
      gradient_checkpointing=settings.gradient_checkpointing,
      compute_dtype=settings.compute_dtype)
  if mode == estimator_lib.ModeKeys.PREDICT:
    return training_graph.ModelOutputs(None, predictions={
        "unique_ids": features["unique_ids"],
        "start_logits": start_logits, "end_logits": end_logits})
  seq_length = modeling.get_shape_list(features["input_ids"])[1]
  return training_graph.ModelOutputs((
      _position_loss(start_logits, features["start_positions"], seq_length) +
      _position_loss(end_logits, features["end_positions"], seq_length)) / 2.0)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32):
  """The `model_fn` for estimator.Estimator: `squad_head` in
  runner/training_graph.py's model_fn. float16 activations train with
  dynamic loss scaling."""
  return training_graph.model_fn_builder(
      squad_head, training_graph.ModelSettings(
          bert_config, init_checkpoint, learning_rate, num_train_steps,
          num_warmup_steps, use_tpu, use_one_hot_embeddings, optimizer,
          gradient_checkpointing, compute_dtype))


def serving_input_receiver_fn_builder(seq_length, text_signature=None):
  """The serving input of an exported SQuAD model (see runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_examples_to_features` makes them; the
  outputs are "start_logits" and "end_logits" [batch, seq_length]. The
  model_fn's "unique_ids" prediction is left out of the signature: a
  request's ids are the caller's to keep. With a `text_signature`
  (squad_text.text_signature_of), the "text" signature takes questions and
  contexts instead and answers them.
  """
  return serving_input.receiver_fn_builder(
      seq_length, {"unique_ids": tf.int32}, text_signature=text_signature)
