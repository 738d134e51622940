"""``python -m nbkit``: the ``nbkit`` command (``nbkit.cli.main.main``)."""

import sys

from nbkit import gcfreeze

with gcfreeze.importing():
    from nbkit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
