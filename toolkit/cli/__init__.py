"""The `toolkit` command: one typer app, one module per subcommand, one error table."""
from toolkit.cli.app import app, main  # noqa: F401
