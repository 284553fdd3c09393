# coding=utf-8
"""run_ner.py's two loss averagings (--loss_average=window|word) over
several seeds on one recipe, scored by dev F1 (conlleval).

Each (averaging, seed) pair is one `run_ner.py --do_train --do_eval` in
--work_dir/<averaging>_seed<seed>; a pair whose eval_results.txt exists is
read, not run again, so an interrupted sweep resumes. The table gives
each averaging's F1 per seed, mean, standard deviation (n - 1), minimum
and maximum, and the mean and standard deviation of the per-seed
difference (word - window): the seeds pair the runs (the same
initialization of the head and the same data order), so the difference
is the fairer comparison. A run can stay in the solution that tags every
word O (dev F1 0, whichever averaging); the table counts the runs that
found entities and their mean F1 apart. Results also go to
--work_dir/results.json.

    python -m tools.ner_learnable_task \\
        --squad_file=../shared/assets/squad/v1.1/dev-v1.1.json \\
        --output_dir=/tmp/ner_task
    python -m bench.ner_loss_average --data_dir=/tmp/ner_task \\
        --model_dir=../shared/assets/models/minilm-l6-h384-uncased \\
        --seeds=1,2,3,4,5 -- --tag_scheme=iob2 --context=sentence \\
        --max_seq_length=64 --train_batch_size=32 --learning_rate=5e-5 \\
        --num_train_epochs=2

Arguments after "--" go to every run_ner.py run as they are.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

import bench
from tasks import token_loss

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "The CoNLL files (run_ner.py's "
                    "--data_dir).")
flags.DEFINE_string("model_dir", None, "bert_config.json, vocab.txt and "
                    "bert_model.ckpt of the model (uncased).")
flags.DEFINE_string(
    "work_dir", os.path.join(bench.REPO_ROOT, "bench", "out",
                             "ner_loss_average"),
    "Where each run's output folder and log go.")
flags.DEFINE_list("seeds", ["1", "2", "3", "4", "5"], "run_ner.py --seed "
                  "values.")
flags.DEFINE_list("averages", list(token_loss.LOSS_AVERAGES),
                  "The --loss_average values to compare.")


def _run(average, seed, extra, work_dir, data_dir, model_dir):
  """dev F1 of one run_ner.py run with --loss_average=`average`,
  --seed=`seed` and the arguments `extra`, on the CoNLL files of
  `data_dir` from the model of `model_dir`, in a folder of `work_dir`
  (run now unless its results exist there)."""
  output_dir = os.path.join(work_dir, "%s_seed%s" % (average, seed))
  results = os.path.join(output_dir, "eval_results.txt")
  if not os.path.exists(results):
    command = [sys.executable, os.path.join(bench.REPO_ROOT, "run_ner.py"),
               "--data_dir=" + data_dir,
               "--bert_config_file=" + os.path.join(
                   model_dir, "bert_config.json"),
               "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
               "--init_checkpoint=" + os.path.join(
                   model_dir, "bert_model.ckpt"),
               "--do_lower_case=true", "--do_train", "--do_eval",
               "--seed=%s" % seed, "--loss_average=" + average,
               "--output_dir=" + output_dir] + extra
    os.makedirs(work_dir, exist_ok=True)
    with open(output_dir + ".log", "w") as log:
      subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                     check=True)
  with open(results) as f:
    values = dict(line.strip().split(" = ") for line in f if " = " in line)
  return 100.0 * float(values["eval_f1"])


def _summary(values):
  """Mean, standard deviation (n - 1), minimum and maximum of `values`."""
  return {"mean": statistics.mean(values),
          "std": statistics.stdev(values) if len(values) > 1 else 0.0,
          "min": min(values), "max": max(values)}


def _learned(values):
  """How many runs found an entity at all (dev F1 above 0: the others
  stayed in the all-O solution), and their mean F1."""
  found = [value for value in values if value > 0]
  return len(found), statistics.mean(found) if found else 0.0


def main(argv):
  extra = argv[1:]
  jobs = [(average, seed) for seed in FLAGS.seeds
          for average in FLAGS.averages]
  f1 = {average: {} for average in FLAGS.averages}
  start = time.time()
  for done, (average, seed) in enumerate(jobs, 1):
    f1[average][seed] = _run(average, seed, extra, FLAGS.work_dir,
                             FLAGS.data_dir, FLAGS.model_dir)
    elapsed = time.time() - start
    print("run %d/%d: --loss_average=%s --seed=%s dev F1 %.2f; %.0f s, "
          "about %.0f s left" % (done, len(jobs), average, seed,
                                 f1[average][seed], elapsed,
                                 elapsed / done * (len(jobs) - done)),
          flush=True)
  report = {"command_extra": extra, "f1": f1,
            "summary": {a: _summary(list(v.values())) for a, v in f1.items()}}
  print("| --loss_average | " + " | ".join("seed %s" % s for s in FLAGS.seeds)
        + " | mean | std | min | max | runs with F1 > 0 | their mean |")
  for average in FLAGS.averages:
    summary = report["summary"][average]
    learned, learned_mean = _learned(list(f1[average].values()))
    summary.update(runs_learned=learned, mean_learned=learned_mean)
    print("| %s | %s | %.2f | %.2f | %.2f | %.2f | %d of %d | %.2f |" % (
        average, " | ".join("%.2f" % f1[average][s] for s in FLAGS.seeds),
        summary["mean"], summary["std"], summary["min"], summary["max"],
        learned, len(FLAGS.seeds), learned_mean))
  if set(FLAGS.averages) == set(token_loss.LOSS_AVERAGES):
    differences = [f1[token_loss.WORD][s] - f1[token_loss.WINDOW][s]
                   for s in FLAGS.seeds]
    report["word_minus_window"] = _summary(differences)
    print("word - window per seed: %s; mean %.2f, std %.2f" % (
        ", ".join("%+.2f" % d for d in differences),
        report["word_minus_window"]["mean"],
        report["word_minus_window"]["std"]))
  with open(os.path.join(FLAGS.work_dir, "results.json"), "w") as f:
    json.dump(report, f, indent=1)


if __name__ == "__main__":
  flags.mark_flags_as_required(["data_dir", "model_dir"])
  app.run(main)
