"""The Estimator-style runner that replaces tf.estimator: the session loop
that trains, evaluates, predicts and exports a model_fn, and what its
graphs share (the distribution strategy, TFRecord input and feature files,
the serving input, the training graph's common steps)."""
