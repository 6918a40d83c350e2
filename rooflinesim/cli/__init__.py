"""The ``rooflinesim`` command line: thin click commands over the Python API."""
