"""The one exception type users see: the CLI prints its message on one line and exits with code 2."""


class PtmlabError(Exception):
    """A problem with the user's input; the message names the bad value and the fix."""


def did_you_mean(value: str, choices) -> str:
    """A short suggestion for a misspelled name, or a list of valid names."""
    import difflib

    choices = sorted(choices)
    close = difflib.get_close_matches(value, choices, n=1)
    if close:
        return f"did you mean '{close[0]}'? (choose from: {', '.join(choices)})"
    return f"choose from: {', '.join(choices)}"
