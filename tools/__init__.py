"""Builders of the data sets that the experiments of docs/results.md use
(corpora, a cut vocabulary, stand-in NER and SWAG tasks, a SQuAD split);
run each from the project's root as `python -m tools.<name>`.

Started that way, Python puts the working folder (the root) first on its
module search path, so a builder imports the project's packages as the
project's commands do; the project is not installed.
"""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
