"""``python -m rooflinesim``: the command line, as the ``rooflinesim`` script runs it."""

from rooflinesim.cli.main import main

if __name__ == "__main__":
    main()
