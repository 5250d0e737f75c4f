"""AMP-MLIR's Python package.

For now: the example models (``amp_mlir.examples``). The bindings to the
compiler and the runtime join it as they are built.
"""
