"""run_squad.py's defaults of its window flags, for an export whose
run_info.json does not record the values it was trained with. Plain Python,
so that predictor.py's --help can show them before TensorFlow loads."""

WINDOW_DEFAULTS = {"doc_stride": 128, "max_query_length": 64}
