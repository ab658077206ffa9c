"""What Ctrl-C (SIGINT) may cut: two blocks, for the main thread.

- ``sigint_deferred``: a Ctrl-C inside the block is raised when the block ends, so the block runs whole. A file that
  is ours comes into being in one such block with whatever removes it or lists it: a temporary file and the name its
  cleanup holds (``files.temporary_file_beside``, ``embed``'s shards given to workers), a shard moved into place and
  its manifest entry. Cut between the two, the file would stay with nothing to remove it or list it. The CLI's
  commands also import their libraries in one (``elmo_hf_cli.common.libraries_imported_whole``): a KeyboardInterrupt
  raised inside torch's or datasets' import came out as another error, or aborted the process.
- ``sigint_ignored``: a Ctrl-C inside the block is dropped; ``embed``'s worker pool starts its processes in it, so that
  a child inherits SIGINT ignored (the main process decides what Ctrl-C does to a run).

Python runs signal handlers on the main thread only, so on any other thread both are no-ops (a Ctrl-C is raised there
anyway, never on that thread).
"""

from __future__ import annotations

import signal
import threading


def _swap_sigint(handler):
    """Install ``handler`` for SIGINT and return the one it replaces, or ``None`` off the main thread (where Python
    cannot set one). A handler not set from Python (an embedding interpreter's) comes back as the default one."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler) or signal.SIG_DFL


class sigint_ignored:
    """SIGINT ignored inside the block (on the main thread; elsewhere a no-op), the previous handler restored after."""

    def __enter__(self) -> None:
        self.previous = _swap_sigint(signal.SIG_IGN)

    def __exit__(self, *exception) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


class sigint_deferred:
    """A SIGINT that arrives inside the block is held and sent again once the block ends, to the handler that was in
    place before it: ``KeyboardInterrupt`` is raised just after the block (with the block's own error, if it raised
    one, as its context), or whatever that handler does."""

    def __enter__(self) -> None:
        self.arrived = False
        self.previous = _swap_sigint(self._hold)

    def _hold(self, signum, frame) -> None:
        self.arrived = True

    def __exit__(self, *exception) -> None:
        if self.previous is None:
            return
        signal.signal(signal.SIGINT, self.previous)
        if self.arrived:
            signal.raise_signal(signal.SIGINT)  # the previous handler runs now, on this thread


__all__ = ["sigint_deferred", "sigint_ignored"]
