"""Shared pytest fixtures: paths to the real assets beside the checkout."""
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared", "assets")
MINILM_DIR = os.path.join(ASSETS_DIR, "models", "minilm-l6-h384-uncased")


@pytest.fixture(scope="session")
def assets_dir():
  """Root of ../shared/assets (read-only real data); fails loudly if absent."""
  if not os.path.isdir(ASSETS_DIR):
    pytest.fail("Expected the shared assets at %s (see README)." % ASSETS_DIR)
  return ASSETS_DIR


@pytest.fixture(scope="session")
def minilm_dir(assets_dir):
  """The real pretrained MiniLM model in Google's checkpoint layout."""
  return MINILM_DIR
