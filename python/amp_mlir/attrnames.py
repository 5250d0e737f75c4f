"""The names of the AMP dialect's attributes that the Python side reads: the
same as mlir::amp::attrname (include/amp/Dialect/AMP/IR/AMPDialect.h, where
they are declared; scripts/check-declared-once.py, a ctest, keeps the two
equal)."""

PARAM = "amp.param"
OPT_STATE = "amp.opt_state"
INPUT = "amp.input"
ARG = "amp.arg"
OUTPUT = "amp.output"
UPDATES = "amp.updates"
