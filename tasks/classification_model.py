# coding=utf-8
"""A classifier's model: BERT with the classification head, its loss,
its metrics in evaluation and the model_fn.

`create_model` puts `output_weights` and `output_bias` (Google's names) on
BERT's pooled [CLS] vector: a softmax over the labels with its
cross-entropy, one sigmoid per label with the binary cross-entropy
(multi-label), or one linear output with the squared error (regression).
`classifier_head` is it as the runner calls a head, with the streaming
metrics of tasks/classifier_metrics.py in EVAL.
"""

import functools

import tensorflow as tf

import modeling
from runner import estimator as estimator_lib
from runner import training_graph
from tasks import classifier_metrics


def head_shapes(bert_config, num_labels):
  """(name, shape) of the variables the classifier adds to BERT (one
  output for regression)."""
  return (("output_weights", [num_labels, bert_config.hidden_size]),
          ("output_bias", [num_labels]))


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, *,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False, multi_label=False, pos_weight=None):
  """A classifier (or regressor) head on BertModel's pooled [CLS] vector.

  With `skip_padding`, the encoder's feed-forward layers run on the
  non-padding tokens only (`modeling.BertModel`); the head reads the pooled
  vector alone, so the results are the same.

  Args:
    input_ids, input_mask, segment_ids: int32 Tensors [batch, seq_length].
    labels: int32 Tensor [batch] of class ids, or float32 [batch] scores
      when num_labels == 1 (regression), or with `multi_label` float32
      [batch, num_labels], 1 for each label an example has.
    num_labels: number of classes; 1 means regression.
    multi_label: one sigmoid per label instead of a softmax over them; the
      loss is the binary cross-entropy, averaged over labels and examples.
    pos_weight: with `multi_label`, a number (or one per label) that
      weighs the loss of a label's positive examples; None: 1.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_labels] float32,
     outputs): outputs are the probabilities [batch, num_labels] (each
     label's own with `multi_label`), or the predicted scores [batch] for
     regression.
  """
  model = modeling.BertModel(
      config=bert_config,
      is_training=is_training,
      input_ids=input_ids,
      input_mask=input_mask,
      token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype,
      skip_padding=skip_padding)

  # The head is tiny; float32 keeps its softmax and loss exact when the
  # encoder runs in half precision.
  output_layer = tf.cast(model.get_pooled_output(), tf.float32)
  hidden_size = output_layer.shape[-1]

  output_weights = tf.compat.v1.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "output_bias", [num_labels], initializer=tf.compat.v1.zeros_initializer())

  with tf.compat.v1.variable_scope("loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer, 0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    if multi_label:
      return _multi_label_loss(logits, labels, pos_weight)
    if num_labels == 1:
      predictions = tf.squeeze(logits, axis=-1)
      per_example_loss = tf.square(predictions - tf.cast(labels, tf.float32))
      return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
              predictions)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def _multi_label_loss(logits, labels, pos_weight):
  """create_model's outputs for float32 `logits` and multi-hot `labels`
  [batch, labels]: the mean binary cross-entropy (as Hugging Face's
  BCEWithLogitsLoss, `pos_weight` included) and the sigmoids."""
  labels = tf.cast(labels, tf.float32)
  if pos_weight is None:
    per_label = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                        logits=logits)
  else:
    per_label = tf.nn.weighted_cross_entropy_with_logits(
        labels=labels, logits=logits,
        pos_weight=tf.constant(pos_weight, tf.float32))
  per_example_loss = tf.reduce_mean(per_label, axis=-1)
  return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
          tf.sigmoid(logits))


def classifier_head(features, mode, settings, *, num_labels, is_regression,
                    official_metrics, multi_label=False, pos_weight=None):
  """`create_model` on a batch of `file_based_input_fn_builder`'s features,
  as runner/training_graph.model_fn_builder calls a head: EVAL's metrics
  are accuracy and loss with `official_metrics` ("f1", "mcc"), for
  regression the mean squared error, Pearson and Spearman, for
  `multi_label` the loss alone (its metrics need every prediction:
  `multi_label_metrics`); PREDICT gives "probabilities" [batch,
  num_labels] or, for regression, "predictions" [batch]. A served
  multi-label request has no labels: they stand in as zeros."""
  label_ids = features.get("label_ids")
  if label_ids is None:
    label_ids = tf.zeros([tf.shape(features["input_ids"])[0], num_labels])
  (total_loss, per_example_loss, logits, outputs) = create_model(
      settings.bert_config, mode == estimator_lib.ModeKeys.TRAIN,
      features["input_ids"], features["input_mask"], features["segment_ids"],
      label_ids, 1 if is_regression else num_labels,
      multi_label=multi_label, pos_weight=pos_weight,
      **settings.encoder_options())
  if mode != estimator_lib.ModeKeys.EVAL:
    key = "predictions" if is_regression else "probabilities"
    return training_graph.ModelOutputs(total_loss, predictions={key: outputs})
  is_real_example = tf.cast(features["is_real_example"], tf.float32)
  if multi_label:
    metric_ops = {"eval_loss": tf.compat.v1.metrics.mean(
        per_example_loss, weights=is_real_example)}
  elif is_regression:
    metric_ops = classifier_metrics.regression_metric_ops(
        label_ids, outputs, per_example_loss, is_real_example)
  else:
    metric_ops = classifier_metrics.classification_metric_ops(
        label_ids, tf.argmax(logits, axis=-1, output_type=tf.int32),
        per_example_loss, is_real_example, official_metrics)
  return training_graph.ModelOutputs(total_loss, eval_metric_ops=metric_ops)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     is_regression=False, official_metrics=(),
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32, skip_padding=False):
  """Builds the model_fn(features, labels, mode, params) the runner calls:
  `classifier_head` in runner/training_graph.py's model_fn. float16
  activations train with dynamic loss scaling."""
  return training_graph.model_fn_builder(
      functools.partial(classifier_head, num_labels=num_labels,
                        is_regression=is_regression,
                        official_metrics=official_metrics),
      training_graph.ModelSettings(
          bert_config, init_checkpoint, learning_rate, num_train_steps,
          num_warmup_steps, use_tpu, use_one_hot_embeddings, optimizer,
          gradient_checkpointing, compute_dtype, skip_padding))
