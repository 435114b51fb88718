"""``python -m rbdata``: the ``rbdata`` command line."""

from rbdata.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
