# coding=utf-8
"""reproduce.py's results: dev metrics, selection, comparison, outputs.

Selection follows the paper (Section 4.1): per task, the run best on the
dev set by the task's metric is the selected model, over the whole grid and
all restarts. Next to it stand the mean, standard deviation (sample, n - 1),
minimum and maximum over the restarts of the selected hyperparameters.

Published numbers come from reference_results.json, never from this code.
A reference whose statistic is "mean" (the paper's Table 6 averages 5
restarts) is compared with our mean, any other with our selected run.
"""

import collections
import io
import json
import math
import os
import shutil
import statistics
import zipfile

from reproduction import plan

# Key in eval_results.txt (run_classifier.py, fractions) -> metric (percent).
_CLASSIFIER_KEYS = {"eval_accuracy": "accuracy", "eval_f1": "f1",
                    "eval_mcc": "mcc", "eval_pearson": "pearson",
                    "eval_spearman": "spearman"}
# SQuAD 2.0: the paper picks the no-answer threshold on dev to maximize F1.
_SQUAD2_KEYS = {"best_f1": "f1", "best_exact": "exact_match",
                "best_f1_thresh": "null_threshold"}
# Metrics of ours scored on a test file (run_ner.py's test_results.txt).
_TEST_PREFIX = "test_"
# The files GLUE's server expects in a submission zip.
SUBMISSION_HEADER = "index\tprediction"


def reference_model_for(references, bert_config):
  """The published model with the config's layers and width, or None."""
  for name, shape in references["models"].items():
    if (shape["num_hidden_layers"] == bert_config["num_hidden_layers"] and
        shape["hidden_size"] == bert_config["hidden_size"]):
      return name
  return None


# ----------------------------------------------------------------- metrics


def read_classifier_metrics(output_dir):
  """eval_results.txt of run_classifier.py as {metric: percent}."""
  metrics = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, _, value = line.partition(" = ")
      if key in _CLASSIFIER_KEYS:
        metrics[_CLASSIFIER_KEYS[key]] = 100.0 * float(value)
  return metrics


def read_squad_metrics(output_dir, version_2):
  """eval_results.json of run_squad.py as {metric: value}."""
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  if version_2:
    return {name: float(results[key]) for key, name in _SQUAD2_KEYS.items()}
  return {"f1": float(results["f1"]),
          "exact_match": float(results["exact_match"])}


def read_ner_metrics(output_dir):
  """run_ner.py's entity F1 in percent: "f1" on dev (eval_results.txt),
  "test_f1" on the test file (test_results.txt)."""
  metrics = {}
  for name, prefix, metric in (("eval_results.txt", "eval_", "f1"),
                               ("test_results.txt", "test_", "test_f1")):
    path = os.path.join(output_dir, name)
    if not os.path.exists(path):
      continue
    with open(path) as f:
      for line in f:
        key, _, value = line.partition(" = ")
        if key == prefix + "f1":
          metrics[metric] = 100.0 * float(value)
  return metrics


def read_cell_metrics(cell, output_dir):
  # run_swag.py writes eval_results.txt as run_classifier.py does.
  if plan.TASKS[cell.task].kind in ("glue", "swag"):
    return read_classifier_metrics(output_dir)
  if plan.TASKS[cell.task].kind == "ner":
    return read_ner_metrics(output_dir)
  return read_squad_metrics(output_dir, cell.task == "SQuAD2.0")


def stats(values):
  """n, mean, sample std (None below 2 values), min and max of `values`."""
  values = list(values)
  return {"n": len(values), "mean": statistics.fmean(values),
          "std": statistics.stdev(values) if len(values) > 1 else None,
          "min": min(values), "max": max(values)}


def result_task(task):
  """The name a GLUE task's dev result goes by (MNLI's dev is matched)."""
  return "MNLI-m" if task == "MNLI" else task


def summarize_task(task, cells, metrics):
  """Selection and statistics of one task's cells.

  Args:
    cells: the task's cells in grid order.
    metrics: cell name -> {metric: value}, for the cells that finished.

  Returns:
    dict: selection_metric, selected_cell (None if no cell finished),
    selected_config, configs (per configuration: hparams and per-metric
    stats), metrics (per metric: the selected config's stats and the
    selected cell's value as "selected").
  """
  names = plan.TASKS[task].metrics
  selection = names[0]
  finished = [cell for cell in cells if cell.name in metrics]
  by_config = collections.OrderedDict()
  for cell in finished:
    by_config.setdefault(cell.config, []).append(cell)
  configs = []
  for members in by_config.values():
    hparams = members[0].hparams()
    hparams.pop("seed")
    configs.append({
        "name": members[0].config_name, "hparams": hparams,
        "seeds": [cell.seed for cell in members],
        "metrics": {name: stats(metrics[c.name][name] for c in members)
                    for name in names}})
  summary = {"selection_metric": selection, "selected_cell": None,
             "selected_config": None, "configs": configs, "metrics": {}}
  if not finished:
    return summary
  best = max(finished, key=lambda cell: metrics[cell.name][selection])
  summary["selected_cell"] = best.name
  summary["selected_config"] = best.config_name
  for name in names:
    values = [metrics[c.name][name] for c in by_config[best.config]]
    summary["metrics"][name] = dict(stats(values),
                                    selected=metrics[best.name][name])
  if "null_threshold" in metrics[best.name]:
    summary["null_threshold"] = metrics[best.name]["null_threshold"]
  return summary


def single_run_summary(task, values, cell_name):
  """A summary of one evaluation (MNLI-mm with MNLI's selected model)."""
  return {"selection_metric": None, "selected_cell": cell_name,
          "selected_config": None, "configs": [],
          "metrics": {name: dict(stats([value]), selected=value)
                      for name, value in values.items()},
          "note": "dev set evaluated with the model selected on %s" % task}


# -------------------------------------------------------------- comparison


def matching_references(references, model, task, metric):
  """The published results for (model, task, metric), dev ones first; a
  "test_" metric (ours on a test file) matches the published test ones."""
  split = None
  if metric.startswith(_TEST_PREFIX):
    metric, split = metric[len(_TEST_PREFIX):], "test"
  found = [entry for entry in references["results"]
           if entry["model"] == model and entry["task"] == task and
           entry["metric"] == metric and split in (None, entry["split"])]
  return sorted(found, key=lambda entry: entry["split"] != "dev")


def matching_ranges(references, model, task, metric):
  return [entry for entry in references["ranges"]
          if entry["model"] == model and entry["task"] == task and
          entry["metric"] == metric]


def compare(ours, reference):
  """(our value, difference) against one published entry."""
  value = ours["mean"] if reference["statistic"] == "mean" else ours[
      "selected"]
  return value, value - reference["value"]


def comparison_rows(summaries, references, model):
  """Rows of the comparison table: one per (task, metric) with a result."""
  rows = []
  for task, summary in summaries.items():
    for metric, ours in summary["metrics"].items():
      if metric == "null_threshold":
        continue
      published = matching_references(references, model, task, metric)
      row = {"task": task, "metric": metric, "ours": ours,
             "paper": [e for e in published if e["source"] == "paper"],
             "google_readme": [e for e in published
                               if e["source"] == "google_readme"],
             "ranges": matching_ranges(references, model, task, metric)}
      first = (row["paper"] or row["google_readme"] or [None])[0]
      if first is not None:
        value, difference = compare(ours, first)
        row["difference"] = {"against": first, "ours": value,
                             "value": difference}
      rows.append(row)
  return rows


# ---------------------------------------------------------------- markdown


def _number(value, digits=1):
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return "–"
  return "%.*f" % (digits, value)


def _short_where(entry):
  """"Table 6" of "Table 6 (Section 5.2)"; "README" of README sections."""
  if entry["source"] == "google_readme":
    return "README"
  return entry["where"].split(" (")[0]


def _reference_text(entries, ranges=()):
  parts = ["%s (%s, %s%s)" % (_number(e["value"]), e["split"],
                              _short_where(e),
                              ", mean" if e["statistic"] == "mean" else "")
           for e in entries[:1]]
  parts += ["%s–%s (%s range, %s)" % (_number(r["low"]), _number(r["high"]),
                                      r["split"], _short_where(r))
            for r in ranges]
  return "; ".join(parts) or "–"


def _difference_text(row):
  difference = row.get("difference")
  if difference is None:
    return "–"
  against = difference["against"]
  what = "mean" if against["statistic"] == "mean" else "selected"
  return "%+.1f (our %s − %s %s)" % (difference["value"], what,
                                     against["split"], _short_where(against))


def used_sources(rows):
  """The published entries the comparison shows, for the sources list."""
  seen = {}
  for row in rows:
    for entry in row["paper"][:1] + row["google_readme"][:1] + row["ranges"]:
      seen.setdefault((entry["source"], entry["where"]), entry)
  return ["%s: %s" % ("paper" if source == "paper" else "Google README",
                      where) for source, where in seen]


def comparison_table(rows):
  lines = ["| task | metric | n | ours mean ± std | min | max | "
           "ours selected (best on dev) | paper | Google README | "
           "difference |", "|" + "---|" * 10]
  for row in rows:
    ours = row["ours"]
    lines.append("| %s | %s | %d | %s ± %s | %s | %s | %s | %s | %s | %s |" % (
        row["task"], row["metric"], ours["n"], _number(ours["mean"]),
        _number(ours["std"]), _number(ours["min"]), _number(ours["max"]),
        _number(ours["selected"]), _reference_text(row["paper"]),
        _reference_text(row["google_readme"], row["ranges"]),
        _difference_text(row)))
  return lines


def config_tables(summaries):
  lines = []
  for task, summary in summaries.items():
    if not summary["configs"]:
      continue
    metric = summary["selection_metric"]
    threshold = ""
    if "null_threshold" in summary:
      threshold = ", its no-answer threshold %.4f" % summary["null_threshold"]
    lines += ["", "### %s (%s on dev, selected: %s%s)" % (
        task, metric, summary["selected_cell"], threshold), "",
              "| configuration | seeds | mean | std | min | max |",
              "|---|---|---|---|---|---|"]
    for config in summary["configs"]:
      s = config["metrics"][metric]
      lines.append("| %s | %s | %s | %s | %s | %s |" % (
          config["name"], ",".join(str(x) for x in config["seeds"]),
          _number(s["mean"], 2), _number(s["std"], 2), _number(s["min"], 2),
          _number(s["max"], 2)))
  return lines


def cell_table(cells_info):
  lines = ["| cell | status | dev metrics | wall time |", "|---|---|---|---|"]
  for info in cells_info:
    metrics = ", ".join("%s %s" % (k, _number(v, 2))
                        for k, v in sorted((info["metrics"] or {}).items()))
    status = info["status"]
    if status == "failed":
      status = "failed (exit %d: %s)" % (info["exit_status"],
                                         info["last_stderr_line"])
    lines.append("| %s | %s | %s | %.0f s |" % (
        info["name"], status, metrics or "–", info["wall_seconds"]))
  return lines


def results_markdown(report):
  """results.md: the whole report as a person reads it."""
  lines = ["# Reproduction results", "",
           "Generated %s by:" % report["generated"], "",
           "    " + report["command"], ""]
  if report["reduced"]:
    lines += ["**REDUCED RUN: not the published protocol.**", ""]
    lines += ["- " + note for note in report["reduced"]] + [""]
  else:
    lines += ["The published protocol, unreduced.", ""]
  lines += ["Model: %s. Compared with: %s." % (
      report["model"]["description"], report["reference_model"] or "none"),
            "Preset: %s. All numbers are dev-set numbers in percent "
            "(MCC and correlations x 100)." % report["preset"], "",
            "## Comparison", ""]
  lines += comparison_table(report["comparison"])
  sources = used_sources(report["comparison"])
  if sources:
    lines += ["", "Published numbers (reference_results.json): " +
              "; ".join(sources) + "."]
  lines += ["", "## Configurations"] + config_tables(report["tasks"])
  lines += ["", "## Cells", ""] + cell_table(report["cells"])
  submission = report.get("submission")
  if submission:
    lines += ["", "## GLUE test-server submission", ""]
    if submission["zip"]:
      lines.append("`%s`: %s." % (submission["zip"],
                                  ", ".join(submission["files"])))
    else:
      lines.append("Not written: no test-set prediction finished.")
    if submission["missing"]:
      lines.append("Missing for a complete submission: %s." %
                   ", ".join(submission["missing"]))
  return "\n".join(lines) + "\n"


def write_atomically(path, text):
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


# --------------------------------------------------------- GLUE submission


def check_submission_file(path):
  """Raises ValueError unless `path` starts with GLUE's header line."""
  with open(path, encoding="utf-8") as f:
    header = f.readline().rstrip("\n")
  if header != SUBMISSION_HEADER:
    raise ValueError("%s starts with %r, not %r." % (path, header,
                                                     SUBMISSION_HEADER))


def write_submission_zip(zip_path, files):
  """Zips {name in the zip: path} flat, as GLUE's server wants them."""
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
    for name, path in sorted(files.items()):
      check_submission_file(path)
      archive.write(path, name)
  with open(zip_path + ".tmp", "wb") as f:
    f.write(buffer.getvalue())
  os.replace(zip_path + ".tmp", zip_path)


# -------------------------------------------------- TensorBoard's HParams


def write_hparams_summaries(logdir, cells, metrics):
  """One HParams session per finished cell, for TensorBoard's dashboard.

  The folder is written anew (under a temporary name, then renamed), so a
  rerun does not add duplicate sessions.
  """
  # Imported here: loading TensorFlow is only needed for this output.
  # pylint: disable=g-import-not-at-top
  # Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
  from userio import quiet_tensorflow  # pylint: disable=unused-import
  import tensorflow as tf
  from tensorboard.plugins.hparams import api as hp
  # pylint: enable=g-import-not-at-top
  temporary = logdir + ".tmp"
  shutil.rmtree(temporary, ignore_errors=True)
  finished = [cell for cell in cells if cell.name in metrics]
  metric_names = sorted({name for cell in finished
                         for name in metrics[cell.name]})
  hparam_names = list(plan.Cell.__dataclass_fields__)
  with tf.summary.create_file_writer(temporary).as_default():
    hp.hparams_config(
        hparams=[hp.HParam(name) for name in hparam_names],
        metrics=[hp.Metric("dev/" + name) for name in metric_names])
  for cell in finished:
    writer = tf.summary.create_file_writer(os.path.join(temporary, cell.name))
    with writer.as_default():
      hp.hparams(cell.hparams(), trial_id=cell.name)
      for name, value in sorted(metrics[cell.name].items()):
        tf.summary.scalar("dev/" + name, value, step=0)
    writer.close()
  shutil.rmtree(logdir, ignore_errors=True)
  os.replace(temporary, logdir)
