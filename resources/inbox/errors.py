"""The errors of reaching the inbox, whichever its dialect (a refused callback's: callbacks.py)."""


class InboxMissing(FileNotFoundError):
    """The inbox file (or the database's inbox tables) is not there: only the receiver
    creates it."""


class InboxUnavailable(ConnectionError):
    """The inbox's database does not answer (down, unreachable, refusing us): a later try
    may succeed. The message names it without its password."""
