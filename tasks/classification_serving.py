# coding=utf-8
"""A classifier's export: the serving input and the "text" signature.

`serving_input_receiver_fn_builder` takes the model's id rows as
`convert_single_example` makes them; `text_signature_of` takes raw texts
instead, laid out in the graph (serving/text_inputs.py), in windows with
--long_text=windows and combined as `combine_windows` combines them, and
answers as `answer` does.
"""

import tensorflow as tf

from checkpoints import problem_types
from runner import serving_input
from serving import text_inputs
from tasks import classification_predictions
from tasks import windows


def serving_input_receiver_fn_builder(seq_length, is_regression=False,
                                      multi_label=False, text_signature=None):
  """The serving input of an exported classifier (runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_single_example` makes them; with a
  `text_signature` (`text_signature_of`), the "text" signature takes the
  texts instead.
  """
  stand_ins = {"is_real_example": tf.int32}
  if not multi_label:  # classifier_head makes a multi-label model's own.
    stand_ins["label_ids"] = tf.float32 if is_regression else tf.int32
  return serving_input.receiver_fn_builder(seq_length, stand_ins,
                                           text_signature=text_signature)


def text_signature_of(tokenizer_fn, seq_length, text_pairs, labels,
                      problem_type, threshold=0.5, *, long_text=windows.TRUNCATE,
                      doc_stride=None):
  """A classifier's signature from raw text (runner/serving_input.py).

  Inputs: "text_a" (and, for a pair task, "text_b"), tf.string [batch];
  they become the model's inputs in the graph as `convert_single_example`
  makes them, padded to the batch's longest (serving/text_inputs.py), or
  with long_text=windows in `example_windows`' windows, combined per
  example as `combine_windows` combines them.
  Outputs, as `answer` gives them: "score" [batch] (regression), else
  "probabilities" [batch, labels] and "label_names" [batch, labels] (the
  label of each column), with "label" [batch] (the likeliest) or, for
  multi-label, "predicted" [batch, labels] (bool: above `threshold`).

  Args:
    tokenizer_fn: callable () -> a serving.graph_tokenizer tokenizer,
      called in the export graph.
  """
  example_of_window = []

  def inputs_fn():
    names = ["text_a", "text_b"] if text_pairs else ["text_a"]
    texts = {name: tf.compat.v1.placeholder(tf.string, [None], name=name)
             for name in names}
    if long_text != windows.WINDOWS:
      return texts, text_inputs.model_inputs(
          tokenizer_fn(), seq_length, texts["text_a"], texts.get("text_b"))
    inputs, example = text_inputs.window_inputs(
        tokenizer_fn(), seq_length, texts["text_a"], texts.get("text_b"),
        doc_stride)
    example_of_window.append(example)
    return texts, inputs

  def combined(values, texts):
    """The examples' outputs from their windows' (combine_windows)."""
    if not example_of_window:
      return values
    example = example_of_window[0]
    count = tf.shape(texts["text_a"], out_type=tf.int64)[0]
    if problem_type == problem_types.REGRESSION:
      return tf.math.unsorted_segment_mean(values, example, count)
    if problem_type == problem_types.MULTI_LABEL:
      return tf.math.unsorted_segment_max(values, example, count)
    log_probabilities = tf.math.log(tf.maximum(
        tf.cast(values, tf.float64),
        classification_predictions.MIN_PROBABILITY))
    mean = tf.math.unsorted_segment_mean(log_probabilities, example, count)
    return tf.cast(tf.nn.softmax(mean, axis=-1), values.dtype)

  def outputs_fn(predictions, texts):
    if problem_type == problem_types.REGRESSION:
      return {"score": combined(predictions["predictions"], texts)}
    probabilities = combined(predictions["probabilities"], texts)
    names = tf.constant([str(label) for label in labels])
    outputs = {"probabilities": probabilities,
               "label_names": tf.tile(names[None, :],
                                      [tf.shape(probabilities)[0], 1])}
    if problem_type == problem_types.MULTI_LABEL:
      outputs["predicted"] = probabilities > threshold
    else:
      outputs["label"] = tf.gather(names, tf.argmax(probabilities, axis=-1))
    return outputs

  return serving_input.TextSignature(inputs_fn, outputs_fn)
