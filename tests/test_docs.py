"""README.md and docs/*.md, executed: every ```python and ```bash block runs.

The rules a documentation author writes by:

- The blocks of one document run in order, in one fresh temporary folder,
  which is the current folder of every block. ```python blocks share one
  namespace (run in this interpreter); ```bash blocks run with
  ``bash -euo pipefail``. ``leveret``, ``python`` and ``python3`` on a bash
  block's PATH are this interpreter with the leveret under test, so the
  documents run against the checkout being tested, in the environment that
  installed it (the README's install commands are not run again).
- A block whose first line is ``# not run in CI: <reason>`` is shown, not run
  (the test is skipped with the reason). With the reason ``needs an NVIDIA
  GPU`` it is a ``gpu`` test instead: ``pytest -m gpu`` runs it on a GPU
  machine, after the document's earlier blocks.
- A ```text block right after the line ``<!-- output -->`` is the output of
  the code block before it (stdout; for bash stdout and stderr together) and
  is compared with it: lines are compared without trailing spaces, and
  ``...`` matches any text, across lines too (doctest's ELLIPSIS). A text
  block without that line is illustrative and not compared.
- Any other block (```toml, ```yaml, ...) whose first line is
  ``# file: NAME`` is written to NAME in the document's folder when reached,
  so that a config file shown to the reader is the one the commands use.

- An image link ``![...](img/PATH)`` in a document, where the document's
  blocks wrote ``PATH`` in its folder (``--montage sweep.png`` and
  ``![...](img/sweep.png)``), is compared with ``docs/img/PATH``: the pictures
  in the docs are the ones the commands make. ``LEVERET_UPDATE_DOC_IMAGES=1
  pytest tests/test_docs.py`` copies the new pictures into ``docs/img/``.

Each code block is one test, named after its document and first line
(``test_doc_block[guide.md:120-bash]``); a block after a failed one of the
same document is skipped.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import leveret
from leveret.backends import cuda_available

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [p for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if p.is_file()]
NOT_RUN = re.compile(r"#\s*not run in CI:\s*(.*)")
GPU_REASON = "needs an NVIDIA GPU"
OUTPUT_MARK = "<!-- output -->"
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")


@dataclass
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    expected: str | None = None  # the <!-- output --> text block after it

    @property
    def first_line(self) -> str:
        return self.source.split("\n", 1)[0].strip()

    @property
    def not_run_reason(self) -> str | None:
        m = NOT_RUN.fullmatch(self.first_line)
        return m.group(1).strip() if m else None

    @property
    def is_gpu(self) -> bool:
        return self.not_run_reason == GPU_REASON

    @property
    def file_name(self) -> str | None:
        m = re.fullmatch(r"#\s*file:\s*(\S+)", self.first_line)
        return m.group(1) if m and self.language not in ("python", "bash") else None

    @property
    def id(self) -> str:
        return f"{self.document.name}:{self.line}-{self.language}"


def parse_blocks(document: Path) -> list[Block]:
    """The fenced blocks of a Markdown file that the tests act on, in order."""
    lines = document.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    last_code: Block | None = None
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        indent, language = len(m.group(1)), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        # a block inside a list item is indented like its fence: remove that much
        body = "\n".join(line[indent:] if not line[:indent].strip() else line for line in lines[i + 1 : j])
        previous = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        block = Block(document, i + 1, language, body + "\n")
        if language in ("python", "bash"):
            blocks.append(block)
            last_code = block
        elif language == "text" and previous == OUTPUT_MARK:
            if last_code is None:
                raise ValueError(f"{document.name}:{i + 1}: an {OUTPUT_MARK} block follows no code block")
            last_code.expected = block.source
        elif block.file_name:
            blocks.append(block)
        i = j + 1
    return blocks


BLOCKS = [b for doc in DOCUMENTS for b in parse_blocks(doc)]


@dataclass
class DocumentRun:
    """One document's state across its block tests: folder, namespace, progress."""

    folder: Path
    namespace: dict = field(default_factory=lambda: {"__name__": "__doc__"})
    done: int = 0  # blocks of the document handled so far
    failed: str | None = None


@pytest.fixture(scope="session")
def document_runs(tmp_path_factory):
    return {}


@pytest.fixture(scope="session")
def shims(tmp_path_factory) -> dict:
    """PATH and PYTHONPATH for bash blocks: leveret and python are the code under test."""
    bin_dir = tmp_path_factory.mktemp("doc-bin")
    for name, line in (
        ("python", f'exec "{sys.executable}" "$@"'),
        ("python3", f'exec "{sys.executable}" "$@"'),
        ("leveret", f'exec "{sys.executable}" -m leveret "$@"'),
    ):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(0o755)
    package_root = str(Path(leveret.__file__).resolve().parents[1])
    # unbuffered: stdout and stderr lines interleave in the order they were written
    return {
        **os.environ,
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(p for p in [package_root, os.environ.get("PYTHONPATH")] if p),
    }


def _runs_here(block: Block) -> bool:
    if block.is_gpu:
        return cuda_available()
    return block.not_run_reason is None


def _run(block: Block, state: DocumentRun, env: dict) -> str:
    """Run one block in the document's folder; return its output."""
    if block.file_name:
        (state.folder / block.file_name).write_text(block.source.split("\n", 1)[1])
        return ""
    if block.language == "bash":
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.source],
            cwd=state.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        output = proc.stdout
        if proc.returncode != 0:
            raise AssertionError(f"{block.id}: bash exited with status {proc.returncode}; output:\n{output}")
        return output
    # Line numbers in tracebacks are those of the document.
    code = compile("\n" * block.line + block.source, str(block.document), "exec")
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(state.folder)
    try:
        with contextlib.redirect_stdout(out):
            exec(code, state.namespace)
    finally:
        os.chdir(cwd)
    return out.getvalue()


def _check_output(block: Block, output: str) -> None:
    if block.expected is None:
        return
    # A progress bar redraws its line with carriage returns: keep what is left on screen.
    got = "\n".join(line.split("\r")[-1].rstrip() for line in output.rstrip("\n").split("\n"))
    want = "\n".join(line.rstrip() for line in block.expected.rstrip("\n").split("\n"))
    if not doctest.OutputChecker().check_output(want + "\n", got + "\n", doctest.ELLIPSIS):
        raise AssertionError(
            f"{block.id}: output differs from the <!-- output --> block.\n--- expected\n{want}\n--- got\n{got}"
        )


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=[pytest.mark.gpu] if b.is_gpu else []) for b in BLOCKS]
)
def test_doc_block(block, document_runs, shims, tmp_path_factory):
    doc_blocks = [b for b in BLOCKS if b.document == block.document]
    state = document_runs.get(block.document)
    if state is None:
        state = document_runs[block.document] = DocumentRun(tmp_path_factory.mktemp(block.document.stem))
    if state.failed:
        pytest.skip(f"an earlier block of {block.document.name} failed ({state.failed})")
    if not block.is_gpu and block.not_run_reason is not None:
        pytest.skip(f"not run in CI: {block.not_run_reason}")
    index = doc_blocks.index(block)
    _catch_up(doc_blocks[:index], state, shims)  # blocks not selected (pytest -m gpu, -k) first
    state.done = index + 1
    try:
        _check_output(block, _run(block, state, shims))
    except BaseException:
        state.failed = block.id
        raise


def _catch_up(blocks: list[Block], state: DocumentRun, env: dict) -> None:
    for earlier in blocks[state.done :]:
        if _runs_here(earlier):
            try:
                _check_output(earlier, _run(earlier, state, env))
            except BaseException:
                state.failed = earlier.id
                raise
    state.done = max(state.done, len(blocks))


IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(img/([^)\s]+)\)")
# Pictures of the same commands differ only by rendering (fonts, antialiasing)
# and float rounding between library versions: identical where measured.
IMAGE_TOLERANCE = 0.01  # mean absolute difference, RGB in 0..1


@pytest.mark.parametrize(
    "document", [pytest.param(d, id=d.name) for d in DOCUMENTS if IMAGE_LINK.search(d.read_text(encoding="utf-8"))]
)
def test_doc_images_are_what_the_commands_make(document, document_runs, shims, tmp_path_factory):
    import numpy as np
    from matplotlib.image import imread

    state = document_runs.get(document)
    if state is None:
        state = document_runs[document] = DocumentRun(tmp_path_factory.mktemp(document.stem))
    if state.failed:
        pytest.skip(f"a block of {document.name} failed ({state.failed})")
    _catch_up([b for b in BLOCKS if b.document == document], state, shims)
    update = os.environ.get("LEVERET_UPDATE_DOC_IMAGES") == "1"
    compared = []
    for name in IMAGE_LINK.findall(document.read_text(encoding="utf-8")):
        made, shown = state.folder / name, document.parent / "img" / name
        if not made.is_file():
            continue  # a picture no block of this document makes
        if update:
            shown.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(made, shown)
        assert shown.is_file(), f"{document.name}: img/{name} is missing (LEVERET_UPDATE_DOC_IMAGES=1 makes it)"
        a, b = imread(made)[..., :3], imread(shown)[..., :3]
        assert a.shape == b.shape, f"img/{name}: {b.shape} shown, {a.shape} made"
        diff = float(np.mean(np.abs(a - b)))
        assert diff < IMAGE_TOLERANCE, f"img/{name}: mean difference {diff:.4f} from what the commands make"
        compared.append(name)
    if not compared:
        pytest.skip(f"no picture of {document.name} is made by its blocks")


def test_the_readme_python_blocks_are_found():
    # The parser must see the blocks of the README at least: a silent parse failure would
    # otherwise make the executed documentation pass by running nothing.
    readme = [b for b in BLOCKS if b.document.name == "README.md"]
    assert any(b.language == "python" and b.not_run_reason is None for b in readme)
