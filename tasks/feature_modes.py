# coding=utf-8
"""Which layers of a frozen BERT the feature-based tagger reads.

The BERT paper's Table 7 compares fine-tuning with a feature-based
approach: BERT stays frozen and a randomly initialized two-layer BiLSTM
reads some of its layers. The modes name the rows of that table; a layer
is indexed among [the embedding output] + the encoder layers, 0 being the
embeddings. Plain Python, so that a command can list the modes in its
--help before TensorFlow loads.
"""

# Fine-tuning: the whole model trains and nothing is frozen.
FINE_TUNING = "none"
FEATURE_MODES = (FINE_TUNING, "embeddings", "second_to_last", "last",
                 "sum_last_four", "concat_last_four", "sum_all")
# How a mode combines its layers.
ONE, SUM, CONCAT = "one", "sum", "concat"


def layer_choice(num_hidden_layers, feature_mode):
  """(indices of the layers `feature_mode` reads, how it combines them:
  ONE, SUM (a learned weighted sum) or CONCAT).

  Args:
    num_hidden_layers: the encoder layers of the model.
    feature_mode: one of FEATURE_MODES other than FINE_TUNING.
  """
  last = num_hidden_layers
  return {"embeddings": ([0], ONE),
          "second_to_last": ([last - 1], ONE),
          "last": ([last], ONE),
          "sum_last_four": (list(range(last - 3, last + 1)), SUM),
          "concat_last_four": (list(range(last - 3, last + 1)), CONCAT),
          "sum_all": (list(range(1, last + 1)), SUM)}[feature_mode]


def min_layers(feature_mode):
  """The fewest encoder layers a feature mode needs."""
  return 4 if feature_mode.endswith("_four") else (
      2 if feature_mode == "second_to_last" else 1)
