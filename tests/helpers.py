"""Driving the CLI in tests through ``main()``, so errors map to exit codes as for a user."""

from click.testing import CliRunner

from rooflinesim.cli.main import main


class _Main:
    """Adapter so CliRunner drives main() (which maps errors to exit codes)."""

    name = "rooflinesim"

    def main(self, args=None, prog_name=None, **kw):
        main(args)


def run_cli(args):
    """Run ``rooflinesim ARGS``; return (exit code, stdout, stderr)."""
    result = CliRunner().invoke(_Main(), args)
    return result.exit_code, result.stdout, result.stderr
