"""Reductions and selections: SUM, REDUCE_MAX/MIN/PROD, ARG_MAX/ARG_MIN, TOPK_V2, CUMSUM —
as TFLite's reference kernels.
"""

from __future__ import annotations
