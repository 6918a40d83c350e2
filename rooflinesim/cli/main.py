"""Entry point: the click group, and the one place where user errors become one sentence
on stderr and exit code 2."""

from __future__ import annotations

import os
import sys

# The CLI uses no pydantic plugins; looking them up scans every installed package's
# metadata, a noticeable share of a cold start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import click  # noqa: E402

from .. import __version__  # noqa: E402
from ..errors import UserError  # noqa: E402
from .predict import predict  # noqa: E402
from .specs import specs  # noqa: E402


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rooflinesim")
def cli():
    """rooflinesim: roofline and calibrated performance models of LLM inference kernels."""


cli.add_command(specs)
cli.add_command(predict)


def _register_lazy():
    from .fit import fit
    from .model import register
    from .roofline import roofline
    from .formula import formula
    from .serve import serve
    from .plan import plan
    from .measure import calibrate, harness, validate

    cli.add_command(formula)
    cli.add_command(harness)
    cli.add_command(calibrate)
    cli.add_command(validate)
    cli.add_command(fit)
    register(predict)
    cli.add_command(roofline)
    cli.add_command(serve)
    cli.add_command(plan)


_register_lazy()


def _one_line(message) -> str:
    """A message as one line: characters that are not printable (a newline or a carriage
    return in a user's argument, say) are shown escaped."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def main(argv=None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="rooflinesim", standalone_mode=False)
    except UserError as e:
        click.echo(f"error: {_one_line(e)}", err=True)
        sys.exit(2)
    except click.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare group prints help
            click.echo(e.ctx.get_help())
            sys.exit(0)
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code if e.exit_code != 1 else 2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
