"""``python -m rdq``: the ``rdq`` command, for an environment whose scripts are not on PATH."""

from rdq.cli import main

main()
