"""``python -m nbkit``: the ``nbkit`` command (``nbkit.runner.main``)."""
import sys

from nbkit.runner import main

if __name__ == "__main__":
    sys.exit(main())
