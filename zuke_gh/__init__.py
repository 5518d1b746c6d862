"""GitHub integration for zuke: the REST client, the ``github_workflow`` trigger,
App tokens and the branch-backed state store arrive with their own steps.

This package depends on :mod:`zuke`; :mod:`zuke` never imports it.
"""

__all__: list[str] = []
