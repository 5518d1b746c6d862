"""``zuke state init [--force]``: create a store's state now, or start afresh deliberately.

The GitHub branch store (``ZUKE_STATE=github://...``) makes its branch on the
first write and refuses to re-create one that was deleted (its runs and locks
went with it). ``zuke state init --force`` is the deliberate way to start
afresh; the store keeps fences above every earlier one. A store with nothing to
create says so. The store is duck-typed (``initialize(force=...)``): the CLI
imports no GitHub code.
"""

from __future__ import annotations

import click

from zuke.cli.click_base import HELP_SETTINGS, Group


@click.group("state", cls=Group, context_settings=HELP_SETTINGS)
def state_app() -> None:
    """Create the state store, or start it afresh."""


@state_app.command("init", context_settings=HELP_SETTINGS)
@click.option("--force", is_flag=True, help="start afresh over a deleted state branch")
def state_init(force: bool) -> None:
    """Create the state store now (the GitHub branch store: its branch and marker)."""
    inv = click.get_current_context().find_root().obj
    inv.reading = False  # it makes the store: a directory not there yet is fine
    store = inv.store()
    initialize = getattr(store, "initialize", None)
    if initialize is None:
        from zuke.state.naming import store_name

        inv.print(f"state: {store_name(store)} needs no init: it is made on first use")
        return
    inv.print(f"state: {initialize(force=force)}")
