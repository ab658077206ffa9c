"""`sigint_deferred` holds a Ctrl-C until its block ends (the block runs whole, then KeyboardInterrupt); `sigint_ignored`
drops it. Both restore the handler they found and do nothing off the main thread."""

from __future__ import annotations

import signal
import threading
from contextlib import nullcontext

import pytest

from elmo_hf.storage.interrupts import sigint_deferred, sigint_ignored

pytestmark = pytest.mark.usefixtures("ctrl_c_as_from_a_terminal")


@pytest.mark.parametrize("nested", [False, True])
def test_a_ctrl_c_inside_a_deferred_block_is_raised_after_the_whole_block(nested):
    """Nested: a shard's record writes the manifest with write_atomically, which defers too; the inner block hands
    the held Ctrl-C to the outer one, which raises it when it ends."""
    ran_to_the_end = False
    with pytest.raises(KeyboardInterrupt):
        with sigint_deferred():
            with sigint_deferred() if nested else nullcontext():
                signal.raise_signal(signal.SIGINT)
            ran_to_the_end = True
    assert ran_to_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_deferred_block_without_a_ctrl_c_raises_nothing():
    with sigint_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_held_while_the_block_failed_is_raised_with_that_error_as_its_context():
    with pytest.raises(KeyboardInterrupt) as raised:
        with sigint_deferred():
            signal.raise_signal(signal.SIGINT)
            raise OSError("disk full")
    assert isinstance(raised.value.__context__, OSError)


def test_the_held_ctrl_c_goes_to_the_handler_that_was_in_place():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with sigint_deferred():
            signal.raise_signal(signal.SIGINT)
            assert seen == []
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_ctrl_c_is_dropped_and_the_handler_restored():
    with sigint_ignored():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_off_the_main_thread_both_leave_the_handler_alone():
    handlers = []

    def off_main() -> None:
        for block in (sigint_deferred, sigint_ignored):
            with block():
                handlers.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=off_main)
    thread.start()
    thread.join()
    assert handlers == [signal.default_int_handler] * 2
