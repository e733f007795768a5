from click.testing import CliRunner

import prepkit
from prepkit.cli import _register, cli


def test_version_and_help() -> None:
    _register()
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert prepkit.__version__ in result.output
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("shard", "convert", "inspect", "verify", "bench-decode", "warmup"):
        assert command in result.output
