"""The commands README.md gives a newcomer in the checkout: they work when pasted.

They are run in a fresh shell, from the top of the checkout, with no virtualenv on the PATH.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
README = CHECKOUT / "README.md"
SYSTEMD_README = CHECKOUT / "systemd" / "README.md"

#: The sections of README.md a newcomer pastes from inside the checkout; the others are about a
#: host where sqsjkr is installed, where `sqsjkr` is on the PATH.
CHECKOUT_SECTIONS = ("Two commands", "Install", "Stats", "Local mode", "Development")


def sections(path: Path) -> dict[str, str]:
    """The text under each ## heading of a markdown file, by heading."""
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def commands(text: str) -> list[str]:
    """The shell lines of a markdown text: its indented blocks and its ```sh blocks, with
    continuation lines joined and comments dropped."""
    lines = re.findall(r"^    (?! *#)(.+)$", text, flags=re.M)
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.M | re.S):
        lines += [line for line in block.splitlines() if line and not line.startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    return [line for line in joined.splitlines() if not line.lstrip().startswith("#")]


def program(line: str) -> str:
    words = shlex.split(line, comments=True)
    while words and (words[0] == "sudo" or "=" in words[0]):
        words.pop(0)
    return words[0] if words else ""


@pytest.mark.parametrize("section", CHECKOUT_SECTIONS)
def test_checkout_commands_do_not_expect_an_installed_sqsjkr(section: str) -> None:
    """`sqsjkr` is not on a newcomer's PATH, and a bare `pip` installs outside any virtualenv."""
    found = commands(sections(README)[section])
    assert found, f"no commands found in README section {section!r}"
    for line in found:
        assert program(line) not in ("sqsjkr", "pip", "pip3"), line


def test_checkout_sqsjkr_commands_parse_when_pasted() -> None:
    """Each `.venv/bin/sqsjkr ...` line of the checkout sections, pasted from the top of the
    checkout, names a real subcommand and real options (click checks them before --help)."""
    venv_sqsjkr = CHECKOUT / ".venv" / "bin" / "sqsjkr"
    if not venv_sqsjkr.exists():
        pytest.skip("no .venv in this checkout: `make .venv/bin/sqsjkr` creates it")
    lines = [
        line
        for section in CHECKOUT_SECTIONS
        for line in commands(sections(README)[section])
        if program(line) == ".venv/bin/sqsjkr"
    ]
    assert lines, "README shows no .venv/bin/sqsjkr command"
    for line in lines:
        result = subprocess.run(
            ["sh", "-c", f"{line.split('#')[0]} --help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=CHECKOUT,
            env={"PATH": "/usr/bin:/bin"},
        )
        assert result.returncode == 0, (line, result.stderr)
        assert result.stdout.startswith("Usage: sqsjkr"), (line, result.stdout)


def test_make_demo_takes_the_documented_options() -> None:
    """The README's fallback for a taken stats port reaches `sqsjkr local`."""
    readme_line = "make demo DEMO_ARGS='--stats-port 0'"
    assert readme_line in commands(sections(README)["Two commands"])
    result = subprocess.run(
        ["make", "-n", *shlex.split(readme_line)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == ".venv/bin/sqsjkr local --demo --stats-port 0"
