"""The Estimator-style runner and what a training script runs with: the
shared flag definitions and their values, run start-up, the distribution
strategy, memory settings and the memory model, the out-of-memory advice,
input pipelines, the serving input and the training graph's shared steps.
"""
