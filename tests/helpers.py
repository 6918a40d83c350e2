"""Driving the CLI in tests through ``main()``, so errors map to exit codes as for a user."""

import pytest
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


def priced_as_written(plan, phases, spec, profile):
    """``phases`` priced by the code as written (no recorded pricing replayed): what a
    replayed prediction must equal. Patch it in for ``workload.plan_priced``."""
    from rooflinesim.models import recorded

    return recorded.as_written(plan, recorded._inputs(phases), tuple(p.n for p in phases), spec, profile)


def replayed_and_as_written(predict, model, spec, profile, d, **kw):
    """(``predict(model, spec, profile, d, **kw)`` as the plan's recorded pricing gives it,
    the same priced as written): a replayed prediction must equal the second."""
    from rooflinesim.models import workload

    got = predict(model, spec, profile, d, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workload, "plan_priced", priced_as_written)
        want = predict(model, spec, profile, d, **kw)
    return got, want
