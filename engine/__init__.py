"""What Google's modules call behind small named calls: hand-written
backward passes, compiled kernels, dropout masks, padding layouts, the
training step around the optimizer (gradients, loss scaling, accumulation,
replicas), graph bookkeeping and ordering, the process's heap, BERT config
checks and the few private TensorFlow internals.
"""
