"""What the machine offers, read without TensorFlow: the CPU's feature flags
and the kernel settings they call for (hardware/cpu.py). The lowest
package: it imports nothing of the project, so it can decide before
TensorFlow loads.
"""
