"""Index and layout operators: slicing, splitting, gathering and scattering, depth/space
rearrangements, padding by mirror, broadcasting and filling — as TFLite's reference kernels.
"""

from __future__ import annotations
