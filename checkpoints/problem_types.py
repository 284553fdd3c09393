# coding=utf-8
"""The kinds of problem a classifier's head solves: their names as
--problem_type and run_info.json spell them, and Hugging Face's names of
the same (its config's "problem_type").

Kept apart from the modules that load TensorFlow, so that commands answer
--help without loading it.
"""

SINGLE_LABEL, MULTI_LABEL, REGRESSION = ("single_label", "multi_label",
                                         "regression")
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
HF_NAMES = {SINGLE_LABEL: "single_label_classification",
            MULTI_LABEL: "multi_label_classification",
            REGRESSION: "regression"}
