"""Shared infrastructure: per-graph state, checkpoint tracking, argument checks.

The bottom layer: every other part of the library may import these modules,
and they import nothing of the library (see the layering rule in
`docs/architecture.md`).
"""
