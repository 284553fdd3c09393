"""Predicting with an exported model from Python: the models predictor.py
loads and the input lines it reads."""
