"""`tessera generate`: run a compiled decoder with a key/value cache as a generation loop on
a prompt of token ids."""

from __future__ import annotations

import click

from tessera.cli._app import EXIT_INTERRUPTED, cli
from tessera.errors import InputError


@cli.command("generate")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--prompt-ids", "prompt", required=True, metavar="ID,ID,...",
              help="The prompt's token ids, comma-separated, e.g. 1,2,3.")
@click.option("--max-new-tokens", type=int, default=16, show_default=True, metavar="N",
              help="How many tokens to generate at most.")
@click.option("--sample", is_flag=True,
              help="Sample the tokens (with --temperature, --top-k, --top-p, --seed) instead "
                   "of taking the most likely one.")
@click.option("--temperature", type=float, default=1.0, show_default=True, metavar="T",
              help="With --sample: the logits are divided by T first.")
@click.option("--top-k", type=int, metavar="K",
              help="With --sample: draw only from the K most likely tokens.")
@click.option("--top-p", type=float, metavar="P",
              help="With --sample: draw only from the smallest set of tokens whose "
                   "probability reaches P (nucleus sampling).")
@click.option("--seed", type=int, metavar="S",
              help="With --sample: the seed of the draws; the same seed gives the same tokens.")
@click.option("--eos-token-id", type=int, metavar="ID",
              help="Stop once the model gives this token.")
@click.option("--allow-fallback", is_flag=True,
              help="Re-place partitions whose backend is missing or changed version.")
@click.pass_context
def generate_command(ctx: click.Context, artifact: str, prompt: str, max_new_tokens: int,
                     sample: bool, temperature: float, top_k: int | None,
                     top_p: float | None, seed: int | None, eos_token_id: int | None,
                     allow_fallback: bool) -> None:
    """Load ARTIFACT, a compiled decoder with a key/value cache (inputs input_ids,
    attention_mask, position_ids, past_key_values.N.key|value; outputs logits,
    present.N.key|value), and generate after the prompt: greedy, or sampled with --sample.
    Prints the new token ids on one line, then the time of the prefill and of the decode
    steps."""
    import warnings

    from tessera.runtime import load

    ids = prompt_ids(prompt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = load(artifact, allow_fallback=allow_fallback)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    result = compiled.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k,
                               top_p=top_p, do_sample=sample, seed=seed,
                               eos_token_id=eos_token_id)
    click.echo(",".join(str(int(t)) for t in result.generated[0]))
    steps = max(result.new_tokens - 1, 0)
    per_token = f" ({result.decode_seconds / steps * 1e3:.3f} ms per token)" if steps else ""
    click.echo(f"{result.new_tokens} new token(s), stopped by {result.stopped}: prefill of "
               f"{len(ids)} token(s) {result.prefill_seconds * 1e3:.3f} ms, {steps} decode "
               f"step(s) {result.decode_seconds * 1e3:.3f} ms{per_token}")
    if result.stopped == "interrupted":
        click.echo(f"interrupted after {result.new_tokens} new token(s)", err=True)
        ctx.exit(EXIT_INTERRUPTED)


def prompt_ids(text: str) -> list[int]:
    """'1,2,3' as token ids; an InputError names what is not one."""
    ids: list[int] = []
    if not text.strip():
        return ids  # generate names the empty prompt
    for item in (p.strip() for p in text.split(",")):
        try:
            ids.append(int(item))
        except ValueError:
            raise InputError(f"--prompt-ids expects comma-separated token ids such as 1,2,3, "
                             f"got {item!r} in {text!r}") from None
    return ids
