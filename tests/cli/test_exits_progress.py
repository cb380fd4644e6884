"""The GPU runs' progress lines follow sys.stderr as it is when each line is written."""

import io
import logging
import sys

from xstage.cli.exits import show_hw_progress
from xstage.hw.common.log import hw_log


def test_progress_goes_to_the_current_stderr(monkeypatch):
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    show_hw_progress()
    hw_log("one")
    monkeypatch.setattr(sys, "stderr", second)
    show_hw_progress()
    hw_log("two", 2)
    assert first.getvalue() == "one\n" and second.getvalue() == "two 2\n"
    show_hw_progress(quiet=True)
    hw_log("hidden")
    assert second.getvalue() == "two 2\n"
    assert sum(getattr(h, "_xstage", False) for h in logging.getLogger("xstage.hw").handlers) == 1
    show_hw_progress()  # leave the logger as the commands leave it
