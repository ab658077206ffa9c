"""The progress bar of reading a corpus (counting the vocabulary, building the windowed stream): sentences read, of
how many when known, and the words read so far; on a terminal only (tqdm's ``disable=None``), never when the caller
says ``enabled=False`` (``--no-progress``)."""

from __future__ import annotations

# Rows between two updates of the bar: tqdm's own update costs about a microsecond, a sentence a few.
_UPDATE_EVERY_ROWS = 1000
REFRESH_SECONDS = 0.5


class CorpusProgress:
    """A tqdm bar over a corpus's rows with the words read as its postfix; a context manager (closes the bar)."""

    def __init__(self, description: str, total: int | None, enabled: bool = True):
        from tqdm.auto import tqdm

        self.words = 0
        self._pending_rows = 0
        self._bar = tqdm(
            total=total, desc=description, unit=" sentences", disable=None if enabled else True, dynamic_ncols=True,
            mininterval=REFRESH_SECONDS,
        )

    def update(self, rows: int, words: int) -> None:
        """``rows`` more rows read, holding ``words`` words."""
        self.words += words
        self._pending_rows += rows
        if self._pending_rows >= _UPDATE_EVERY_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending_rows:
            self._bar.set_postfix_str(f"{self.words:,} words", refresh=False)
            self._bar.update(self._pending_rows)
            self._pending_rows = 0

    def close(self) -> None:
        self._flush()
        self._bar.close()

    def __enter__(self) -> "CorpusProgress":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["CorpusProgress"]
