"""Fused sequence operators (UNIDIRECTIONAL_SEQUENCE_LSTM and the other recurrent ops the converter
emits) — as TFLite's reference kernels.
"""

from __future__ import annotations
