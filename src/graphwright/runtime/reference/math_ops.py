"""Element-wise math beyond the basic arithmetic: unary functions (EXP, LOG, SQRT, RSQRT, SQUARE, ABS,
NEG, SIN, COS, FLOOR, CEIL, ROUND, SIGN), binary ones (DIV, FLOOR_DIV, FLOOR_MOD, POW, MAXIMUM, MINIMUM,
SQUARED_DIFFERENCE), comparisons, LOGICAL_*, SELECT/SELECT_V2, CAST and the parametric activations
(PRELU, LEAKY_RELU, ELU, GELU) — float and integer, as TFLite's reference kernels.
"""

from __future__ import annotations
