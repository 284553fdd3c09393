"""Your own data files (tasks/labeled_files.py): CSV, TSV and JSON Lines
read as Python's csv and json modules define them, one line per bad row,
and the problem type and labels inferred from the training labels."""
import codecs
import os
import json

import pytest

from checkpoints import problem_types
from tasks import labeled_files
from userio import cli

COLUMNS = labeled_files.Columns("text", None, "label", None)


def _write(path, text, bom=False):
  data = text.encode("utf-8")
  path.write_bytes((codecs.BOM_UTF8 if bom else b"") + data)
  return str(path)


def test_csv_quoting_newlines_tabs_bom_blank_lines_and_windows_ends(tmp_path):
  """Quoted fields keep their commas, line breaks and tabs; a byte-order
  mark, blank lines and \\r\\n line ends change nothing; each row's line is
  the one it starts on."""
  text = ('id,text,label\r\n'
          '7,"Hello, world",greet\r\n'
          '\r\n'
          '8,"two\r\nlines",other\r\n'
          '9,"a\ttab ""quoted""",greet\r\n')
  path = _write(tmp_path / "data.csv", text, bom=True)
  rows = labeled_files.read_rows(
      path, labeled_files.Columns("text", None, "label", "id"))
  assert [(r.line, r.text_a, r.label, r.example_id) for r in rows] == [
      (2, "Hello, world", "greet", "7"),
      (4, "two\r\nlines", "other", "8"),
      (6, 'a\ttab "quoted"', "greet", "9")]


def test_tsv_with_a_header_and_one_without(tmp_path):
  with_header = _write(tmp_path / "a.tsv", "label\tq\tp\n1\tWhy?\tBecause.\n")
  rows = labeled_files.read_rows(
      with_header, labeled_files.Columns("q", "p", "label", None))
  assert [(r.text_a, r.text_b, r.label, r.example_id) for r in rows] == [
      ("Why?", "Because.", "1", "2")]
  without = _write(tmp_path / "b.tab", "Why?\tBecause.\t0\nHow?\tSo.\t1\n")
  rows = labeled_files.read_rows(
      without, labeled_files.Columns("0", "1", "2", None))
  assert [(r.line, r.text_a, r.text_b, r.label) for r in rows] == [
      (1, "Why?", "Because.", "0"), (2, "How?", "So.", "1")]


def test_json_lines_keep_their_values(tmp_path):
  path = _write(tmp_path / "data.jsonl", "\n".join([
      json.dumps({"text": "A", "label": ["x", "y"], "id": 5}), "",
      json.dumps({"text": "B", "label": 2.5, "id": "b"})]) + "\n")
  rows = labeled_files.read_rows(
      path, labeled_files.Columns("text", None, "label", "id"))
  assert [(r.line, r.text_a, r.label, r.example_id) for r in rows] == [
      (1, "A", ["x", "y"], "5"), (3, "B", 2.5, "b")]


def test_a_test_file_needs_no_label(tmp_path):
  path = _write(tmp_path / "test.csv", "text\nOnly text.\n")
  (row,) = labeled_files.read_rows(path, COLUMNS, needs_label=False)
  assert (row.text_a, row.label) == ("Only text.", None)


@pytest.mark.parametrize("name, content, columns, message", [
    ("a.csv", "text,label\nHi,1\n",
     labeled_files.Columns("sentence", None, "label", None),
     "a.csv:1: the header has no column 'sentence' (it has 'text', "
     "'label'). Pass --text_a_column with one of them."),
    ("a.csv", "text,label\nHi,1\nOops\n", COLUMNS,
     "a.csv:3: found 1 fields, expected 2 as in the header"),
    ("a.csv", "text,label\n  ,1\n", COLUMNS,
     "a.csv:2: text_a 'text' is empty. Fill in the text or delete that "
     "row."),
    ("a.csv", 'text,label\n"unclosed,1\n', COLUMNS, "a.csv:2: not valid CSV"),
    ("a.jsonl", '{"text": "Hi", "label": 1}\n{"text": "Ho"}\n', COLUMNS,
     "a.jsonl:2: no 'label' (the --label_column)"),
    ("a.jsonl", '{"text": "Hi", "label": 1}\n{"text": \n', COLUMNS,
     "a.jsonl:2: not valid JSON"),
    ("a.jsonl", '["Hi", 1]\n', COLUMNS, "a.jsonl:1: a JSON list, not an "
     "object"),
    ("a.jsonl", '{"text": 3, "label": 1}\n', COLUMNS,
     "a.jsonl:1: text_a 'text' is 3, not a text"),
    ("a.txt", "Hi\n", COLUMNS, "cannot tell the format from the extension "
     "'.txt'. Name the file .csv, .tsv or .jsonl, or pass --input_format."),
])
def test_bad_rows_end_in_one_line(tmp_path, name, content, columns, message):
  path = _write(tmp_path / name, content)
  with pytest.raises(cli.UserError) as error:
    labeled_files.read_rows(path, columns)
  text = str(error.value)
  assert "\n" not in text
  assert text.startswith(path) and message in text, text


def test_a_byte_that_is_not_utf8_is_named(tmp_path):
  path = tmp_path / "a.csv"
  path.write_bytes(b"text,label\ncaf\xe9,1\n")
  with pytest.raises(cli.UserError, match=r"a.csv:2: byte 0xe9 at column 4 "
                     r"is not UTF-8"):
    labeled_files.read_rows(str(path), COLUMNS)


@pytest.mark.parametrize("cells, want", [
    (["pos", "neg"], problem_types.SINGLE_LABEL),
    (["0", "1", "1"], problem_types.SINGLE_LABEL),
    ([1, 0, 2], problem_types.SINGLE_LABEL),
    (["3.0", "4"], problem_types.SINGLE_LABEL),
    (["3.5", "4", "0.2"], problem_types.REGRESSION),
    ([0.5, 3], problem_types.REGRESSION),
    (["a,b", "c"], problem_types.MULTI_LABEL),
    ([["a"], []], problem_types.MULTI_LABEL),
    (["1.5", "x"], problem_types.SINGLE_LABEL),
])
def test_problem_type_of_the_training_labels(cells, want):
  assert labeled_files.problem_type_of(cells, ",") == want


def test_label_list_is_sorted_numbers_as_numbers():
  assert labeled_files.label_list(
      ["10", "2", "1"], problem_types.SINGLE_LABEL, ",") == ["1", "2", "10"]
  assert labeled_files.label_list(
      ["b, a", "c", ["d"], ""], problem_types.MULTI_LABEL, ",") == [
          "a", "b", "c", "d"]


def test_example_labels_checked_against_the_training_labels(tmp_path):
  row = labeled_files.Row(7, "x", None, "pos|new", "7")
  assert labeled_files.example_label(
      "dev.csv", row, problem_types.MULTI_LABEL, ["new", "pos"], "|") == (
          "pos", "new")
  with pytest.raises(cli.UserError, match=r"dev.csv:7: label 'old' is not "
                     r"one of the model's labels \(neg, pos\)\. Train with"):
    labeled_files.example_label(
        "dev.csv", row._replace(label="old"), problem_types.SINGLE_LABEL,
        ["neg", "pos"], ",")
  with pytest.raises(cli.UserError, match=r"dev.csv:7: label \"high\" is not "
                     r"a number\. A regression needs"):
    labeled_files.example_label(
        "dev.csv", row._replace(label="high"), problem_types.REGRESSION,
        [None], ",")
  assert labeled_files.example_label(
      "dev.csv", row._replace(label=" 2.5"), problem_types.REGRESSION,
      [None], ",") == "2.5"


def test_the_sample_tickets_are_multi_label_with_dev_texts_unseen():
  """sample_data/tickets/ as its README describes it."""
  root = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), "sample_data", "tickets")
  columns = labeled_files.Columns("text", None, "label", "id")
  rows = {name: labeled_files.read_rows(os.path.join(root, name + ".csv"),
                                        columns, labeled_files.AUTO)
          for name in ("train", "dev")}
  cells = [row.label for row in rows["train"]]
  assert labeled_files.problem_type_of(cells, ",") == (
      problem_types.MULTI_LABEL)
  assert labeled_files.label_list(cells, problem_types.MULTI_LABEL, ",") == [
      "account", "billing", "bug", "shipping"]
  assert [len(rows[name]) for name in ("train", "dev")] == [120, 40]
  assert [sum("," in row.label for row in rows[name])
          for name in ("train", "dev")] == [57, 14]
  assert not {r.text_a for r in rows["dev"]} & {r.text_a for r in rows["train"]}
