"""The release workflow (.github/workflows/), checked by actionlint and read for what it must do.

actionlint (the `actionlint` binary of the test extras) type-checks every workflow: expressions,
`needs` and outputs, runner labels, each action's inputs. Then the release's promises, read from
the file: it starts only from a version tag checked against pyproject.toml and CHANGELOG.md; the
tests run before anything is published; the image is built for amd64 and arm64 with an SBOM and
provenance; the image and the chart (packaged by `make chart`, pushed to an OCI registry) are
signed keylessly with cosign; every action is pinned to a commit; write permissions are given to
the jobs that publish and no other. tools/release.py, which the workflow runs, is tested here too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools import release
from tests.deploy.manifests import REPO

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
ACTIONLINT = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
needs_actionlint = pytest.mark.skipif(ACTIONLINT is None, reason="actionlint (the test extras) is not installed")


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ACTIONLINT, "-no-color", *map(str, paths)], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@needs_actionlint
def test_actionlint_finds_nothing_in_the_workflows():
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert RELEASE in files
    done = actionlint(*files)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_actionlint
@pytest.mark.parametrize(
    "change, complaint",
    [
        (("needs: [check, image]", "needs: [check]"), "needs.image"),  # an output of a job it does not need
        (("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.4"), "label"),
        (("${{ steps.build.outputs.digest }}", "${{ steps.build.output.digest }}"), "output"),
    ],
)
def test_actionlint_catches_a_broken_release_workflow(tmp_path, change, complaint):
    old, new = change
    text = RELEASE.read_text()
    assert old in text
    broken = tmp_path / ".github" / "workflows" / "release.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(old, new, 1))
    done = actionlint(broken)
    assert done.returncode == 1 and complaint in done.stdout, done.stdout + done.stderr


def workflow() -> dict:
    data = yaml.safe_load(RELEASE.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def steps(job: str) -> list[dict]:
    return workflow()["jobs"][job]["steps"]


def runs(job: str) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


def uses(job: str) -> list[str]:
    return [s["uses"] for s in steps(job) if "uses" in s]


def test_a_release_starts_from_a_version_tag_and_checks_it_first():
    data = workflow()
    assert data["on"] == {"push": {"tags": ["v*"]}}
    assert "python -m tools.release check" in runs("check")
    for job, spec in data["jobs"].items():
        if job != "check":
            assert "check" in ([spec["needs"]] if isinstance(spec["needs"], str) else spec["needs"]), job


def test_nothing_is_published_before_the_tests_pass():
    jobs = workflow()["jobs"]
    assert "bash .ci/run" in runs("test")
    assert "test" in jobs["image"]["needs"] and "image" in jobs["publish"]["needs"]


def test_the_image_is_multi_arch_with_an_sbom_and_provenance_and_signed():
    [build] = [s for s in steps("image") if s.get("uses", "").startswith("docker/build-push-action@")]
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["with"]["sbom"] is True and build["with"]["provenance"] == "mode=max"
    assert build["with"]["push"] is True and build["with"]["target"] == "runtime"
    assert any(u.startswith("docker/setup-qemu-action@") for u in uses("image"))
    assert re.search(r'cosign sign --yes "\$\{IMAGE\}@\$\{DIGEST\}"', runs("image"))


def test_the_chart_is_packaged_by_make_chart_pushed_to_an_oci_registry_and_signed():
    text = runs("publish")
    assert "make chart" in text
    assert 'helm push "dist/jobttl-${VERSION}.tgz" "$CHARTS"' in text
    assert workflow()["env"]["CHARTS"].startswith("oci://")
    assert re.search(r'cosign sign --yes "\$\{CHARTS#oci://\}/jobttl@\$\{CHART_DIGEST\}"', text)
    assert "gh release create" in text and "sbom" in text


def test_signing_is_keyless_and_only_publishing_jobs_may_write():
    data = workflow()
    assert data["permissions"] == {"contents": "read"}
    for job, spec in data["jobs"].items():
        granted = spec.get("permissions", {})
        signs = "cosign sign" in runs(job)
        assert (granted.get("id-token") == "write") == signs, job  # the OIDC token is the signing identity
        assert "--key" not in runs(job), job
        if job in ("check", "test"):
            assert granted == {}, job


def test_every_action_is_pinned_to_a_commit_with_its_version_said():
    pinned = re.compile(r"^\s*(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")
    lines = [line for line in RELEASE.read_text().splitlines() if "uses:" in line]
    assert lines and [line for line in lines if not pinned.match(line)] == []


def test_checkouts_keep_no_credentials():
    for job in workflow()["jobs"]:
        for step in steps(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, job


# --- tools/release.py -----------------------------------------------------------------------------

CHANGELOG = """# Changelog

## [Unreleased]

## [1.2.0] - 2027-01-15

### Added
- A thing.

## [1.1.0] - 2026-12-01

- Older.

[1.2.0]: https://example.com/compare/v1.1.0...v1.2.0
"""


def repo_at(tmp_path: Path, version: str, changelog: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "jobttl"\nversion = "{version}"\n')
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    return tmp_path


def test_a_tag_releases_pyproject_versions_dated_changelog_section(tmp_path):
    assert release.check("v1.2.0", repo_at(tmp_path, "1.2.0", CHANGELOG)) == "1.2.0"
    assert release.notes("1.2.0", CHANGELOG) == "### Added\n- A thing."
    assert release.notes("1.1.0", CHANGELOG) == "- Older."


@pytest.mark.parametrize(
    "tag, version, changelog, complaint",
    [
        ("v1.2.1", "1.2.0", CHANGELOG, "tag v1.2.1 is not v1.2.0"),
        ("1.2.0", "1.2.0", CHANGELOG, "tag 1.2.0 is not v1.2.0"),
        ("v1.3.0", "1.3.0", CHANGELOG, r"no section ## \[1.3.0\]"),
        ("v1.2.0", "1.2.0", CHANGELOG.replace("[1.2.0] - 2027-01-15", "[1.2.0] - Unreleased"), "dated 'Unreleased'"),
        ("v1.2.0", "1.2.0", CHANGELOG.replace("[1.2.0] - 2027-01-15", "[1.2.0]"), "dated 'nothing'"),
    ],
)
def test_a_release_not_ready_is_refused_naming_why(tmp_path, tag, version, changelog, complaint):
    with pytest.raises(release.ReleaseError, match=complaint):
        release.check(tag, repo_at(tmp_path, version, changelog))


def test_the_repositorys_changelog_has_a_section_for_this_version():
    """Dated by the commit that is tagged; until then, `Unreleased`, which `check` refuses."""
    sections = release.sections((REPO / "CHANGELOG.md").read_text())
    assert release.version() in sections
    assert sections[release.version()][1], "the section lists the release's changes"


def test_a_step_that_pipes_a_command_fails_when_the_command_does():
    """GitHub's default `run` shell is `bash -e` without pipefail: `helm push ... | tee` would hide a failed push."""
    workflow = yaml.safe_load(RELEASE.read_text())
    default_shell = workflow.get("defaults", {}).get("run", {}).get("shell")
    piped = [
        (f"{name}/{step.get('name', '?')}", step)
        for name, job in workflow["jobs"].items()
        for step in job.get("steps", [])
        if re.search(r"[^|]\|[^|]", step.get("run", ""))
    ]
    assert piped, "the release pushes its chart through tee"
    for where, step in piped:
        # An explicit `shell: bash` runs with -o pipefail; otherwise the script must set it.
        assert "set -o pipefail" in step["run"] or (step.get("shell") or default_shell) == "bash", where
