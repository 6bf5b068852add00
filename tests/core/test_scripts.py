"""How a script is made from its .lua file and its wrapper (jobttl.core.store.scripts): the calling
convention said once, in Python, and checked where it could go wrong."""

import pytest

from jobttl.core.store import scripts
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.store.scripts import LUA, Script, rest, script, unsent


def test_every_lua_file_has_one_wrapper_and_every_wrapper_its_file():
    files = sorted(p.name for p in LUA.glob("*.lua") if p.name != "prelude.lua")
    wrapped = sorted(w.file for w in scripts.WRAPPERS if (LUA / w.file).exists())
    assert files == wrapped


def test_the_header_names_keys_and_arguments_in_the_wrappers_order_and_types():
    header = scripts.Release.source.splitlines()[:4]
    assert header[1:] == ["local claim = KEYS[1]", "local intent = KEYS[2]", "local token = ARGV[1]"]
    assert "local clear_intent = ARGV[2] == '1'" in scripts.Release.source
    source = scripts.Reconcile.source
    assert "local due = tonumber(ARGV[4])" in source, "an int: a number, nil for None"
    assert "local unbooked = ARGV[15] ~= '' and ARGV[15] or nil" in source, "an optional str: nil for None"
    assert "local fields = {unpack(ARGV, 21)}" in source, "the rest: one table"


def test_arguments_are_sent_as_the_script_reads_them():
    call = scripts.Finish.of(
        JobRef("v1", "Job", "ns", "n", "u"),
        "u",
        5,
        {"event": "deleted", "uid": "u"},
        forget=True,
        max_entries=10,
        card_ttl=20,
        stages_too=False,
    )
    assert call.argv() == ["u", "u", 5, "1", "0", 10, 20, "", 0, "", "", "", 0, "event", "deleted", "uid", "u"]
    assert call.keys()[:3] == ["jobttl:pending", "jobttl:audit", "jobttl:job:ns/n"]


def test_a_script_reading_a_name_its_wrapper_does_not_send_fails_in_redis(tmp_path, redis):
    (tmp_path / "typo.lua").write_text("return membr")

    @script(str(tmp_path / "typo.lua"), preload=False)
    class Typo(Script):
        member: str

    with pytest.raises(Exception, match="membr"):
        Typo(member="x").run(redis)


@pytest.mark.parametrize(
    "fields, prelude",
    [
        ({"until": int}, False),  # a Lua keyword
        ({"note": str}, True),  # the prelude's own function
        ({"index": str}, False),  # the KEY's name
    ],
    ids=["lua-keyword", "prelude-name", "key-name"],
)
def test_a_name_a_script_cannot_use_is_refused_when_the_wrapper_is_made(tmp_path, fields, prelude):
    (tmp_path / "x.lua").write_text("return 1")
    namespace = {"__annotations__": fields, "KEYS": {"index": lambda s: "k"}}
    with pytest.raises(TypeError, match="cannot name"):
        script(str(tmp_path / "x.lua"), prelude=prelude, preload=False)(type("Bad", (Script,), namespace))


def test_only_the_last_argument_takes_the_rest(tmp_path):
    (tmp_path / "x.lua").write_text("return 1")
    namespace = {"__annotations__": {"values": tuple, "last": str}, "values": rest()}
    with pytest.raises(TypeError, match="last argument"):
        script(str(tmp_path / "x.lua"), preload=False)(type("Bad", (Script,), namespace))


def test_a_field_the_script_does_not_receive_is_not_sent():
    call = scripts.Release(member="m", token="t", clear_intent=True)
    assert call.argv() == ["t", "1"] and call.keys() == ["jobttl:claim:m", "jobttl:deleting:m"]
    assert unsent().metadata == {"sent": False}
