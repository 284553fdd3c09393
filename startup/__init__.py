"""Run set-up: the flags the training scripts share, the checks that cost
nothing, the precision the hardware runs, and the RunSetup a training
script runs with."""
