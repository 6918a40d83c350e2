"""Errors a user can cause. The CLI prints their message as one sentence and exits 2."""


class UserError(ValueError):
    """Bad input from a user: a CLI argument, a spec file, a measurement file, a config."""


class Unpredictable(Exception):
    """A measurement record the models cannot predict (validation and the fit skip it, and
    count why); the message says why."""


class UnknownName(UserError):
    """A name (GPU, dtype, op, model) that is not registered."""


def did_you_mean(name: str, choices, kind: str) -> UnknownName:
    """Build an UnknownName error with the closest registered names as a hint."""
    import difflib

    choices = sorted(set(choices))
    close = difflib.get_close_matches(name.lower(), choices, n=3, cutoff=0.5)
    if not close:
        close = [c for c in choices if c.startswith(name.lower()[:2])][:3]
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(choices)}"
    return UnknownName(f"unknown {kind} '{name}'{hint}")
