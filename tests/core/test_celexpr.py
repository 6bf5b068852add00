"""CEL TTL expressions: what load refuses (with its column), what evaluation gives, and its bounds."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from jobttl.core.domain import celexpr, kinddecl
from jobttl.core.domain.celexpr import (COST_LIMIT, MAX_INPUT_BYTES, CelCheckError, CelEvalError, CelInput,
                                        ResultCache, TtlExpression)
from jobttl.core.domain.kinddecl import parse_path


def inputs(*specs) -> tuple[CelInput, ...]:
    """`"spec.x"` or `("spec.x", max_items)`."""
    return tuple(CelInput(parse_path(s), s) if isinstance(s, str) else CelInput(parse_path(s[0]), s[0], s[1])
                 for s in specs)


X = inputs("spec.x")
ITEMS = inputs(("spec.items", 10))


def refused(text: str, given=X) -> CelCheckError:
    with pytest.raises(CelCheckError) as caught:
        TtlExpression(text, given)
    return caught.value


@pytest.mark.parametrize("text, given, problem, where", [
    ("self.spec.y", X, "reads self.spec.y, which is not among celInputs (spec.x)", (1, 11)),
    ("has(self.status.phase) ? 1 : null", X, "reads self.status, which is not among celInputs", (1, 10)),
    ("self.spec", X, "reads self.spec, which no celInputs entry holds whole", (1, 1)),
    ("size(self) > 0 ? 1 : 2", X, "reads self, which no celInputs entry holds whole", (1, 6)),
    ("foo(1)", X, "unknown function foo()", (1, 1)),
    ("self.spec.x.lowerAscii() == 'a' ? 1 : 2", X, "unknown function lowerAscii()", (1, 1)),
    ("self.spec.x.matches('(a+)+$') ? 1 : null", X, "matches() is not available", (1, 1)),
    ("x + 1", X, "unknown name 'x': the object is `self`", (1, 1)),
    ("true", X, "the result can be a bool: a TTL is seconds (an int), a duration, or null", (1, 1)),
    ("self.spec.x > 3", X, "the result can be a bool", (1, 1)),
    ("has(self.spec.x) ? self.spec.x : false", X, "the result can be a bool", (1, 1)),
    ("1.5", X, "the result can be a double", (1, 1)),
    ("'3600'", X, "the result can be a string", (1, 1)),
    ("[1]", X, "the result can be a list", (1, 1)),
    ("self.spec.x +", X, "not a valid CEL expression", (1, 13)),
    ("1 +\n  * 2", X, "not a valid CEL expression: unexpected '*'", (2, 3)),
    # A list whose size nothing bounds: a 64 KiB input can hold ~32,000 items.
    ("self.spec.items.exists(i, i > 3) ? 1 : null", inputs("spec.items"),
     "exists() here runs its body (18 steps) once per item, and no maxItems bounds its list", (1, 17)),
    # An operator's nested comprehension over 300 items (issue 26): ~2.7 million steps.
    ("self.spec.items.map(a, self.spec.items.filter(b, a == b).size()).exists(n, n > 1) ? 60 : null",
     inputs(("spec.items", 300)), "map() here runs its body (6,020 steps) once per item, and its list holds up to "
                                  "300 items", (1, 17)),
    ("self.spec.items.exists(i, i.sub.exists(j, j > 3)) ? 1 : null", ITEMS,
     "exists() here runs its body (18 steps) once per item, and no maxItems bounds its list", (1, 33)),
    ("self.spec.items.exists(i, i) ? 'a' + 'b' : 2", ITEMS, "the result can be a string", (1, 1)),
    ("self.spec.items.all(1, true) ? 1 : 2", ITEMS, "the first argument of all() must be a variable name", (1, 21)),
    ("self.spec.items.exists(i, 5) ? 1 : 2", ITEMS, "exists() needs a condition, and this is a int", (1, 27)),
])
def test_an_expression_is_refused_at_load_naming_the_problem_and_its_column(text, given, problem, where):
    error = refused(text, given)
    assert problem in str(error)
    assert (error.line, error.column) == where
    assert str(error).startswith(f"line {where[0]}, column {where[1]} of the expression: ")


@pytest.mark.parametrize("text", [
    "self.spec.x",
    "has(self.spec.x) ? self.spec.x : null",
    "duration('1h')",
    "null",
    "has(self.spec.x) ? int(self.spec.x) * 60 : 3600",
    "self.spec.items.exists(i, i > 3) ? 1 : null",
    # The nested comprehension, over lists bounded small enough: 10 x 10 items.
    "self.spec.items.map(a, self.spec.items.filter(b, a == b).size()).exists(n, n > 1) ? 60 : null",
])
def test_an_expression_within_the_rules_is_accepted(text):
    expression = TtlExpression(text, inputs("spec.x", ("spec.items", 10)))
    assert 0 < expression.estimate <= COST_LIMIT


def test_the_builtin_rayjob_expression_is_estimated_within_the_limit():
    decl = kinddecl.builtin_declarations()["ray.io/v1/RayJob"]["ttl"]
    expression = TtlExpression(decl["cel"], kinddecl.cel_inputs(decl["celInputs"]))
    assert expression.estimate <= COST_LIMIT // 2  # room for a slower machine is the limit's, not this one's


def test_a_declaration_naming_a_bad_expression_is_refused_naming_file_field_and_column():
    decl = {"group": "widgets.example.com", "version": "v1", "kind": "Widget", "plural": "widgets",
            "finished": {"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
            "finishedAt": ["status.doneAt"],
            "ttl": {"cel": "has(self.spec.keep) ? self.spec.keep : null", "celWhen": "spec.x",
                    "celInputs": ["spec.x"]}}
    with pytest.raises(kinddecl.KindError) as caught:
        kinddecl.compile_kinds([decl], "policy.yaml", "kindDeclarations")
    assert str(caught.value) == ("policy.yaml: kindDeclarations[0].ttl.cel: line 1, column 15 of the expression: "
                                 "reads self.spec.keep, which is not among celInputs (spec.x)")


# --- results ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (3600, 3600),
    (0, 0),
    (None, None),
])
def test_an_int_or_null_is_the_ttl(value, expected):
    assert TtlExpression("has(self.spec.x) ? self.spec.x : null", X).evaluate([value]) == expected


def test_a_field_not_set_is_an_error_where_has_does_not_guard_it():
    with pytest.raises(CelEvalError, match="evaluation failed"):
        TtlExpression("self.spec.x", X).evaluate([None])


@pytest.mark.parametrize("text, expected", [
    ("duration('90s')", 90),
    ("duration('1h')", 3600),
    ("duration('1500ms')", 2),  # rounded up: a TTL a little longer keeps the job a little longer
    ("3u", 3),
])
def test_a_duration_is_whole_seconds_rounded_up(text, expected):
    assert TtlExpression(text, X).evaluate([None]) == expected


@pytest.mark.parametrize("value, problem", [
    (True, "gave the bool true, not a TTL"),  # cel-python's bool is an int: never 1 s
    (False, "gave the bool false, not a TTL"),  # never 0 s: deleted at once
    (1.5, "gave a double"),
    ("3600", "gave a string"),
    ([1], "gave a list"),
    ({"a": 1}, "gave a map"),
    (-5, "gave -5 s: a TTL is not negative"),
])
def test_anything_else_is_the_expressions_error(value, problem):
    with pytest.raises(CelEvalError) as caught:
        TtlExpression("self.spec.x", X).evaluate([value])
    assert problem in str(caught.value)


def test_a_runtime_error_is_the_expressions_error():
    with pytest.raises(CelEvalError, match="evaluation failed"):
        TtlExpression("self.spec.x / 0", X).evaluate([5])


# --- bounds ----------------------------------------------------------------------------------------

def test_an_input_over_its_declared_size_is_refused_before_it_is_read():
    expression = TtlExpression("self.spec.items.exists(i, i > 3) ? 1 : null", ITEMS)
    with pytest.raises(CelEvalError, match=r"spec.items has 20,000 items, more than the 10 its celInputs entry "
                                           r"allows \(maxItems\)"):
        expression.evaluate([list(range(20_000))])
    assert expression.last_steps == 0  # nothing evaluated


def test_inputs_over_the_byte_limit_are_refused():
    expression = TtlExpression("has(self.spec.x) ? 1 : null", X)
    with pytest.raises(CelEvalError, match="more than 65,536"):
        expression.evaluate(["a" * MAX_INPUT_BYTES])


def test_an_evaluation_stops_at_the_limit_whatever_the_estimate_said():
    expression = TtlExpression("self.spec.items.exists(i, i > 100) ? 1 : null", ITEMS)
    expression.limit = 50  # as if the estimate had been wrong: the runtime limit still holds
    with pytest.raises(CelEvalError, match="stopped after 50 steps"):
        expression.evaluate([list(range(10))])
    assert expression.last_steps == 51


def test_the_step_limit_holds_inside_exists_which_turns_cel_errors_into_false():
    # exists() turns its body's CEL errors into false; running out of steps must not be one of them.
    expression = TtlExpression("[1, 2, 3].exists(i, self.spec.items.exists(j, j == i)) ? 1 : null", ITEMS)
    expression.limit = 100
    with pytest.raises(CelEvalError, match="stopped after 100 steps"):
        expression.evaluate([list(range(10))])


RAYJOB_RULE_CONDITIONS = [{"jobStatus": "SUCCEEDED"}, {"jobStatus": "FAILED"}, {"jobDeploymentStatus": "Failed"}]


def _random_rayjob_inputs(rng: random.Random) -> list:
    rules = [{"policy": rng.choice(["DeleteSelf", "DeleteCluster", "DeleteWorkers", "DeleteNone"]),
              "condition": {**rng.choice(RAYJOB_RULE_CONDITIONS), **({"ttlSeconds": rng.randrange(100)}
                                                                     if rng.random() < 0.8 else {})}}
             for _ in range(rng.randrange(13))]
    legacy = {"policy": rng.choice(["DeleteSelf", "DeleteCluster"])}
    return [rules or None, legacy if rng.random() < 0.5 else None, legacy if rng.random() < 0.5 else None,
            {"a": "b"} if rng.random() < 0.1 else None, rng.choice([None, 0, 30]),
            rng.choice([None, "SUCCEEDED", "FAILED", "STOPPED"]), rng.choice(["Complete", "Failed"])]


def test_no_evaluation_counts_more_steps_than_the_estimate():
    decl = kinddecl.builtin_declarations()["ray.io/v1/RayJob"]["ttl"]
    expression = TtlExpression(decl["cel"], kinddecl.cel_inputs(decl["celInputs"]))
    rng = random.Random(26)
    most = 0
    for _ in range(150):
        expression._run(_random_rayjob_inputs(rng))
        assert expression.last_steps <= expression.estimate
        most = max(most, expression.last_steps)
    assert most > expression.estimate // 4  # the cases reached the expensive paths


def test_nested_comprehensions_count_no_more_than_estimated():
    expression = TtlExpression("self.spec.items.map(a, self.spec.items.filter(b, a == b).size())"
                               ".exists(n, n > 1) ? 60 : null", ITEMS)
    for size in (0, 1, 5, 10):
        expression._run([list(range(size))])
        assert expression.last_steps <= expression.estimate


def test_a_plus_that_builds_much_costs_steps_by_what_it_builds():
    expression = TtlExpression("size(self.spec.x + self.spec.x) > 0 ? 1 : null", X)
    expression._run(["a" * 10_000])
    small = TtlExpression("size(self.spec.x + self.spec.x) > 0 ? 1 : null", X)
    small._run(["a"])
    assert expression.last_steps - small.last_steps == 20_000 // celexpr.ADD_UNIT


# --- the cache -------------------------------------------------------------------------------------

def test_the_result_cache_stays_within_its_bytes():
    cache = ResultCache(limit=10_000)
    for i in range(1_000):
        cache.put(f"key-{i:04}" + "x" * 50, (i,))
    assert cache.used <= 10_000
    assert cache.get("key-0999" + "x" * 50) == (999,)
    assert cache.get("key-0000" + "x" * 50) is None  # the least recently used went first


def test_a_result_is_evaluated_once_for_the_same_inputs():
    expression = TtlExpression("self.spec.items.exists(i, i > 3) ? 1 : null", ITEMS)
    assert expression.evaluate([[1, 5]]) == 1
    expression.last_steps = 0
    assert expression.evaluate([[1, 5]]) == 1
    assert expression.last_steps == 0  # from the cache


def test_an_error_is_remembered_too():
    expression = TtlExpression("self.spec.x", X)
    for _ in range(2):
        with pytest.raises(CelEvalError):
            expression.evaluate([True])
    assert expression.cache.get("[true]") is not None


def test_the_cache_key_is_the_inputs_alone():
    expression = TtlExpression("self.spec.x", X)
    assert expression.inputs_key([timedelta and 3]) == "[3]"
