"""The commands the README and the docs give a newcomer: they work when pasted, and the install
steps are one.

The checkout commands of README.md and the pages of docs/ are run in a fresh shell; the host
install lives in systemd/README.md.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
README = CHECKOUT / "README.md"
DOCS = CHECKOUT / "docs"
SYSTEMD_README = CHECKOUT / "systemd" / "README.md"

#: The sections a newcomer pastes from inside the checkout, by the file each lives in now (the
#: README is the front door, the rest moved into the site); the others are about a host where
#: sqsjkr is installed, where `sqsjkr` is on the PATH.
CHECKOUT_SECTIONS = (
    (README, "Two commands"),
    (DOCS / "getting-started.md", "Two commands"),
    (DOCS / "getting-started.md", "Install"),
    (DOCS / "operating.md", "Stats"),
    (DOCS / "getting-started.md", "Local mode"),
    (DOCS / "development.md", "Development"),
)


def sections(path: Path) -> dict[str, str]:
    """The text under each ## heading of a markdown file, by heading."""
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def section(path: Path, heading: str) -> str:
    """A ## section of a file, or the whole page when it is the page's # title."""
    text = path.read_text()
    return text if text.startswith(f"# {heading}\n") else sections(path)[heading]


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


@pytest.mark.parametrize(
    ("path", "heading"), CHECKOUT_SECTIONS, ids=[f"{p.name}:{s}" for p, s in CHECKOUT_SECTIONS]
)
def test_checkout_commands_do_not_expect_an_installed_sqsjkr(path: Path, heading: str) -> None:
    """`sqsjkr` is not on a newcomer's PATH, and a bare `pip` installs outside any virtualenv."""
    found = commands(section(path, heading))
    assert found, f"no commands found in {path.name} section {heading!r}"
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
        for path, heading in CHECKOUT_SECTIONS
        for line in commands(section(path, heading))
        if program(line) == ".venv/bin/sqsjkr"
    ]
    assert lines, "the checkout sections show no .venv/bin/sqsjkr command"
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
    """Getting started's fallback for a taken stats port reaches `sqsjkr local`."""
    readme_line = "make demo DEMO_ARGS='--stats-port 0'"
    assert readme_line in commands(sections(DOCS / "getting-started.md")["Two commands"])
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", *shlex.split(readme_line)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        # Under `make test` the parent's flags would make this make print its directory.
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == ".venv/bin/sqsjkr local --demo --stats-port 0"


def test_make_docs_takes_the_documented_address() -> None:
    """Development's `make docs` on another address, when 8000 is taken, reaches mkdocs."""
    line = "make docs DOCS_ADDR=127.0.0.1:8001"
    assert line in (DOCS / "development.md").read_text()
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", *shlex.split(line)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith("/mkdocs serve -a 127.0.0.1:8001")


def test_the_host_install_steps_live_in_systemd_readme_only() -> None:
    """README.md and the docs link to them instead of repeating them, so they cannot disagree
    again."""
    assert "systemd/README.md#install" in README.read_text()
    assert '`systemd/README.md`, section "Install"' in (DOCS / "getting-started.md").read_text()
    for page in [README, *sorted(DOCS.glob("**/*.md"))]:
        for line in commands(page.read_text()):
            try:
                first = program(line)
            except ValueError:  # not a shell line (a JSON fragment, say): no install step
                continue
            assert first not in ("useradd", "install", "ln", "systemctl"), (page, line)
    install = sections(SYSTEMD_README)["Install"]
    assert "useradd" in install and "systemctl enable" in install


def systemd_install_commands() -> list[list[str]]:
    return [
        shlex.split(line, comments=True)[1:]
        for line in commands(sections(SYSTEMD_README)["Install"])
        if line.startswith("sudo ")
    ]


def test_the_daemon_user_has_no_login_shell_and_a_home() -> None:
    (useradd,) = [argv for argv in systemd_install_commands() if argv[0] == "useradd"]
    assert useradd[-1] == "sqsjkr"
    assert "--system" in useradd and "--create-home" in useradd
    assert useradd[useradd.index("--shell") + 1] == "/usr/sbin/nologin"
    assert useradd[useradd.index("--home-dir") + 1] == "/var/lib/sqsjkr"


@pytest.mark.parametrize(
    ("target", "mode", "owner"),
    [
        # The config may hold secrets (a trigger's webhook token); the daemon reads it as sqsjkr.
        ("/etc/sqsjkr/config.toml", "0640", ("root", "sqsjkr")),
        # Read by systemd; its values reach every job, and other users have no business in it.
        ("/etc/sqsjkr/sqsjkr.env", "0640", ("root", "sqsjkr")),
        ("/etc/systemd/system/sqsjkr.service", "0644", ("root", "root")),
    ],
)
def test_installed_files_get_their_mode_and_owner(
    target: str, mode: str, owner: tuple[str, str]
) -> None:
    (argv,) = [a for a in systemd_install_commands() if a[0] == "install" and a[-1] == target]
    assert argv[argv.index("-m") + 1] == mode
    assert (argv[argv.index("-o") + 1], argv[argv.index("-g") + 1]) == owner
    # The source is a file of the checkout, and the steps run from its top directory.
    assert (CHECKOUT / argv[-2]).is_file(), argv


def test_the_readme_is_a_front_door() -> None:
    """Under 250 lines: what it is, the two commands as .ci/run and a newcomer call them, a first
    job, and links into the site; the rest lives in docs/, each fact on one page."""
    text = README.read_text()
    assert len(text.splitlines()) < 250
    assert commands(sections(README)["Two commands"]) == ["make demo", "make test"]
    assert "A first job" in sections(README)
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (CHECKOUT / target).exists(), target
