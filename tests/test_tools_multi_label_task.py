"""Tests for tools/multi_label_task.py: the split it states, the labels
of the examples it draws, and its bag-of-words baseline on a task with a
known answer."""
import os
import random

import numpy as np
import pytest

from tools import multi_label_task

GLUE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "assets", "glue")


def test_train_and_dev_share_no_sentence():
  sources = multi_label_task.split_sources(GLUE_DIR, 6)
  train, dev = sources["train"], sources["dev"]
  every_train = set().union(*train.values())
  for label in multi_label_task.LABELS:
    assert len(dev[label]) > 300, label
    assert not set(dev[label]) & every_train, label
  assert all(len(s.split()) >= 6 for s in train["positive"] + dev["negative"])


def test_labels_are_the_sources_of_the_sentences_drawn():
  # Each sentence names its source, so the text tells the labels back.
  sentences = {label: ["%s%d" % (label, i) for i in range(200)]
               for label in multi_label_task.LABELS}
  examples = multi_label_task.make_examples(sentences, 100, random.Random(1),
                                            "t")
  used = []
  for example in examples:
    words = example["text"].split()
    used += words
    assert 1 <= len(words) <= multi_label_task.MAX_SENTENCES
    assert example["labels"] == [
        label for label in multi_label_task.LABELS
        if any(w.rstrip("0123456789") == label for w in words)]
  assert len(used) == len(set(used))
  with pytest.raises(ValueError, match="Out of"):
    multi_label_task.make_examples(
        {label: ["x"] for label in multi_label_task.LABELS}, 10,
        random.Random(1), "t")


def test_bag_of_words_learns_labels_that_words_decide():
  rng = random.Random(2)
  marks = dict(zip(multi_label_task.LABELS, ["alpha", "beta", "gamma",
                                             "delta", "omega"]))

  def draw(count):
    examples = []
    for _ in range(count):
      labels = [l for l in multi_label_task.LABELS if rng.random() < 0.4]
      words = [marks[l] for l in labels] + rng.sample(
          ["one", "two", "three", "four"], 2)
      rng.shuffle(words)
      examples.append({"text": " ".join(words), "labels": labels})
    return examples

  train, dev = draw(300), draw(50)
  probabilities = multi_label_task.bag_of_words(train, dev)
  truth = np.array([[l in e["labels"] for l in multi_label_task.LABELS]
                    for e in dev])
  np.testing.assert_array_equal(probabilities > 0.5, truth)
