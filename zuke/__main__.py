"""``python -m zuke`` is the ``zuke`` command."""

from zuke.cli import entrypoint

entrypoint()
