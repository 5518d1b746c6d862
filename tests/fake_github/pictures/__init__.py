"""The pictures of ``docs/github.md``: what a maintainer sees in GitHub's UI after a release.

``python -m tests.fake_github.pictures docs/img`` drives a real release through real ``zuke``
processes against the fake GitHub (``story.py``), reads the fake's state — deployments, their
statuses, issues and comments — and renders it as GitHub lays out its pages (``pages.py``, with
the templates and CSS beside it), then screenshots each page with Debian's Chromium
(``shots.py``). Everything on a page that came from the fake is escaped: it is untrusted text.
"""
