"""AMP-MLIR's Python package.

``amp_mlir.examples`` (the example models), ``amp_mlir.train`` (compile and
run training programs), ``amp_mlir.torch_bridge`` (train a PyTorch module:
``fit``), ``amp_mlir.iree_train`` (train a step lowered to linalg with
IREE), ``amp_mlir.runtime`` (ctypes bindings to libamprt), and
``amp_mlir.demo``.
"""
