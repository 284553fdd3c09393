# coding=utf-8
"""The official SQuAD v1.1 and v2.0 metrics as a command.

The metrics are tasks/squad_metrics.py's, written from the published
definitions of the official evaluation scripts (that module says how).

Command line (prints JSON as the official scripts do):

    python squad_evaluate.py DATA.json predictions.json \
        [--na-prob-file null_odds.json] [--na-prob-thresh 1.0] \
        [--out-file F] [--version {1.1,2.0}]

The version comes from `--version`, else SQuAD 2.0 when the data has
`is_impossible` fields or a `--na-prob-file` is given or its "version" field
says 2.0, else v1.1.
"""

import argparse
import json
import os
import sys

from tasks import squad_metrics
from userio import cli
from userio import file_systems
from userio import utf8


# ------------------------------------------------------------ command --


def load_json(path, what):
  """Parsed JSON of `path`; errors name the file, the position and the fix."""
  if not file_systems.exists(path):
    raise cli.UserError("%s file %s does not exist; check the path." %
                        (what, path))
  if file_systems.isdir(path):
    raise cli.UserError("%s file %s is a folder; pass the JSON file in it." %
                        (what, path))
  text = utf8.decode(file_systems.read_bytes(path), path,
                     fix="Save the %s file as UTF-8." % what.lower())
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    # str(e) puts the place after the message ("... starting at: line 2
    # column 13 (char 24)"), which reads right whatever the message is.
    raise cli.UserError("%s file %s is not valid JSON (%s); fix or "
                        "regenerate the file." % (what, path, e)) from None


def is_version_2(dataset_json, has_na_probs=False):
  """True when a parsed SQuAD file (or a na-prob file) means SQuAD 2.0."""
  if has_na_probs:
    return True
  if str(dataset_json.get("version", "")).lstrip("v").startswith("2"):
    return True
  return any("is_impossible" in qa
             for qa in squad_metrics.iter_qas(dataset_json["data"]))


def _check_data(dataset_json, path):
  """Raises unless the "data" of a parsed SQuAD file holds articles of
  paragraphs of questions, as the metrics read them."""
  data = dataset_json.get("data") if isinstance(dataset_json, dict) else None
  if not isinstance(data, list):
    raise ValueError("Data file %s has no top-level \"data\" list; pass an "
                     "official SQuAD json file." % path)
  for i, article in enumerate(data):
    paragraphs = article.get("paragraphs") if isinstance(
        article, dict) else None
    if not isinstance(paragraphs, list):
      raise ValueError("Data file %s: data[%d] has no \"paragraphs\" list; "
                       "pass an official SQuAD json file." % (path, i))
    for j, paragraph in enumerate(paragraphs):
      qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
      if not isinstance(qas, list) or not all(
          isinstance(qa, dict) and "id" in qa and
          isinstance(qa.get("answers"), list) for qa in qas):
        raise ValueError(
            "Data file %s: data[%d].paragraphs[%d] needs a \"qas\" list of "
            "questions with \"id\" and \"answers\"; pass an official "
            "SQuAD json file." % (path, i, j))


def _check_out_file(path):
  """Raises unless --out-file can be written: its folder exists and it is
  no folder itself (checked before the evaluation)."""
  if file_systems.isdir(path):
    raise ValueError("--out-file=%s is a folder; name a file in it." % path)
  folder = os.path.dirname(path)
  if folder and not file_systems.isdir(folder):
    raise ValueError("--out-file=%s: folder %s does not exist; create it or "
                     "name a file in an existing folder." % (path, folder))


def _check_predictions(preds, path):
  """Raises unless `preds` maps question ids to answer strings."""
  if not isinstance(preds, dict):
    raise ValueError("Predictions file %s must hold a JSON object mapping "
                     "question ids to answer texts." % path)
  for qid, text in preds.items():
    if not isinstance(text, str):
      raise ValueError("Predictions file %s: question id %r maps to %r; "
                       "each prediction must be a string." % (path, qid, text))


def run(args):
  """Evaluates as parsed from the command line; returns the metrics dict."""
  if args.na_prob_file and args.version == "1.1":
    raise ValueError("--na-prob-file applies to SQuAD 2.0, but --version=1.1 "
                     "was given; drop one of the two.")
  if args.out_file:
    _check_out_file(args.out_file)
  dataset_json = load_json(args.data_file, "Data")
  _check_data(dataset_json, args.data_file)
  preds = load_json(args.pred_file, "Predictions")
  _check_predictions(preds, args.pred_file)
  na_probs = None
  if args.na_prob_file:
    na_probs = load_json(args.na_prob_file, "No-answer probability")
  if args.version:
    version_2 = args.version == "2.0"
  else:
    version_2 = is_version_2(dataset_json, na_probs is not None)
  if not version_2:
    return squad_metrics.evaluate(dataset_json["data"], preds)
  return squad_metrics.evaluate_v2(dataset_json["data"], preds, na_probs,
                                   args.na_prob_thresh)


class _ArgumentParser(argparse.ArgumentParser):
  """argparse's parser whose usage errors are the command's one line
  (argparse prints its usage before them)."""

  def error(self, message):
    raise cli.UserError("%s (see --help)" % message)


def _parse_args(argv):
  parser = _ArgumentParser(
      description="Official SQuAD v1.1 / v2.0 evaluation.")
  parser.add_argument("data_file", metavar="data.json",
                      help="SQuAD data file with the gold answers.")
  parser.add_argument("pred_file", metavar="pred.json",
                      help="Predictions: question id -> answer text.")
  parser.add_argument("--out-file", "-o", metavar="eval.json",
                      help="Write the metrics here instead of printing them.")
  parser.add_argument("--na-prob-file", "-n", metavar="na_prob.json",
                      help="Question id -> no-answer probability (v2.0).")
  parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                      help="Predict no answer above this no-answer "
                      "probability (default 1.0).")
  parser.add_argument("--version", choices=["1.1", "2.0"],
                      help="Force the SQuAD version instead of detecting it.")
  return parser.parse_args(argv)


def main(argv=None):
  args = _parse_args(sys.argv[1:] if argv is None else argv)
  try:
    result = run(args)
  except ValueError as e:
    print(cli.error_line(e), file=sys.stderr)
    return cli.USAGE_STATUS
  # v1.1 printed a single line, v2.0 an indented OrderedDict.
  text = json.dumps(result) if "exact_match" in result else json.dumps(
      result, indent=2)
  if args.out_file:
    with file_systems.open_file(args.out_file, "w") as f:
      f.write(text + "\n")
  else:
    print(text)
  return 0


if __name__ == "__main__":
  sys.exit(cli.call(main))
