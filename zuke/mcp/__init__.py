"""``zuke mcp``: the build in the working directory served over the Model Context Protocol.

:mod:`zuke.mcp.tools` is the work of each tool (plain functions over the library, no SDK)
over :mod:`zuke.mcp._calls` (what every call shares: refusals, secrets, the audit) and
:mod:`zuke.mcp.results` (the JSON returned); :mod:`zuke.mcp.audit` appends each call that
concerns a run to that run's audit trail; :mod:`zuke.mcp.server` binds the tools to the
official ``mcp`` SDK on stdio. Importing this package loads none of them, and only
:mod:`zuke.mcp.server` imports the SDK (an optional extra, ``zuke[mcp]``).
"""
