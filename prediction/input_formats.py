"""predictor.py's --input_format values, in plain Python, so that its --help
can list them before TensorFlow loads."""

LINES, CSV, TSV = "lines", "csv", "tsv"
# extract_features.py's lines: "text_a" or "text_a ||| text_b".
FEATURE_LINES = "feature_lines"
# auto: a table by the extension (TABLE_EXTENSIONS), else lines, each JSON
# when it starts with "{"; text and json: lines of one kind; csv, tsv.
INPUT_FORMATS = ("auto", "text", "json", CSV, TSV)
TABLE_EXTENSIONS = {".csv": CSV, ".tsv": TSV, ".tab": TSV}
