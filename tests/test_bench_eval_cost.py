"""bench/eval_cost.py's reading of training logs and its table arithmetic.

Made-up log text and runs against hand-worked values; nothing is trained
or timed.
"""

import pytest

from bench import eval_cost

# Lines as run_classifier.py and run_squad.py print them, with the lines
# around them that must not count.
LOG = """\
05:33:18 ***** Running training *****
05:33:18   Num examples = 3668
05:33:18   Evaluations: every 3 updates and after update 9: 3 evaluations
05:33:18   Num steps = 9
05:33:25 Saved checkpoint /tmp/out/model.ckpt-3
05:33:27 Evaluation at step 3/9 (epoch 0.01): eval_f1 = 0.7692, \
eval_accuracy = 0.6250, eval_loss = 0.6654, loss = 0.6654; the best so far; \
2 s.
05:33:40 Predicting: 19/26 (73.1%), 0.9 batches/s, 8 s left
05:35:30 Evaluation at step 6/9 (epoch 0.02): f1 = 9.0730, \
exact_match = 1.4563; best f1 = 9.5000 at step 3; 3 min 05 s.
07:45:31 Evaluation at step 9/9: f1 = 8.4148; best f1 = 9.5000 at step 3; \
2 h 10 min.
07:45:31 Best checkpoint: eval_f1 = 0.7692 at step 3, kept as \
/tmp/out/best/model.ckpt-3; prediction and --export_dir use it.
"""


def test_seconds_read_as_format_seconds_writes_them():
  assert eval_cost.parse_seconds("0 s") == 0
  assert eval_cost.parse_seconds("42 s") == 42
  assert eval_cost.parse_seconds("3 min 05 s") == 185
  assert eval_cost.parse_seconds("2 h 10 min") == 7800


def test_log_gives_the_updates_and_each_evaluation():
  assert eval_cost.parse_log(LOG) == {
      "num_steps": 9,
      "evaluations": [[3, 2], [6, 185], [9, 7800]]}


def test_log_without_training_or_evaluations():
  assert eval_cost.parse_log("05:33:30 Done in 0:00:14.\n") == {
      "num_steps": None, "evaluations": []}


def _run(wall, peak, seconds=()):
  return {"wall_s": wall, "peak_gib": peak,
          "evaluations": [[3 * (i + 1), s] for i, s in enumerate(seconds)]}


def test_summary_takes_medians_and_differences_within_rounds():
  """Three rounds: each figure is the median of its three values, and
  B - A is the median of the rounds' own differences (here not the
  difference of the medians: 140 - 105 = 35 and 1.55 - 1.1 = 0.45)."""
  rounds = [{"A": _run(100.0, 1.0), "B": _run(130.0, 1.5, [2, 4])},
            {"A": _run(110.0, 1.2), "B": _run(150.0, 1.6, [3, 5])},
            {"A": _run(90.0, 1.1), "B": _run(140.0, 1.8, [4, 6, 8])}]
  summary = eval_cost.summarize(rounds, num_dev=35)
  # Evaluations 2, 2, 3; their mean seconds 3, 4, 6.
  assert summary["evaluations"] == 2
  assert summary["eval_seconds_mean"] == 4.0
  assert summary["dev_examples_per_s"] == pytest.approx(8.75)
  assert summary["wall_a_s"] == 100.0
  assert summary["wall_b_s"] == 140.0
  # B - A per round: 30, 40, 50.
  assert summary["extra_wall_s"] == 40.0
  assert summary["peak_a_gib"] == pytest.approx(1.1)
  assert summary["peak_b_gib"] == pytest.approx(1.6)
  # B - A per round: 0.5, 0.4, 0.7.
  assert summary["extra_peak_gib"] == pytest.approx(0.5)


def test_summary_of_two_rounds_and_of_evaluations_under_a_second():
  """An even count of rounds takes the mean of the middle two; evaluations
  the lines give as "0 s" have no rate."""
  rounds = [{"A": _run(100.0, 1.0), "B": _run(130.0, 1.5, [0, 0])},
            {"A": _run(110.0, 1.2), "B": _run(150.0, 1.6, [0])}]
  summary = eval_cost.summarize(rounds, num_dev=32)
  assert summary["evaluations"] == 1.5
  assert summary["eval_seconds_mean"] == 0
  assert summary["dev_examples_per_s"] is None
  assert summary["extra_wall_s"] == 35.0
  assert summary["extra_peak_gib"] == pytest.approx(0.45)


def test_table_row_formats_the_summary():
  data = eval_cost.TaskData([], [], num_train=3668, num_dev=408)
  case = eval_cost.Case("minilm", "classifier", [], data)
  settings = eval_cost.Settings(steps=100, every=25, train_batch_size=32,
                                eval_batch_size=32, precision="fp32")
  summary = {"evaluations": 4, "eval_seconds_mean": 3.3,
             "dev_examples_per_s": 408 / 3.3, "wall_a_s": 95.4,
             "wall_b_s": 112.0, "extra_wall_s": 16.6, "peak_a_gib": 1.234,
             "peak_b_gib": 1.3, "extra_peak_gib": 0.066}
  row = eval_cost.table_row(case, settings, summary)
  assert row == ("| minilm | classifier | 100 | 25 | 408 | 4 | 3.3 | 123.6 | "
                 "95 | +17 | 1.23 | 1.30 | +0.07 |")
  assert row.count("|") == eval_cost.TABLE_HEAD.splitlines()[0].count("|")


def test_epochs_give_exactly_the_steps_asked_for():
  """The script computes int(examples / batch * epochs) (tasks/task.py);
  run_args' epochs land half an update above the count asked for."""
  data = eval_cost.TaskData(["--task_name=MRPC"], [], num_train=3668,
                            num_dev=32)
  case = eval_cost.Case("minilm", "classifier", ["--vocab_file=v"], data)
  for steps, batch in ((6, 8), (100, 32), (1000, 32), (7, 3)):
    settings = eval_cost.Settings(steps, 3, batch, 8, "fp32")
    args = eval_cost.run_args(case, settings, "/tmp/out", evaluate=False)
    epochs = float([a for a in args if a.startswith("--num_train_epochs=")
                    ][0].split("=")[1])
    assert int(3668 / batch * epochs) == steps
  with_eval = eval_cost.run_args(case, settings, "/tmp/out", evaluate=True)
  assert with_eval[:len(args)] == args
  assert with_eval[len(args):] == ["--do_eval", "--eval_every_steps=3",
                                   "--eval_batch_size=8"]
  assert "--save_checkpoints_steps=3" in args
  assert "--save_checkpoints_secs=0" in args
