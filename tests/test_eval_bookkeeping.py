"""The bookkeeping of evaluations: when a run evaluates, which evaluation
is best, when early stopping ends a run, the history file and the kept
best checkpoint, each against values worked out by hand from the
definitions (Google's step count, Keras' and Hugging Face's early
stopping)."""
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from checkpoints import best_checkpoint
from checkpoints import run_info
from driver import best_metric
from driver import eval_history
from driver import eval_schedule
from userio import cli


def test_epoch_boundaries_round_down_as_googles_step_count():
  """MRPC: 3668 examples, batch 32, 3 epochs: Google's num_train_steps is
  int(3668 / 32 * 3) = 343; epochs end after 114 (114.625), 229 (229.25)
  and 343 (343.875) updates."""
  schedule = eval_schedule.EvalSchedule(343, every_epochs=1,
                                        steps_per_epoch=3668 / 32)
  assert schedule.steps == (114, 229, 343)
  half = eval_schedule.EvalSchedule(343, every_epochs=0.5,
                                    steps_per_epoch=3668 / 32)
  # 57.3125, 114.625, 171.9375, 229.25, 286.5625 and the last update.
  assert half.steps == (57, 114, 171, 229, 286, 343)
  assert schedule.epoch(229) == pytest.approx(229 / 114.625)


def test_step_interval_and_both_intervals_together():
  assert eval_schedule.EvalSchedule(10, every_steps=4).steps == (4, 8, 10)
  assert eval_schedule.EvalSchedule(8, every_steps=4).steps == (4, 8)
  both = eval_schedule.EvalSchedule(10, every_steps=3, every_epochs=1,
                                    steps_per_epoch=4.0)
  assert both.steps == (3, 4, 6, 8, 9, 10)
  assert both.is_due(8) and not both.is_due(5)
  # A float boundary that is whole in exact arithmetic: 0.1 * 3 * 10.
  assert eval_schedule.EvalSchedule(
      5, every_epochs=0.1, steps_per_epoch=10.0).steps == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("kwargs, flag", [
    (dict(do_train=True, do_eval=False, every_steps=5, every_epochs=None),
     "--eval_every_steps evaluates on the dev set during training; add "
     "--do_eval"),
    (dict(do_train=False, do_eval=True, every_steps=None, every_epochs=1.0),
     "--eval_every_epochs sets when training evaluates; without --do_train"),
    (dict(do_train=True, do_eval=True, every_steps=-2, every_epochs=None),
     "--eval_every_steps=-2 must be positive"),
])
def test_interval_without_what_it_needs_is_refused(kwargs, flag):
  with pytest.raises(cli.UserError, match="^" + flag):
    eval_schedule.check_interval_flags(**kwargs)


def _entries(values, name="eval_f1"):
  return [{"global_step": 10 * (i + 1), name: v} for i, v in enumerate(values)]


def test_direction_comes_from_the_name():
  assert best_metric.Objective("eval_f1").higher_is_better
  assert best_metric.Objective("eval_accuracy").higher_is_better
  assert not best_metric.Objective("eval_loss").higher_is_better
  assert not best_metric.Objective("masked_lm_loss").higher_is_better
  assert not best_metric.Objective("perplexity").higher_is_better


def test_best_is_the_first_of_the_best_values_and_nan_never_wins():
  f1 = best_metric.Objective("eval_f1")
  assert best_metric.best_entry(_entries([0.5, 0.7, 0.7, 0.6]),
                                f1)["global_step"] == 20
  assert best_metric.best_entry(_entries([math.nan, 0.1, math.nan]),
                                f1)["global_step"] == 20
  loss = best_metric.Objective("eval_loss")
  assert best_metric.best_entry(_entries([0.9, 0.4, 0.5], "eval_loss"),
                                loss)["global_step"] == 20
  assert best_metric.best_entry([], f1) is None


def test_early_stopping_counts_as_hugging_faces_callback():
  """EarlyStoppingCallback(patience=2, threshold=0.05): the counter resets
  when a value beats the best so far by more than the threshold; the best
  so far follows every strict improvement, even a small one."""
  f1 = best_metric.Objective("eval_f1")
  # 0.50 best; 0.53 (+0.03, counter 1, best 0.53); 0.57 (+0.04 over 0.53,
  # counter 2): stops after the third evaluation.
  entries = _entries([0.50, 0.53, 0.57, 0.90])
  stop = best_metric.early_stop_entry(entries, f1, patience=2, min_delta=0.05)
  assert stop["global_step"] == 30
  # Without a threshold, every gain resets the counter: 0.6, 0.59, 0.58
  # stop after the fifth.
  entries = _entries([0.5, 0.6, 0.59, 0.6, 0.58])
  assert best_metric.early_stop_entry(entries, f1,
                                      patience=3)["global_step"] == 50
  assert best_metric.early_stop_entry(entries, f1, patience=4) is None
  assert best_metric.early_stop_entry(entries, f1, patience=0) is None


def test_best_metric_the_task_does_not_report_lists_those_it_does():
  with pytest.raises(cli.UserError) as raised:
    best_metric.check_best_metric("eval_mcc", ["eval_f1", "eval_accuracy",
                                               "eval_loss"], "eval_f1")
  assert str(raised.value) == (
      "--best_metric=eval_mcc is not a metric this task's evaluation "
      "reports; pass one of eval_accuracy, eval_f1, eval_loss.")
  assert best_metric.check_best_metric(None, ["eval_f1"],
                                       "eval_f1").name == "eval_f1"


def test_patience_without_evaluations_during_training_is_refused():
  with pytest.raises(cli.UserError, match="counts evaluations during "
                     "training"):
    best_metric.check_patience_flags(patience=3, min_delta=0.0,
                                     evaluates_in_training=False)
  best_metric.check_patience_flags(patience=3, min_delta=0.0,
                                   evaluates_in_training=True)


def test_history_is_exact_json_lines_in_step_order(tmp_path):
  history = eval_history.EvalHistory(str(tmp_path))
  history.add(eval_history.make_entry(
      {"global_step": 20, "eval_f1": np.float32(0.1), "eval_loss": np.nan,
       "gold": np.int64(7), "per_label": np.zeros(3)},
      str(tmp_path / "model.ckpt-20"), epoch=2 / 3))
  history.add(eval_history.make_entry(
      {"global_step": 10, "eval_f1": 0.25}, "model.ckpt-10"))
  history.add(eval_history.make_entry(
      {"global_step": 20, "eval_f1": np.float32(0.1), "eval_loss": np.nan,
       "gold": np.int64(7)}, "model.ckpt-20", epoch=2 / 3))
  with open(tmp_path / "eval_history.jsonl") as f:
    lines = f.read().splitlines()
  assert [json.loads(line)["global_step"] for line in lines] == [10, 20]
  second = json.loads(lines[1])
  # float32 0.1 is 0.100000001490116...: written exactly, as its float64.
  assert second["eval_f1"] == float(np.float32(0.1))
  assert second["eval_loss"] is None and second["gold"] == 7
  assert second["checkpoint"] == "model.ckpt-20"
  assert second["epoch"] == 0.666667
  assert lines[1] == json.dumps(second, sort_keys=True)
  reread = eval_history.EvalHistory(str(tmp_path))
  assert reread.entries == history.entries
  assert math.isnan(eval_history.metric_values(reread.entries[1])[
      "eval_loss"])


def test_a_damaged_history_line_is_named(tmp_path):
  (tmp_path / "eval_history.jsonl").write_text('{"global_step": 5}\n{"a"\n')
  with pytest.raises(cli.UserError, match=r"eval_history.jsonl:2 is not an "
                     "evaluation entry"):
    eval_history.EvalHistory(str(tmp_path))


def _save_checkpoint(folder, step, value):
  graph = tf.Graph()
  with graph.as_default():
    variable = tf.compat.v1.get_variable(
        "w", initializer=tf.constant([value, value], tf.float32))
    saver = tf.compat.v1.train.Saver([variable])
    with tf.compat.v1.Session() as sess:
      sess.run(variable.initializer)
      return saver.save(sess, os.path.join(folder, "model.ckpt"),
                        global_step=step, write_meta_graph=False)


def test_kept_best_survives_its_original_and_is_what_best_resolves_to(
    tmp_path):
  folder = str(tmp_path)
  run_info._write_record(folder, {"task": "mrpc"})  # pylint: disable=protected-access
  first = _save_checkpoint(folder, 10, 1.0)
  second = _save_checkpoint(folder, 20, 2.0)
  kept = best_checkpoint.keep(folder, first, metric="eval_f1", value=0.5,
                              global_step=10)
  assert kept == os.path.join(folder, "best", "model.ckpt-10")
  kept = best_checkpoint.keep(folder, second, metric="eval_f1", value=0.6,
                              global_step=20)
  for path in tf.io.gfile.glob(second + ".*"):
    os.remove(path)  # The Saver's rotation removes the original.
  assert sorted(os.listdir(tmp_path / "best")) == [
      "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
  reader = tf.train.load_checkpoint(kept)
  np.testing.assert_array_equal(reader.get_tensor("w"), [2.0, 2.0])
  assert run_info.read(folder)["best_checkpoint"] == {
      "checkpoint": "best/model.ckpt-20", "global_step": 20,
      "metric": "eval_f1", "value": 0.6}
  assert run_info.read(folder)["task"] == "mrpc"
  assert best_checkpoint.resolve("best", folder) == kept
  assert best_checkpoint.resolve("latest", folder) is None
  assert best_checkpoint.resolve("20", folder) == kept
  assert best_checkpoint.resolve("10", folder) == first


def test_use_checkpoint_that_names_nothing_lists_the_checkpoints(tmp_path):
  folder = str(tmp_path)
  _save_checkpoint(folder, 10, 1.0)
  with pytest.raises(cli.UserError) as raised:
    best_checkpoint.resolve("30", folder)
  assert str(raised.value) == (
      "--use_checkpoint=30 names no checkpoint; --output_dir=%s holds "
      "model.ckpt-10. Pass best, latest, a step or a checkpoint prefix."
      % folder)
  with pytest.raises(cli.UserError, match="records no best checkpoint"):
    best_checkpoint.resolve("best", folder, given=True)
  assert best_checkpoint.resolve("best", folder, given=False) is None
