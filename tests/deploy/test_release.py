"""What a release pins: requirements.lock (the image's exact dependencies) and the version.

The lock (tools/lock.py writes it) must be whole on every Python jobttl supports: each
requirement reached from pyproject.toml, through the locked packages' own requirements and
their markers, names a package the lock installs there at a version it accepts. The Dockerfile
installs the lock with --no-deps, so a hole would only show at `pip check` in an image build.

The version lives in pyproject.toml alone; every image reference (knative/, the Dockerfile's
and README's examples) and the chart's appVersion say the same.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tools import lock
from tests.deploy.manifests import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
LOCKED = lock.read(lock.LOCK.read_text())
CHART = REPO / "charts" / "jobttl" / "Chart.yaml"


@functools.cache
def installed_requires(name: str, version: Version) -> list[str] | None:
    """A package's Requires-Dist from this test environment, if it has that very version."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return (dist.requires or []) if Version(dist.version) == version else None


def test_every_runtime_dependency_is_pinned_at_a_version_pyproject_accepts():
    for requirement in lock.roots():
        name = canonicalize_name(requirement.name)
        assert name in LOCKED, f"{requirement} is not in requirements.lock"
        version, marker = LOCKED[name]
        assert marker is None, f"{name} is locked for some Pythons only: {marker}"
        assert requirement.specifier.contains(version, prereleases=True), f"{requirement}: the lock pins {version}"


def test_the_lock_is_whole_on_every_supported_python():
    """Through the dependencies' metadata, where this environment has the locked version."""
    verified = [name for name, (version, _) in LOCKED.items() if installed_requires(name, version) is not None]
    assert len(verified) >= len(LOCKED) // 2, f"too few locked versions installed here to check: {verified}"
    assert lock.missing(LOCKED, installed_requires) == []


def test_the_pythons_checked_start_at_the_oldest_jobttl_allows():
    allowed = SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert all(allowed.contains(p) for p in lock.PYTHONS)
    assert min(lock.PYTHONS, key=Version) == f"{PYPROJECT['project']['requires-python'].lstrip('>=')}.0"


# --- the walk itself, on a made-up dependency tree -------------------------------------------------

TREE = {
    "app": ["lib>=2", "old-only; python_full_version < '3.11.3'", "tool[fast]"],
    "lib": ["leaf"],
    "tool": ["speedup; extra == 'fast'", "never; extra == 'slow'"],
}


def requires(name, version):
    return TREE.get(name, [])


def walk(text: str) -> list[str]:
    return lock.missing(lock.read(text), requires, start=[Requirement("app")])


WHOLE = """app==1.0
lib==2.1
leaf==1.0
old-only==4.0 ; python_full_version < "3.11.3"
tool==1.0
speedup==1.0
"""


def test_a_whole_lock_passes_the_walk():
    assert walk(WHOLE) == []


@pytest.mark.parametrize(
    "change, complaint",
    [
        (("leaf==1.0\n", ""), "Python 3.11.0: lib 2.1 requires leaf, which the lock does not install"),
        (("lib==2.1", "lib==1.9"), "app 1.0 requires lib>=2, the lock pins 1.9"),
        # the redis-py / async-timeout case: needed on Debian bookworm's 3.11.2, not on 3.11.7
        (('old-only==4.0 ; python_full_version < "3.11.3"\n', ""), "Python 3.11.2: app 1.0 requires old-only"),
        (
            ('python_full_version < "3.11.3"', 'python_full_version < "3.11.1"'),
            "Python 3.11.2: app 1.0 requires old-only",
        ),
        (("speedup==1.0\n", ""), 'tool 1.0 requires speedup; extra == "fast"'),
    ],
)
def test_the_walk_finds_what_a_lock_misses(change, complaint):
    old, new = change
    assert old in WHOLE
    problems = walk(WHOLE.replace(old, new))
    assert any(complaint in p for p in problems), problems


def test_the_real_lock_without_a_python_specific_dependency_is_caught():
    redis = canonicalize_name("redis")
    if installed_requires(redis, LOCKED[redis][0]) is None:
        pytest.skip("this environment has another redis-py than the lock's")
    without = {name: entry for name, entry in LOCKED.items() if name != "async-timeout"}
    assert any("Python 3.11.2: redis" in p and "async-timeout" in p for p in lock.missing(without, installed_requires))


@pytest.mark.parametrize("line", ["flask>=3", "flask", "flask==3.*", "flask==3.1.3\nFlask==3.1.3"])
def test_a_lock_line_that_does_not_pin_one_version_is_refused(line):
    with pytest.raises(ValueError, match="requirements.lock line"):
        lock.read(line)


# --- the hashes ------------------------------------------------------------------------------------


def test_every_locked_package_has_the_hashes_of_the_files_the_image_may_install():
    """The Dockerfile installs with --require-hashes: an entry without one would stop the build."""
    found = lock.hashes(lock.LOCK.read_text())
    assert set(found) == set(LOCKED)
    assert {
        name: h for name, h in found.items() if not h or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", x) for x in h)
    } == {}


@pytest.mark.parametrize(
    "filename, expected",
    [
        ("aiohttp-3.14.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("aiohttp-3.14.5-cp313-cp313-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", True),
        ("cryptography-3.14.5-cp311-abi3-manylinux_2_34_aarch64.whl", True),
        ("flask-3.14.5-py3-none-any.whl", True),
        ("aiohttp-3.14.5-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", False),  # an older Python
        ("aiohttp-3.14.5-cp311-cp311-musllinux_1_2_x86_64.whl", False),  # Alpine's libc, not Debian's
        ("aiohttp-3.14.5-cp311-cp311-win_amd64.whl", False),
        ("aiohttp-3.14.5-cp311-cp311-macosx_11_0_arm64.whl", False),
        ("aiohttp-3.14.5.tar.gz", False),  # the image builds nothing from source
        ("aiohttp-3.14.4-cp311-cp311-manylinux_2_17_x86_64.whl", False),  # another version
        ("pydantic-0.18-py36+-none-any.whl", False),  # not a name pip reads
    ],
)
def test_the_lock_hashes_what_the_images_pythons_and_platforms_install(filename, expected):
    assert lock.installable(filename, Version("3.14.5")) is expected


def test_hashes_are_taken_from_the_index_for_each_pinned_version():
    pages = {
        "flask": ["flask-3.1.3-py3-none-any.whl", "flask-3.1.3.tar.gz", "flask-3.1.2-py3-none-any.whl"],
        "hiredis": [
            "hiredis-3.5.0-cp312-cp312-manylinux_2_17_x86_64.whl",
            "hiredis-3.5.0-cp312-cp312-manylinux_2_17_aarch64.whl",
            "hiredis-3.5.0-cp312-cp312-win32.whl",
        ],
    }

    def fetch(url: str) -> dict:
        name = url.rstrip("/").rsplit("/", 1)[1]
        return {"files": [{"filename": f, "hashes": {"sha256": f"{i:064x}"}} for i, f in enumerate(pages[name])]}

    text = lock.with_hashes("flask==3.1.3\nhiredis==3.5.0\n", fetch)
    assert lock.hashes(text) == {"flask": [f"sha256:{0:064x}"], "hiredis": [f"sha256:{0:064x}", f"sha256:{1:064x}"]}
    assert lock.read(text) == lock.read("flask==3.1.3\nhiredis==3.5.0\n")
    with pytest.raises(SystemExit, match="flask==3.1.1: no wheel for the image's Pythons and platforms"):
        lock.with_hashes("flask==3.1.1\n", fetch)


# --- the version ------------------------------------------------------------------------------------

IMAGE_TAG = re.compile(r"ghcr\.io/jobttl/jobttl:([\w.\-]+)")
NEW_TAG = re.compile(r"^\s*newTag:\s*['\"]?([\w.\-]+)", re.MULTILINE)
SKIP = {".git", ".venv", ".cache", "tests", "build", "node_modules"}


def release_files() -> list[Path]:
    """The files that ship or document the release: all but tests, caches and environments."""
    return [
        p
        for p in REPO.rglob("*")
        if p.is_file()
        and not SKIP & set(p.relative_to(REPO).parts)
        and not any(part.endswith(".egg-info") for part in p.parts)
        and (p.suffix in {".yaml", ".yml", ".md", ".txt", ".tpl", ".json"} or p.name in {"Dockerfile", "Makefile"})
    ]


def version_mentions(files: list[Path], root: Path = REPO) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in files:
        text = path.read_text(errors="replace")
        for tag in IMAGE_TAG.findall(text) + NEW_TAG.findall(text):
            found.setdefault(tag, set()).add(str(path.relative_to(root)))
    return found


def test_every_image_reference_carries_the_package_version():
    mentions = version_mentions(release_files())
    assert VERSION in mentions, "no image reference found at all"
    assert {tag: files for tag, files in mentions.items() if tag != VERSION} == {}
    assert "knative/base/kustomization.yaml" in mentions[VERSION]


def test_a_stale_image_reference_is_found(tmp_path):
    stale = tmp_path / "sink.yaml"
    stale.write_text("image: ghcr.io/jobttl/jobttl:0.0.9\n---\nimages:\n  - name: x\n    newTag: '0.0.8'\n")
    assert set(version_mentions([stale], tmp_path)) == {"0.0.9", "0.0.8"}


def test_the_chart_version_and_app_version_are_the_package_version():
    """One release of jobttl, one chart: `make chart` packages jobttl-<version>.tgz of this image."""
    chart = yaml.safe_load(CHART.read_text())
    assert str(chart["appVersion"]) == VERSION
    assert str(chart["version"]) == VERSION
    values = yaml.safe_load((CHART.parent / "values.yaml").read_text()) or {}
    tag = (values.get("image") or {}).get("tag")
    assert tag in (None, "", VERSION), f"values.yaml image.tag {tag!r}: leave it empty, appVersion is the default"


def test_the_projects_address_is_said_once_and_followed():
    """pyproject.toml's [project.urls]: the chart's home and sources, the image's source label."""
    home = PYPROJECT["project"]["urls"]["Source"]
    chart = yaml.safe_load(CHART.read_text())
    assert chart["home"] == home and chart["sources"] == [home]
    assert chart["icon"].startswith(home.replace("github.com", "raw.githubusercontent.com") + "/main/")
    assert (REPO / chart["icon"].split("/main/", 1)[1]).is_file(), "the icon the chart names is in the repository"
    assert f'org.opencontainers.image.source="{home}"' in (REPO / "Dockerfile").read_text()
    for name in ("home", "sources", "icon", "maintainers", "kubeVersion"):
        assert chart.get(name), f"Chart.yaml has no {name}"
    assert chart["annotations"]["artifacthub.io/license"] == PYPROJECT["project"]["license"]
