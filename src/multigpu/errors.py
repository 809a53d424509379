"""User-facing errors: raised for bad input, printed as one line by the entry points."""


class UserError(Exception):
    """A mistake in a config value, a path or a file that the user can fix.

    The message names the offending value and the fix; entry points print it as one line
    and exit non-zero instead of showing a traceback.
    """
