"""The `toolkit` command: one typer app, one module per subcommand, one error table."""
import os as _os

# The command runs its own threads (toolkit's C pool, -t/--threads); numpy's BLAS threads
# would only spin beside them after a numpy call.  Set before numpy is first imported;
# an explicit setting in the environment wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

# Help (`-h`) is laid out by rich at the terminal's width: that of stdout, else of stdin or
# stderr (`toolkit run -h | less`), else COLUMNS, else 80 columns.

from toolkit.cli.app import app, main  # noqa: E402,F401
