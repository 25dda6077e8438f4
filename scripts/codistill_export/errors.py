"""The one exception the exporter raises for bad input: the command line prints its
message on one line and exits 1."""


class ExportError(Exception):
    pass
