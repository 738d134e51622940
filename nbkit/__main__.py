"""``python -m nbkit``: the ``nbkit`` command (``nbkit.cli.main.main``)."""

import sys

from nbkit.runtime import gcfreeze

if __name__ == "__main__":
    gcfreeze.suspend()  # no automatic collection while the command line's modules load

from nbkit.cli.main import main

if __name__ == "__main__":
    gcfreeze.resume()
    sys.exit(main())
