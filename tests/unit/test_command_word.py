"""A command builds only its own parser (issue 34: the whole tree is ~190 options, ~5 ms of
every start). What it parses must be exactly what the whole tree parses."""

from __future__ import annotations

import argparse

import pytest

from swarm_tui.cli.main import PARSERS, build_parser, command_word

SAME = [
    ["runs"],
    ["runs", "--limit", "3", "--json"],
    ["--db", "runs", "runs"],  # an option's value that is a command's word
    ["--db=x.db", "report", "last", "--json"],
    ["--config", "c.toml", "--db", "y.db", "keys", "list"],
    ["--theme", "nord", "watch", "last"],
    ["canary", "status"],
    ["-r", "0.5", "replay", "last", "--at", "+2m"],
    ["export", "last", "--format", "csv", "--out", "x.csv"],
    ["sim", "--port", "0"],
    ["cost", "last"],
    ["db", "init"],
]


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict | str:
    try:
        return vars(parser.parse_args(argv))
    except SystemExit as e:
        return f"exit {e.code}"


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_one_commands_parser_reads_what_the_whole_tree_reads(argv):
    word = command_word(argv)
    assert word in PARSERS
    whole = parse(build_parser(), argv)
    assert isinstance(whole, dict), whole
    assert parse(build_parser(word), argv) == whole


@pytest.mark.parametrize("argv", [["--bogus", "runs"], ["runs", "--bogus"],
                                  ["report"], ["runs", "--limit", "0"]], ids=" ".join)
def test_a_mistake_after_a_command_word_is_refused_alike(argv, capsys):
    assert parse(build_parser(command_word(argv)), argv) == "exit 2"
    one = capsys.readouterr().err.splitlines()[-1]
    assert parse(build_parser(), argv) == "exit 2"
    assert capsys.readouterr().err.splitlines()[-1] == one


@pytest.mark.parametrize("argv", [[], ["-h"], ["-h", "runs"], ["--db", "x", "--help", "runs"],
                                  ["rnus"], ["--db"], ["--version"]])
def test_help_a_mistake_or_no_command_builds_the_whole_tree(argv):
    """`swarm-tui -h` lists every command; argparse's error for a typo names them all."""
    assert command_word(argv) is None


def test_the_top_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        build_parser(command_word(["--help"])).parse_args(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in PARSERS)
