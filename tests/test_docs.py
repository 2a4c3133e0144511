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
    assert make_dry_run(readme_line) == ".venv/bin/sqsjkr local --demo --stats-port 0"


def test_make_docs_takes_the_documented_address() -> None:
    """Development's `make docs` on another address, when 8000 is taken, reaches mkdocs."""
    line = "make docs DOCS_ADDR=127.0.0.1:8001"
    assert line in (DOCS / "development.md").read_text()
    assert make_dry_run(line).endswith("/mkdocs serve -a 127.0.0.1:8001")


def make_dry_run(line: str) -> str:
    """The last command `make -n` prints for a documented `make ...` line."""
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", *shlex.split(line)[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        # Under `make test` the parent's flags would make this make print its directory.
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-1]


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


#: What a page of the site holds that GitHub shows only as a line: an include of a file (or of a
#: README section) and a generated reference's directive.
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.M)
DIRECTIVE = re.compile(r"^(?:::: \S+|\[OAD\(.+\)\])$", re.M)


def paragraph_before(text: str, at: int) -> str:
    """The paragraph just before position at (a code fence's opening line skipped)."""
    before = re.sub(r"\n```\w*\n?$", "\n", text[:at].rstrip("\n") + "\n")
    return re.split(r"\n\s*\n", before.strip())[-1]


def github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def readme_heading_of(section: str) -> tuple[int, str]:
    """The level and title of the README heading a `--8<-- [start:section]` marker sits under."""
    text = README.read_text()
    marker = text.index(f"--8<-- [start:{section}]")
    level, title = re.findall(r"^(#+) (.+)$", text[:marker], flags=re.M)[-1]
    return len(level), title


def test_each_include_says_in_plain_words_what_it_includes() -> None:
    """On GitHub an include is a bare `--8<--` line: the paragraph before it names the file (and
    the README section, with its anchor) and says that the site includes it there."""
    found = 0
    for page in sorted(DOCS.glob("**/*.md")):
        text = page.read_text()
        for match in INCLUDE.finditer(text):
            found += 1
            path, section = match.groups()
            before = paragraph_before(text, match.start())
            where = f"{page.relative_to(CHECKOUT)}: {match.group(0)}"
            assert f"`{path}" in before, f"{where}: the paragraph before names no `{path}`"
            assert "included here" in before, f"{where}: it does not say it is included here"
            if section is not None:
                level, title = readme_heading_of(section)
                if level > 1:  # a section of the README, not its opening
                    assert f'"{title}"' in before, f"{where}: no section {title!r} named"
                    assert f"`{path}#{github_slug(title)}`" in before, f"{where}: no anchor"
    assert found >= 4


def test_each_generated_reference_says_where_its_content_is() -> None:
    """On GitHub a generated reference page is its directives alone: before the first, a plain
    sentence says the rest is generated, from what (a path of the checkout) and that `make docs`
    shows it built."""
    pages = 0
    for page in sorted(DOCS.glob("**/*.md")):
        text = page.read_text()
        first = DIRECTIVE.search(text)
        if first is None:
            continue
        pages += 1
        before = text[: first.start()]
        where = page.relative_to(CHECKOUT)
        assert "generated" in before and "`make docs`" in before, where
        sources = [
            span for span in re.findall(r"`([\w./-]+)`", before) if (CHECKOUT / span).exists()
        ]
        assert sources, f"{where}: names no file or folder of the checkout it is generated from"
    assert pages == 3


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make test` builds it: that build (DOCS_BUILT_SITE), or one of its own
    (about 6 s, once for the tests that read it) when the tests run outside make."""
    made = os.environ.get("DOCS_BUILT_SITE")
    if made and (Path(made) / "index.html").exists():
        return Path(made)
    mkdocs = CHECKOUT / ".venv" / "bin" / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("no .venv in this checkout: `make .venv/bin/sqsjkr` creates it")
    built = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(built)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=CHECKOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr
    return built


def article(site: Path, page: str) -> str:
    """The HTML of a built page's content (its navigation and table of contents left out)."""
    html = (site / page / "index.html").read_text()
    return html[html.index("<article") : html.index("</article>")]


#: Fleet's members that are how it is made, not what a program calls: its session and clients,
#: the stores and the writers of its actions.
FLEET_INTERNALS = {"session", "client", "sqs", "store", "table", "auditor", "sender", "source"}


def fleet_types() -> dict[str, type]:
    """Every sqsjkr type named in the annotations of Fleet's public methods and properties, and
    those that the public types among them name in theirs (a PipelineView's StepView, say)."""
    import dataclasses
    import inspect
    import typing

    import sqsjkr

    def named(hint: object) -> set[type]:
        found = {a for arg in typing.get_args(hint) for a in named(arg)}
        for t in (typing.get_origin(hint), hint):
            if isinstance(t, type) and t.__module__.startswith("sqsjkr"):
                found.add(t)
        return found

    def hints_of(function: object) -> set[type]:
        return {t for hint in typing.get_type_hints(function).values() for t in named(hint)}

    types: set[type] = set()
    for name, member in inspect.getmembers(sqsjkr.Fleet):
        if (name.startswith("_") and name != "__init__") or name in FLEET_INTERNALS:
            continue
        function = member.fget if isinstance(member, property) else member
        if callable(function):
            types |= hints_of(function)
    todo = [t for t in types if t is not sqsjkr.Config]  # the config file's: its own page
    while todo:
        kind = todo.pop()
        more = set()
        if dataclasses.is_dataclass(kind):
            for field in dataclasses.fields(kind):
                more |= named(typing.get_type_hints(kind)[field.name])
        for name, member in vars(kind).items():
            function = member.fget if isinstance(member, property) else member
            if not name.startswith("_") and inspect.isfunction(function):
                more |= hints_of(function)
        for found in more - types:
            if found.__name__ in sqsjkr.__all__:  # the public ones, not their parts
                types.add(found)
                todo.append(found)
    return {t.__name__: t for t in types}


def test_the_python_reference_documents_every_type_the_fleet_takes_and_returns(
    site: Path,
) -> None:
    html = article(site, "reference/python")
    headings = set(re.findall(r'<h\d id="([\w.]+)"', html))
    shown = {heading.rsplit(".", 1)[-1] for heading in headings}
    types = fleet_types()
    assert {"PipelineView", "StepView", "StepStatus", "HeldLock", "KillResult"} <= set(types)
    missing = sorted(name for name in types if name not in shown)
    assert not missing, f"docs/reference/python.md documents none of {missing}"


def test_the_python_reference_shows_the_fleets_interface_not_its_insides(site: Path) -> None:
    import inspect

    import sqsjkr

    html = article(site, "reference/python")
    members = {
        heading.removeprefix("sqsjkr.Fleet.")
        for heading in re.findall(r'<h\d id="(sqsjkr\.Fleet\.\w+)"', html)
    }
    public = {name for name in dir(sqsjkr.Fleet) if not name.startswith("_")} | {"config"}
    assert members == public - FLEET_INTERNALS
    for name, member in inspect.getmembers(sqsjkr.Fleet):
        if name in members and not isinstance(member, property):
            assert inspect.getdoc(member), f"Fleet.{name} has no docstring to show"
    # Each name as a program writes it: no module paths, no base classes.
    assert "Bases:" not in html
    headings = [
        re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h\d[^>]*>(.*?)</h\d>", html, flags=re.S)
    ]
    assert not [h for h in headings if "sqsjkr." in h]


def test_the_http_reference_has_one_title_a_table_of_contents_and_no_stray_backticks(
    site: Path,
) -> None:
    """The generated page had a second h1 (the document's title), under which the whole page
    nested, so that mkdocs-material's table of contents (the first h1's children) was empty; and
    its table cells showed descriptions' `code` with their backticks."""
    import json

    page = (site / "reference" / "http-api" / "index.html").read_text()
    html = article(site, "reference/http-api")
    assert len(re.findall(r"<h1\b", html)) == 1
    toc = page[page.index("md-nav--secondary") : page.index("<article")]
    listed = set(re.findall(r'href="#([^"]+)"', toc))
    document = json.loads((DOCS / "reference" / "openapi.json").read_text())
    routes = [(path, method) for path, item in document["paths"].items() for method in item]
    assert len(routes) >= 25
    for path, method in routes:
        anchor = method + "-" + re.sub(r"[^\w-]", "", path.replace("/", "")).lower()
        assert anchor in listed, (method, path)
    schemas = document["components"]["schemas"]
    assert len(schemas) >= 29
    assert {name.lower() for name in schemas} <= listed
    text = re.sub(r"<(pre|code)\b.*?</\1>", "", html, flags=re.S)
    assert "`" not in text


def test_deploying_says_how_terraform_runs_offline_and_on_the_local_endpoint() -> None:
    """The offline init is the one tests/test_terraform.py runs (a filesystem mirror through
    -plugin-dir), and plan and apply are shown against `sqsjkr local`'s endpoint, with the
    resource that does not finish there named."""
    from . import test_terraform

    text = (DOCS / "deploying.md").read_text()
    lines = commands(text)
    init = [line for line in lines if "terraform init -" in line]
    assert init, "deploying.md shows no offline terraform init"
    mirror = "/opt/tf-plugins"
    assert str(test_terraform.PLUGIN_DIR) == mirror or "SQSJKR_TF_PLUGIN_DIR" in os.environ
    for flag in ("-backend=false", "-input=false", f"-plugin-dir={mirror}"):
        assert flag in init[0].split(), flag
    assert any(f"terraform providers mirror {mirror}" in line for line in lines)
    assert "filesystem_mirror" in text
    assert ".venv/bin/sqsjkr local --port 4599" in lines
    endpoint = "AWS_ENDPOINT_URL=http://127.0.0.1:4599"
    assert any(endpoint in line and "terraform plan" in line for line in lines)
    assert "terraform apply" in text and "aws_sqs_queue_redrive_allow_policy" in text
    assert "endpoints {" in text
