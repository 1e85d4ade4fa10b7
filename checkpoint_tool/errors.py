"""The one exception type users can cause, and its exit codes.

Every error a user can trigger (bad input, unsupported config, disk full) is a ``CkptError``
whose message names the file, the tensor and what to do. The CLI prints it on one line and
exits with ``exit_code``; no traceback.

Example::

    raise InputError("model-00001.safetensors: tensor 'x.weight': header offsets [0, 96) "
                     "overlap the previous tensor; the shard is corrupt, re-download it")
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # a report found errors (inspect / validate / verify)
EXIT_USAGE = 2  # bad input, bad usage, unreadable source


class CkptError(Exception):
    """A user-caused error with a one-line message and an exit code."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InputError(CkptError):
    """The source checkpoint (files, headers, config) is malformed or unsupported."""


class UsageError(CkptError):
    """Options or arguments that cannot work together."""


class AlignmentError(CkptError):
    """A slice or pad of a quantized tensor that would break packing or scale groups."""


class OutputError(CkptError):
    """The destination cannot be written (exists, disk full, permission)."""


def first_few(names: list[str], show: int = 5) -> str:
    """A list of names for a one-line message: ``"a, b, c, d, e (and 7 more)"``."""
    more = f" (and {len(names) - show} more)" if len(names) > show else ""
    return f"{', '.join(names[:show])}{more}"
