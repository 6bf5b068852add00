"""The policy file read strictly (jobttl.core.domain.rules.config_yaml): YAML 1.2, no duplicate keys, bounded
aliases, size and nesting; every refusal names the file, the line and the field."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from jobttl.core.domain.rules import config_yaml
from jobttl.core.domain.kinds.declarations import BUILTIN_FILE
from jobttl.core.domain.rules.policy import PolicyError, load_policy
from tests.services import ROOT


def alias_bomb() -> str:
    """Under a kilobyte of nested aliases that expand to 111 million strings (a billion laughs)."""
    lines = [
        "kindDeclarations:",
        "  - group: example.com",
        "    version: v1",
        "    kind: Widget",
        "    plural: widgets",
        "    finished: {state: {path: status.phase, values: {Done: succeeded}}}",
        "    finishedAt: [status.t]",
        "    notYet:",
        "      - path: status.phase",
        "        why: x",
        "        values:",
        "          - &a0 [x, x, x, x, x, x, x, x, x, x]",
    ]
    lines += [f"          - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


DUPLICATE_NAMESPACES = """\
ttl: 1d
namespaces:
  exclude: [production]
rules:
  - name: research
    namespaces: [research]
    ttl: 2d
namespaces:
  include: []
"""


@pytest.mark.parametrize(
    "text, prefix, words",
    [
        pytest.param(
            DUPLICATE_NAMESPACES,
            "8: namespaces",
            "written twice in one mapping (lines 2 and 8)",
            id="a second namespaces key would drop the first one's exclude",
        ),
        pytest.param(
            "rules:\n  - name: a\n    namespaces: [a]\n    ttl: 1d\n    ttl: 2d\n",
            "5: rules[0].ttl",
            "lines 4 and 5",
            id="a duplicate inside a rule",
        ),
        pytest.param("ttl: 1:30\n", "1: ttl", "got '1:30'", id="YAML 1.1 sexagesimal is not 90 s"),
        pytest.param("dryRun: on\n", "1: dryRun", "expected true or false, got 'on'", id="on is not a boolean"),
        pytest.param(
            'ttl: 1d\nrules:\n  - name: pin\n    selector: {matchLabels: {pin: "true"}}\n    keep: yes\n',
            "5: rules[0].keep",
            "expected true or false, got 'yes'",
            id="yes is not a boolean",
        ),
        pytest.param("dryRun: !!bool yes\n", "1", "'yes' is not true or false", id="nor with its tag"),
        pytest.param("ttl: !!int 1:30\n", "1", "'1:30' is not an integer", id="an integer tag on what is none"),
        pytest.param(
            "ttl: !!python/object/apply:os.system [id]\n",
            "1: ttl",
            "is not one a policy may use",
            id="a tag outside the core schema",
        ),
        pytest.param(
            "kinds: [TFJob]\n---\nttl: 1d\n", "2: (top level)", "a second YAML document", id="a second document"
        ),
        pytest.param("ttl: 1d\ntrue: 2\n", "2: true", "a key must be a string", id="a key YAML reads as a boolean"),
        pytest.param(
            alias_bomb(),
            "15: kindDeclarations[0].notYet[0].values[3][7]",
            "aliases expand to more than 10000 nodes",
            id="a billion laughs",
        ),
        pytest.param(
            "rules:\n  - name: a\n    namespaces: &n [a, *n]\n",
            "3: rules[0].namespaces[1]",
            "used inside its own anchor",
            id="a recursive alias",
        ),
        pytest.param(
            "ttl: 1d\nnamespaces: {exclude: " + "[" * 40 + "]" * 40 + "}\n",
            "2: namespaces.exclude",
            "nests deeper than 32 levels",
            id="nesting",
        ),
        pytest.param(
            "x: &deep " + "[" * 20 + "]" * 20 + "\ny: " + "[" * 20 + "*deep" + "]" * 20 + "\n",
            "2: y",
            "*deep nests deeper than 32 levels here",
            id="nesting through an alias",
        ),
        pytest.param("ttl: [unclosed\n", "2", "not valid YAML", id="not YAML"),
    ],
)
def test_the_policy_file_is_refused_naming_file_line_and_field(tmp_path, text, prefix, words):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path}:{prefix}"), str(info.value)
    assert words in str(info.value)


def test_yaml_1_2_reads_what_is_written():
    """No Norway problem: no and off are the strings an operator wrote; numbers are decimal."""
    data = config_yaml.loads(
        "exclude: [no, off, yes, on, 2030-01-01]\nlogKiB: 010\nhex: 0x1F\noctal: 0o17\nt: true\nn: ~\n", "p"
    ).data
    assert data == {
        "exclude": ["no", "off", "yes", "on", "2030-01-01"],
        "logKiB": 10,
        "hex": 31,
        "octal": 15,
        "t": True,
        "n": None,
    }


def test_a_policy_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"# padding\n" * (config_yaml.MAX_BYTES // 10 + 1))
    with pytest.raises(PolicyError, match=rf"^{path}: larger than the 256 KiB a policy file may hold"):
        load_policy(path)


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"ttl: 1d\nkinds: [\xff]\n")
    with pytest.raises(PolicyError, match=rf"^{path}:2: not UTF-8"):
        load_policy(path)


MERGE_TWICE = "ttl: 1d\nnamespaces: {<<: {exclude: [production]}, <<: {exclude: []}}\n"
MERGE_LIST = "ttl: 1d\nnamespaces:\n  <<: [{exclude: [production]}, {exclude: []}]\n"
MERGE_ALIAS = textwrap.dedent("""\
    kindDeclarations:
      - &widget
        group: example.com
        version: v1
        kind: Widget
        plural: widgets
        finished: {state: {path: status.phase, values: {Done: succeeded}}}
        finishedAt: [status.finishedAt]
      - {<<: *widget, kind: Gadget, plural: gadgets}
    """)


@pytest.mark.parametrize(
    "text, prefix",
    [
        pytest.param(
            MERGE_TWICE, "2: namespaces.<<", id="two merge keys (PyYAML: the later map wins, exclude dropped)"
        ),
        pytest.param(MERGE_LIST, "3: namespaces.<<", id="a list of maps (PyYAML: the later wins, exclude dropped)"),
        pytest.param(MERGE_ALIAS, "9: kindDeclarations[1].<<", id="one merge of an alias, kinds.yaml's style"),
        pytest.param("ttl: 1d\n<<: {ttl: 2d}\n", "2: <<", id="at the top level"),
    ],
)
def test_a_merge_key_is_refused_naming_its_line(tmp_path, text, prefix):
    """YAML 1.2 has no merge keys; PyYAML's reading of them lets a later map undo an operator's exclude."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(f"{path}:{prefix}: a merge key (<<): YAML 1.2 has no merge keys"), str(info.value)
    assert "write the keys out" in str(info.value)


def test_a_merge_key_spelt_with_its_tag_is_refused_too(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("namespaces:\n  !!merge <<: [{exclude: [production]}, {exclude: []}]\n")
    with pytest.raises(PolicyError, match=rf"^{path}:2: namespaces.<<: the tag tag:yaml.org,2002:merge is not one"):
        load_policy(path)


def test_aliases_and_a_quoted_merge_text_still_read():
    """An alias standing for a whole value is YAML 1.2; `<<` as a value (or quoted) is the text written."""
    data = config_yaml.loads('a: &x [production]\nb: *x\nc: <<\n"<<": 1\n', "p").data
    assert data == {"a": ["production"], "b": ["production"], "c": "<<", "<<": 1}


def test_the_builtin_declarations_written_out_read_the_same():
    """kinds.yaml (read with PyYAML's safe loader, merge keys and all) written out as an operator would
    copy it into kindDeclarations: read the same by the policy's loader."""
    builtin = yaml.safe_load(BUILTIN_FILE.read_text())
    assert config_yaml.loads(yaml.safe_dump(builtin), "kinds.yaml").data == builtin


@pytest.mark.parametrize(
    "text, words",
    [
        pytest.param(alias_bomb(), ":15: kindDeclarations[0].notYet[0].values[3][7]: aliases expand", id="alias bomb"),
        pytest.param(
            DUPLICATE_NAMESPACES, ":8: namespaces: written twice in one mapping (lines 2 and 8)", id="duplicate key"
        ),
        pytest.param("ttl: 1:30\n", ":1: ttl: expected a duration", id="sexagesimal"),
        pytest.param(MERGE_TWICE, ":2: namespaces.<<: a merge key (<<)", id="merge key"),
    ],
)
def test_the_worker_exits_2_at_start_naming_the_line(tmp_path, text, words):
    """The real command: exit 2, one line naming file, line and field, no traceback; a hang would time out
    (before: the alias bomb grew past 470 MB in 40 s and never said anything)."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    env = {"PATH": "/usr/bin:/bin", "JOBTTL_POLICY": str(path), "JOBTTL_REDIS_URL": "redis://127.0.0.1:1/0"}
    started = subprocess.run(
        [sys.executable, "-m", "jobttl", "worker"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 2, started.stderr
    assert started.stderr.startswith(f"jobttl: configuration error: JOBTTL_POLICY: {path}{words}"), started.stderr
    assert "Traceback" not in started.stderr


@pytest.mark.parametrize(
    "text", [pytest.param(MERGE_TWICE, id="two merge keys"), pytest.param(MERGE_LIST, id="a list of maps")]
)
def test_the_sink_exits_2_on_a_merge_key_instead_of_dropping_the_exclude(tmp_path, text):
    """The real command (before: it started with exclude=(), so production jobs expired)."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    started = subprocess.run(
        [sys.executable, "-m", "jobttl", "sink", "--port", "1"],
        cwd=ROOT,
        text=True,
        env={"PATH": "/usr/bin:/bin", "JOBTTL_POLICY": str(path)},
        capture_output=True,
        timeout=60,
    )
    assert started.returncode == 2, started.stderr
    assert f"{path}:" in started.stderr and "namespaces.<<: a merge key (<<)" in started.stderr, started.stderr
    assert "Traceback" not in started.stderr
