"""Where the daemon's CPU goes: py-spy's raw (collapsed) stacks grouped into the parts of a job's path.

`python benchmarks/profile_summary.py FILE.txt...` prints the table; deployment.py --profile DIR writes the files.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HTTP = "HTTP: urllib3, http.client, sockets"

#: The deepest botocore (or urllib3) frame of a stack says what the call was doing.
BOTOCORE_FILES = [
    ("botocore/auth.py", "botocore: signing (SigV4)"),
    ("botocore/serialize.py", "botocore: request serialisation"),
    ("botocore/validate.py", "botocore: parameter validation"),
    ("botocore/parsers.py", "botocore: response parsing"),
    ("botocore/regions.py", "botocore: endpoint resolution"),
    ("botocore/endpoint_provider.py", "botocore: endpoint resolution"),
    ("botocore/httpsession.py", HTTP),
    ("urllib3/", HTTP),
    ("http/client.py", HTTP),
    ("botocore/retries/", "botocore: retry handling"),
    ("botocore/retryhandler.py", "botocore: retry handling"),
    ("botocore/hooks.py", "botocore: event hooks and handlers"),
    ("botocore/handlers.py", "botocore: event hooks and handlers"),
    ("botocore/credentials.py", "botocore: credentials"),
    ("botocore/endpoint.py", "botocore: request preparation and send"),
    ("botocore/awsrequest.py", "botocore: request preparation and send"),
    ("botocore/model.py", "botocore: service model"),
    ("botocore/client.py", "botocore: client call overhead"),
]

#: For stacks without botocore (py-spy may cut a deep stack short): the first match from the
#: leaf up.
OTHER_FILES = [
    ("urllib3/", HTTP),
    ("http/client.py", HTTP),
    ("email/", HTTP),  # http.client parses response headers with the email package
    ("subprocess.py", "subprocess: Popen, fork/exec, wait"),
    ("json/", "json (job messages)"),
    ("sqsjkr/observability/stats.py", "stats and stats server"),
    ("socketserver.py", "stats and stats server"),
    ("http/server.py", "stats and stats server"),
    ("sqsjkr/daemon/runner.py", "sqsjkr: runner (output streaming, stop switch)"),
    ("concurrent/futures/", "threads: pool hand-off, locks, conditions"),
    ("threading.py", "threads: pool hand-off, locks, conditions"),
    ("queue.py", "threads: pool hand-off, locks, conditions"),
]

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass(frozen=True)
class Frame:
    func: str
    file: str

    @classmethod
    def parse(cls, text: str) -> Frame:
        match = FRAME.match(text)
        if match is None:
            return cls(text, "")
        return cls(match["func"], match["file"])


def categorize(frames: list[Frame]) -> str:
    """The part of the daemon's work a stack (root first) belongs to."""
    if all(not f.file for f in frames):
        return "no Python frame (thread start and exit, GC)"
    under_botocore = any(f.file.startswith("botocore/") for f in frames)
    if any(f.file.startswith("logging/") for f in frames):
        return "logging (botocore's)" if under_botocore else "logging"
    if under_botocore:
        for frame in reversed(frames):
            for prefix, category in BOTOCORE_FILES:
                if frame.file.startswith(prefix):
                    return category
        return "botocore: other"
    # From the leaf up, the first frame that says: a worker's own code is not the thread pool
    # it runs in, whose frames are at the root of every worker's stack.
    for frame in reversed(frames):
        for prefix, category in OTHER_FILES:
            if frame.file.startswith(prefix):
                return category
        if frame.file.startswith("sqsjkr/"):
            return f"sqsjkr: {frame.file.removeprefix('sqsjkr/')}"
    return "other"


@dataclass
class Profile:
    samples: int
    categories: Counter[str]
    leaves: Counter[str]  # self samples by function
    inclusive: Counter[str]  # samples of stacks through a sqsjkr function


def load(paths: list[Path]) -> Profile:
    categories: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [Frame.parse(text) for text in stack.split(";")]
            total += count
            categories[categorize(frames)] += count
            leaves[f"{frames[-1].func} ({frames[-1].file})"] += count
            for name in {f"{f.func} ({f.file})" for f in frames if f.file.startswith("sqsjkr/")}:
                inclusive[name] += count
    return Profile(total, categories, leaves, inclusive)


def part(category: str) -> str:
    """The coarse part of a job's path a category belongs to."""
    if category.startswith(("botocore", "HTTP", "logging (botocore")):
        return "AWS calls (botocore and HTTP)"
    if category.startswith(("subprocess", "sqsjkr: runner")):
        return "running the command (subprocess, output)"
    return category


def render(profile: Profile, top: int = 12) -> str:
    if not profile.samples:
        return "no samples"
    out = [f"{profile.samples} samples of the daemon holding the GIL", ""]
    parts: Counter[str] = Counter()
    for category, n in profile.categories.items():
        parts[part(category)] += n
    out.append(
        "by part: "
        + ", ".join(f"{name} {100 * n / profile.samples:.0f} %" for name, n in parts.most_common())
    )
    out.append("")
    width = max(len(c) for c in profile.categories)
    out.append(f"{'where':{width}}  samples  share")
    for category, n in profile.categories.most_common():
        out.append(f"{category:{width}}  {n:7d}  {100 * n / profile.samples:4.1f} %")
    for title, counter in (
        ("functions by own samples", profile.leaves),
        ("sqsjkr functions by inclusive samples", profile.inclusive),
    ):
        out += ["", title]
        for name, n in counter.most_common(top):
            out.append(f"  {100 * n / profile.samples:5.1f} %  {name}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=12, help="functions to list (default 12)")
    args = parser.parse_args()
    print(render(load(args.files), args.top))


if __name__ == "__main__":
    main()
