"""The Estimator-style runner and what a training script runs with: run
start-up from the flags, the shared flag definitions, memory settings
and the memory model, input pipelines, the serving input and the
training graph's shared steps.
"""
