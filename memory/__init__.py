"""Memory planning: what a training step keeps in memory, the micro-batch,
accumulation, checkpointing and precision that fit a device, and the advice
an out-of-memory failure ends with."""
