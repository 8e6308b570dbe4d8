"""The pattern language: find sub-graphs by shape and replace them safely.

Two forms build the same pattern objects:

* Python (the daily one)::

      P("Mul", P("Conv2D|MatMul", ANY, CONST(name="w"), name="conv"), CONST(name="s"))

* the Graph Transform Tool's OpTypePattern string::

      parse_pattern('{"Mul", {{"Conv2D|MatMul", {{"*"}, {"Const"}}}, {"Const"}}}')

Matching walks from a root node back through producers (never consumers),
and rule sets are indexed by root op, so a sweep is O(nodes).
:func:`replace_matching` applies the GTT ``ReplaceMatchingOpTypes`` contract
(non-overlapping matches, refusal of replacements that would orphan a value).
See ``docs/patterns.md`` for a worked example.
"""

from ._build import Replacement, Skip, clone_node, make_constant
from .matcher import Match, Matcher, MatchStats, as_pattern, find_matches, match_pattern
from .parse import PatternParseError, format_pattern, parse_pattern
from .pattern import ANY, CONST, OMITTED, Const, Omitted, OneOf, P, Pattern, Wildcard
from .predicates import (
    compatible_dtype,
    fusable_chain,
    is_constant,
    no_control_edges,
    not_graph_io,
    read_only_by,
    same_dtype,
    same_graph,
    single_use,
    weight_not_shared,
    why_not_absorbed,
    why_not_bypassable,
    why_not_closed,
    why_not_editable,
    why_not_fusable,
)
from .replace import Outcome, ReplaceReport, Rule, RuleSet, drop_if_unread, replace_matching

__all__ = [
    # patterns
    "Pattern", "P", "Wildcard", "Const", "Omitted", "OneOf", "ANY", "CONST", "OMITTED",
    "parse_pattern", "format_pattern", "PatternParseError", "as_pattern",
    # matching
    "Match", "Matcher", "MatchStats", "match_pattern", "find_matches",
    # replacing
    "replace_matching", "Replacement", "Skip", "Rule", "RuleSet", "ReplaceReport", "Outcome",
    "clone_node", "make_constant", "drop_if_unread",
    # predicates (the safety checks every rule uses; see predicates.py)
    "single_use", "no_control_edges", "not_graph_io", "same_dtype", "compatible_dtype", "is_constant",
    "weight_not_shared", "read_only_by", "same_graph", "fusable_chain", "why_not_fusable", "why_not_closed",
    "why_not_absorbed", "why_not_bypassable", "why_not_editable",
]
