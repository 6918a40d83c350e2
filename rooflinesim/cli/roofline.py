"""`rooflinesim roofline`: the roofline chart of a model on one or more GPUs."""

from __future__ import annotations

import click

from .common import MAX_COUNT, MAX_SIZE, POS, Size, echo, load_gpu, load_profile, weights_of


@click.command()
@click.option("--model", "model_name", required=True, help="Preset name, HF id, or a config.json path.")
@click.option("--gpu", "gpus", multiple=True, default=("h100",), show_default=True,
              help="GPU name (repeat to overlay several GPUs).")
@click.option("--spec-file", "spec_files", multiple=True, type=click.Path(dir_okay=False),
              help="Extra GPU spec YAML file(s) to register (repeatable).")
@click.option("--profile", default=None, help="Calibration profile (default: each GPU's own).")
@click.option("--tp", type=Size(max=MAX_COUNT), default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--batch", type=POS, default=8, show_default=True, help="Concurrent sequences.")
@click.option("--prompt", type=POS, default=2048, show_default=True, help="Prompt tokens (prefill).")
@click.option("--context", type=POS, default=4096, show_default=True,
              help="Context reached in decode (prompt + generated tokens).")
@click.option("--weights", default=None,
              help="Weight dtype (default: what the config's quantization_config stores, else bf16).")
@click.option("--kv-dtype", "--kv", "kv_dtype", default=None,
              help="KV-cache dtype: bf16, fp16 or fp8 (default: the activations').")
@click.option("--attention", type=click.Choice(["fa3", "fa2", "naive"]), default=None,
              help="Attention kernel class (default: each GPU's own).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm", "hf"]), default="vllm", show_default=True,
              help="Whose kernels: an engine's fused ones, or hf: Hugging Face transformers' eager forward "
                   "(its static cache, as predict model --engine hf).")
@click.option("--measured", "measured", multiple=True, type=click.Path(dir_okay=False),
              help="Harness measurements (JSON Lines) to overlay.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="HTML file to write (self-contained, opens offline).")
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help='Also write a PNG (needs kaleido, which pip install "rooflinesim[png]" adds, '
                   'and a Chrome or Chromium browser).')
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
def roofline(model_name, gpus, spec_files, profile, tp, batch, prompt, context, weights, kv_dtype,
             attention, engine, measured, output, png, force):
    """Draw every op of prefill and decode against the GPU's ceilings."""
    from ..charts import check_png, roofline_figure, write_html, write_png
    from ..errors import UserError
    from ..files import output_path
    from ..models.config import load_config
    from ..models.deploy import Deployment
    from ..models.workload import predict_model

    output_path(output, "HTML", force)
    if png is not None:
        output_path(png, "PNG", force)
    if context <= prompt:
        raise UserError(f"--context ({context}) must exceed --prompt ({prompt})")
    if batch * context > MAX_SIZE:
        raise UserError(f"--batch {batch} x --context {context} = {batch * context:.3g} tokens exceeds "
                        f"2^40 ({MAX_SIZE:.3g}); give smaller sizes")
    if png:
        check_png()
    cfg = load_config(model_name)
    weights = weights_of(cfg, weights)
    d = Deployment(tp=tp, weights=weights, kv_cache=kv_dtype and kv_dtype.lower(), attention=attention,
                   kernels="hf" if engine == "hf" else "engine")
    pairs, preds = [], []
    for gpu in gpus:
        spec = load_gpu(gpu, spec_files)
        prof = load_profile(spec, profile)
        pairs.append((spec, prof))
        preds.append(predict_model(cfg, spec, prof, d, batch=batch, prompt=prompt, gen=context - prompt))
    records = []
    if measured:
        from ..calibration.records import load

        meas = load(measured)
        records = meas.records
        if not records:
            raise UserError(f"--measured {', '.join(measured)}: no successful measurement to overlay")
    fig = roofline_figure(pairs, preds, records,
                          title=f"{cfg.name}, TP {tp}, batch {batch}: prefill {prompt} tokens, "
                                f"decode to {context} ({weights} weights"
                                f"{'; transformers, static cache' if engine == 'hf' else ''})")
    if png:  # first: a PNG that cannot be written leaves no HTML behind
        write_png(fig, png)
    write_html(fig, output)
    echo(f"wrote {output}")
    if png:
        echo(f"wrote {png}")
    for w in meas.warnings if measured else ():
        click.echo(f"warning: {w}", err=True)