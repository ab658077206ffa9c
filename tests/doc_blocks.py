"""The fenced code blocks of a Markdown file, with the HTML comments written just above each (its markers).

One reader for everything that runs documentation: `.ci/run` takes the README's quick-start blocks from it
(``python tests/doc_blocks.py README.md quickstart-main`` prints that block), the fresh-clone test runs the same two
blocks, and the documentation test runs every block. Standard library only: `.ci/run` calls it before anything is
installed.

A block's markers are the comments on the lines directly above its opening fence, e.g.::

    <!-- quickstart-main -->
    ```bash
    ...
    ```
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(?P<language>[\w+-]*)\s*$")
COMMENT = re.compile(r"^<!--\s*(?P<text>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class CodeBlock:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str  # "" for a fence without one
    code: str
    markers: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """Every fenced block of ``path`` in file order; an unclosed fence is an error naming its line."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        markers, above = [], index - 1
        while above >= 0 and (comment := COMMENT.match(lines[above])):
            markers.insert(0, comment["text"])
            above -= 1
        end = next((row for row in range(index + 1, len(lines)) if lines[row].rstrip() == "```"), None)
        if end is None:
            raise ValueError(f"{path}:{index + 1}: code block is never closed (expected a line ```)")
        code = "\n".join(lines[index + 1 : end]) + "\n"
        blocks.append(CodeBlock(Path(path), index + 1, opening["language"], code, tuple(markers)))
        index = end + 1
    return blocks


def marked_block(path: Path, marker: str) -> CodeBlock:
    """The one block of ``path`` marked ``<!-- marker -->``; an error naming the file if there is none or several."""
    found = [block for block in code_blocks(path) if marker in block.markers]
    if len(found) != 1:
        raise ValueError(f"{path}: expected one code block marked <!-- {marker} -->, found {len(found)}")
    return found[0]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/doc_blocks.py FILE.md MARKER   (prints the block marked <!-- MARKER -->)")
    try:
        sys.stdout.write(marked_block(Path(sys.argv[1]), sys.argv[2]).code)
    except (OSError, ValueError) as error:
        sys.exit(str(error))
