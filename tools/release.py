"""What the release workflow (.github/workflows/release.yml) asks of the repository before it publishes.

    python -m tools.release check TAG    exit 1 naming the problem unless TAG is `v` + pyproject.toml's
                                         version and CHANGELOG.md has a dated section for it (not
                                         "Unreleased"); else print `version=X` (for $GITHUB_OUTPUT)
    python -m tools.release notes VERSION   print that section of CHANGELOG.md: the release's notes

The version is said once, in pyproject.toml; the chart's version and appVersion and every image
reference follow it (tests/deploy/test_release.py). CHANGELOG.md keeps the Keep a Changelog form:
`## [X.Y.Z] - YYYY-MM-DD` sections, newest first.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from tools.command import exit_status

REPO = Path(__file__).resolve().parent.parent
_SECTION = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>.+))?$", re.MULTILINE)


class ReleaseError(Exception):
    """The repository is not ready for this release; the message says what to do."""


def version(repo: Path = REPO) -> str:
    return tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]


def sections(changelog: str) -> dict[str, tuple[str, str]]:
    """version -> (its date or "Unreleased", its text without the heading), in file order."""
    found = {}
    matches = list(_SECTION.finditer(changelog))
    for match, following in zip(matches, matches[1:] + [None]):
        end = following.start() if following else len(changelog)
        body = changelog[match.end() : end]
        body = body.split("\n[", 1)[0] if following is None else body  # link references at the end
        found[match["version"]] = ((match["date"] or "").strip(), body.strip())
    return found


def notes(release: str, changelog: str) -> str:
    try:
        return sections(changelog)[release][1]
    except KeyError:
        raise ReleaseError(f"CHANGELOG.md has no section ## [{release}]") from None


def check(tag: str, repo: Path = REPO) -> str:
    """The version a tag releases, or ReleaseError naming what is not ready."""
    current = version(repo)
    if tag != f"v{current}":
        raise ReleaseError(f"tag {tag} is not v{current}, pyproject.toml's version: tag the commit that sets it")
    date = sections((repo / "CHANGELOG.md").read_text()).get(current, (None, ""))[0]
    if date is None:
        raise ReleaseError(f"CHANGELOG.md has no section ## [{current}]")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ReleaseError(
            f"CHANGELOG.md's section [{current}] is dated {date or 'nothing'!r}: date it "
            "(YYYY-MM-DD) in the commit you tag"
        )
    return current


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return exit_status(lambda: _run(args), program="release", errors=ReleaseError, status=1)


def _run(args: list[str]) -> int:
    if len(args) == 2 and args[0] == "check":
        print(f"version={check(args[1])}")
    elif len(args) == 2 and args[0] == "notes":
        print(notes(args[1], (REPO / "CHANGELOG.md").read_text()))
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
