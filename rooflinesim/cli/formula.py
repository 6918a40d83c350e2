"""`rooflinesim formula ...`: print the cost formulas the predictions use."""

from __future__ import annotations

import click

from .common import Size, echo


@click.command()
@click.argument("family", type=click.Choice(["gemm", "attention", "moe", "allreduce"]))
@click.option("--latex", is_flag=True, help="Print LaTeX instead of plain text.")
@click.option("--crossover-gpu", default=None,
              help="gemm only: also solve for the tokens at which an n x k Linear layer "
                   "stops being memory-bound on this GPU (ideal roofline).")
@click.option("-n", type=Size(), default=4096, show_default=True,
              help="--crossover-gpu: output features of the Linear layer.")
@click.option("-k", type=Size(), default=4096, show_default=True,
              help="--crossover-gpu: input features of the Linear layer.")
@click.option("--dtype", default="bf16", show_default=True)
@click.option("--spec-file", "spec_files", multiple=True, type=click.Path(dir_okay=False),
              help="Extra GPU spec YAML file(s) to register (repeatable).")
def formula(family, latex, crossover_gpu, n, k, dtype, spec_files):
    """Formulas of a kernel family, as sympy derives them from the cost model."""
    import sympy as sp

    from .. import formulas

    fn = formulas.FAMILIES[family]
    exprs = fn(dtype) if family == "gemm" else fn()
    for name, e in exprs.items():
        click.echo(f"{name}: {sp.latex(e) if latex else sp.sstr(e)}")
    if crossover_gpu:
        from ..hardware import load_spec

        spec = load_spec(crossover_gpu, spec_files=tuple(spec_files))
        m = formulas.crossover_tokens(spec, n, k, dtype)
        echo(f"memory-bound below m = {m:.1f} tokens for a {n}x{k} {dtype} Linear on {spec.name}")
