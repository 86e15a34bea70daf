"""The fast tier (`pytest tests/unit`, seconds while editing): no child process, no
network socket, no database server — a test here that reaches for one fails at once and
belongs in tests/functional/. (Textual pilots and SQLite files are in-process: allowed.)"""

from __future__ import annotations

import socket
import subprocess

import pytest


class NotAUnitTest(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _stay_in_process(monkeypatch):
    def refuse(what: str):
        def _refused(*_args, **_kwargs):
            raise NotAUnitTest(f"a unit test started {what}: move it to tests/functional/")
        return _refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("a child process"))
    monkeypatch.setattr(socket.socket, "connect", refuse("a network connection"))
    monkeypatch.setattr(socket.socket, "bind", refuse("a listening socket"))
