"""Control flow with subgraphs (WHILE, IF, CALL_ONCE) and the resource-variable operators —
as LiteRT runs them.
"""

from __future__ import annotations
