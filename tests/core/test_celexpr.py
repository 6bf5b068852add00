"""CEL TTL expressions: what load refuses (with its column), what evaluation gives, and its bounds."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from jobttl.core.domain.kinds import cel as celexpr, declarations as kinddecl
from jobttl.core.domain.kinds.cel import (
    COST_LIMIT,
    MAX_INPUT_BYTES,
    CelCheckError,
    CelEvalError,
    CelInput,
    ResultCache,
    TtlExpression,
)
from jobttl.core.domain.kinds.declarations import parse_path


def inputs(*specs) -> tuple[CelInput, ...]:
    """`"spec.x"` or `("spec.x", max_items)`."""
    return tuple(
        CelInput(parse_path(s), s) if isinstance(s, str) else CelInput(parse_path(s[0]), s[0], s[1]) for s in specs
    )


X = inputs("spec.x")
ITEMS = inputs(("spec.items", 10))


def refused(text: str, given=X) -> CelCheckError:
    with pytest.raises(CelCheckError) as caught:
        TtlExpression(text, given)
    return caught.value


@pytest.mark.parametrize(
    "text, given, problem, where",
    [
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
        (
            "self.spec.items.exists(i, i > 3) ? 1 : null",
            inputs("spec.items"),
            "exists() here runs its body (18 steps) once per item, and no maxItems bounds its list",
            (1, 17),
        ),
        # An operator's nested comprehension over 300 items (issue 26): ~2.4 million steps, each `a == b`
        # charged by what comparing two items can cost (together, at most the whole list's weight).
        (
            "self.spec.items.map(a, self.spec.items.filter(b, a == b).size()).exists(n, n > 1) ? 60 : null",
            inputs(("spec.items", 300)),
            "map() here runs its body (8,068 steps) once per item, and its list holds up to 300 items",
            (1, 17),
        ),
        (
            "self.spec.items.exists(i, i.sub.exists(j, j > 3)) ? 1 : null",
            ITEMS,
            "exists() here runs its body (18 steps) once per item, and no maxItems bounds its list",
            (1, 33),
        ),
        ("self.spec.items.exists(i, i) ? 'a' + 'b' : 2", ITEMS, "the result can be a string", (1, 1)),
        ("self.spec.items.all(1, true) ? 1 : 2", ITEMS, "the first argument of all() must be a variable name", (1, 21)),
        ("self.spec.items.exists(i, 5) ? 1 : 2", ITEMS, "exists() needs a condition, and this is a int", (1, 27)),
    ],
)
def test_an_expression_is_refused_at_load_naming_the_problem_and_its_column(text, given, problem, where):
    error = refused(text, given)
    assert problem in str(error)
    assert (error.line, error.column) == where
    assert str(error).startswith(f"line {where[0]}, column {where[1]} of the expression: ")


@pytest.mark.parametrize(
    "text",
    [
        "self.spec.x",
        "has(self.spec.x) ? self.spec.x : null",
        "duration('1h')",
        "null",
        "has(self.spec.x) ? int(self.spec.x) * 60 : 3600",
        "self.spec.items.exists(i, i > 3) ? 1 : null",
        # A nested comprehension, over lists bounded small enough: 10 x 10 items.
        "self.spec.items.map(a, self.spec.items.filter(b, b > 3).size()).exists(n, n > 1) ? 60 : null",
    ],
)
def test_an_expression_within_the_rules_is_accepted(text):
    expression = TtlExpression(text, inputs("spec.x", ("spec.items", 10)))
    assert 0 < expression.estimate <= COST_LIMIT


def test_the_builtin_rayjob_expression_is_estimated_within_the_limit():
    decl = kinddecl.builtin_declarations()["ray.io/v1/RayJob"]["ttl"]
    expression = TtlExpression(decl["cel"], kinddecl.cel_inputs(decl["celInputs"]))
    assert expression.estimate <= COST_LIMIT // 2  # room for a slower machine is the limit's, not this one's


def test_a_declaration_naming_a_bad_expression_is_refused_naming_file_field_and_column():
    decl = {
        "group": "widgets.example.com",
        "version": "v1",
        "kind": "Widget",
        "plural": "widgets",
        "finished": {"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
        "finishedAt": ["status.doneAt"],
        "ttl": {"cel": "has(self.spec.keep) ? self.spec.keep : null", "celWhen": "spec.x", "celInputs": ["spec.x"]},
    }
    with pytest.raises(kinddecl.KindError) as caught:
        kinddecl.compile_kinds([decl], "policy.yaml", "kindDeclarations")
    assert str(caught.value) == (
        "policy.yaml: kindDeclarations[0].ttl.cel: line 1, column 15 of the expression: "
        "reads self.spec.keep, which is not among celInputs (spec.x)"
    )


# --- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (3600, 3600),
        (0, 0),
        (None, None),
    ],
)
def test_an_int_or_null_is_the_ttl(value, expected):
    assert TtlExpression("has(self.spec.x) ? self.spec.x : null", X).evaluate([value]) == expected


def test_a_field_not_set_is_an_error_where_has_does_not_guard_it():
    with pytest.raises(CelEvalError, match="evaluation failed"):
        TtlExpression("self.spec.x", X).evaluate([None])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("duration('90s')", 90),
        ("duration('1h')", 3600),
        ("duration('1500ms')", 2),  # rounded up: a TTL a little longer keeps the job a little longer
        ("3u", 3),
    ],
)
def test_a_duration_is_whole_seconds_rounded_up(text, expected):
    assert TtlExpression(text, X).evaluate([None]) == expected


@pytest.mark.parametrize(
    "value, problem",
    [
        (True, "gave the bool true, not a TTL"),  # cel-python's bool is an int: never 1 s
        (False, "gave the bool false, not a TTL"),  # never 0 s: deleted at once
        (1.5, "gave a double"),
        ("3600", "gave a string"),
        ([1], "gave a list"),
        ({"a": 1}, "gave a map"),
        (-5, "gave -5 s: a TTL is not negative"),
    ],
)
def test_anything_else_is_the_expressions_error(value, problem):
    with pytest.raises(CelEvalError) as caught:
        TtlExpression("self.spec.x", X).evaluate([value])
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "self.spec.x * 60",
        "self.spec.x + 0",
        "0 + self.spec.x",
        "self.spec.x - 0",
        "-self.spec.x",
        "int(self.spec.x)",
        "uint(self.spec.x)",
        "int(double(self.spec.x))",
        "has(self.spec.x) ? int(self.spec.x) * 60 : 3600",
    ],
)
@pytest.mark.parametrize("flag", [False, True])
def test_a_bool_is_never_arithmetic_nor_converted_to_seconds(text, flag):
    # cel-python's BoolType subclasses int: false would be 0 s (deleted at once), true 1 s or 60 s.
    # CEL (cel-go, Kubernetes) has no int(bool) nor bool * int: the policy's error, the object kept.
    with pytest.raises(CelEvalError, match="evaluation failed"):
        TtlExpression(text, X).evaluate([flag])


@pytest.mark.parametrize(
    "text, value, expected",
    [
        ("self.spec.x * 60", 2, 120),
        ("int(self.spec.x)", "90", 90),
        ("uint(self.spec.x) + 1u", 5, 6),
        ("type(self.spec.x) == int ? self.spec.x : null", 7, 7),
        ("double(self.spec.x) > 1.5 ? 2 : 1", 2, 2),
    ],
)
def test_arithmetic_and_conversions_of_numbers_still_work(text, value, expected):
    assert TtlExpression(text, X).evaluate([value]) == expected


def test_a_runtime_error_is_the_expressions_error():
    with pytest.raises(CelEvalError, match="evaluation failed"):
        TtlExpression("self.spec.x / 0", X).evaluate([5])


# --- bounds ----------------------------------------------------------------------------------------


def test_an_input_over_its_declared_size_is_refused_before_it_is_read():
    expression = TtlExpression("self.spec.items.exists(i, i > 3) ? 1 : null", ITEMS)
    with pytest.raises(
        CelEvalError,
        match=r"spec.items has 20,000 items, more than the 10 its celInputs entry "
        r"allows \(maxItems\)",
    ):
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
    rules = [
        {
            "policy": rng.choice(["DeleteSelf", "DeleteCluster", "DeleteWorkers", "DeleteNone"]),
            "condition": {
                **rng.choice(RAYJOB_RULE_CONDITIONS),
                **({"ttlSeconds": rng.randrange(100)} if rng.random() < 0.8 else {}),
            },
        }
        for _ in range(rng.randrange(13))
    ]
    legacy = {"policy": rng.choice(["DeleteSelf", "DeleteCluster"])}
    return [
        rules or None,
        legacy if rng.random() < 0.5 else None,
        legacy if rng.random() < 0.5 else None,
        {"a": "b"} if rng.random() < 0.1 else None,
        rng.choice([None, 0, 30]),
        rng.choice([None, "SUCCEEDED", "FAILED", "STOPPED"]),
        rng.choice(["Complete", "Failed"]),
    ]


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
    expression = TtlExpression(
        "self.spec.items.map(a, self.spec.items.filter(b, a == b).size()).exists(n, n > 1) ? 60 : null",
        inputs(("spec.items", 4)),
    )
    heavy = list(range(8_000))  # four of these fill the 64 KiB the inputs may hold
    for items in ([], [1], [1, 2, 3, 4], [heavy], [heavy, heavy], [heavy] * 3, [heavy, "x" * 40_000]):
        expression._run([items])
        assert expression.last_steps <= expression.estimate
    assert expression.last_steps > 0


# --- what a step costs: comparisons and searches by their operands' size --------------------------


def test_comparing_two_large_lists_costs_steps_by_their_items_not_one():
    # One `==` of two 30,000-item lists took ~30 ms of CPU and counted as one step.
    expression = TtlExpression("self.spec.l == self.spec.l ? 1 : null", inputs("spec.l"))
    expression._run([[]])
    empty = expression.last_steps
    expression._run([list(range(16_000))])
    assert expression.last_steps - empty == 16_001 // celexpr.COMPARE_UNIT - 1 // celexpr.COMPARE_UNIT


def test_a_comparison_stops_before_it_runs_when_its_operands_would_pass_the_limit():
    expression = TtlExpression("self.spec.l == self.spec.l ? 1 : null", inputs("spec.l"))
    expression.limit = 100
    with pytest.raises(CelEvalError, match="stopped after 100 steps"):
        expression.evaluate([list(range(10_000))])


@pytest.mark.parametrize(
    "text, value, weight",
    [
        ("5 in self.spec.l ? 1 : null", list(range(3_200)), 3_201),  # searched: the container
        ("self.spec.l.contains('x') ? 1 : null", "a" * 51_200, 1 + 200 + 1),  # a string: per 256 characters
        ("self.spec.l == 'abc' ? 1 : null", "a" * 51_200, 1),  # the smaller operand bounds `==`
    ],
)
def test_searches_and_string_operations_cost_by_size(text, value, weight):
    expression = TtlExpression(text, inputs("spec.l"))
    expression._run([value])
    assert expression.last_steps <= expression.estimate
    small = TtlExpression(text, inputs("spec.l"))
    small._run([[5] if isinstance(value, list) else ""])  # the same branch taken
    assert expression.last_steps - small.last_steps == weight // celexpr.COMPARE_UNIT


def test_comparing_large_lists_once_per_item_of_another_is_refused_at_load():
    # The reviewer's case: 100 x one comparison of 30,000 items was estimated 2,820 steps, 3.3 s of CPU.
    error = refused(
        "self.spec.m.map(x, self.spec.l == self.spec.l).size() > 0 ? 1 : null", inputs(("spec.m", 100), "spec.l")
    )
    assert "map() here runs its body" in str(error) and "its list holds up to 100 items" in str(error)


def test_comparisons_of_a_lists_items_are_charged_once_for_the_whole_list():
    # `r.status == self.status.x` for each of a list's items: together, no more than the list's weight.
    expression = TtlExpression(
        "self.spec.l.filter(r, r.s == self.spec.x).size() > 0 ? 1 : null", inputs(("spec.l", 12), "spec.x")
    )
    one_pass = celexpr.MAX_WEIGHT // celexpr.COMPARE_UNIT
    assert one_pass <= expression.estimate < 2 * one_pass  # not 12 times it
    big = [{"s": list(range(1_300))} for _ in range(12)]
    expression._run([big, list(range(1_300))])
    assert expression.last_steps <= expression.estimate


def test_an_evaluation_past_its_cpu_deadline_stops_as_the_expressions_error(monkeypatch):
    # A backstop to the step count (its CPU time, not a wall clock); here a deadline already passed.
    monkeypatch.setattr(celexpr, "CPU_DEADLINE", -1.0)
    with pytest.raises(CelEvalError, match="stopped after -1 s of CPU"):
        TtlExpression("has(self.spec.x) ? 1 : null", X).evaluate([1])


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


def test_a_remembered_error_keeps_no_object_alive():
    # Re-raising one cached exception instance grows its traceback by the caller's frames each
    # time, and those frames hold the whole object: a leak of every object hitting the error.
    import gc
    import weakref

    class Big:
        pass

    expression = TtlExpression("self.spec.x", X)

    def own_ttl(obj: Big) -> None:
        with pytest.raises(CelEvalError) as caught:
            expression.evaluate([True])
        assert len(list(__import__("traceback").walk_tb(caught.value.__traceback__))) <= 3

    first = Big()
    own_ttl(first)
    refs = []
    for _ in range(20):
        obj = Big()
        refs.append(weakref.ref(obj))
        own_ttl(obj)
        del obj
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_the_cache_key_is_the_inputs_alone():
    expression = TtlExpression("self.spec.x", X)
    assert expression.inputs_key([timedelta and 3]) == "[3]"


def test_past_its_evaluation_slots_an_evaluation_is_refused_at_once_not_queued():
    # The sink keeps most of its threads for /healthz and ordinary events: one more costly event
    # than it has slots is told to retry (503), never queued behind the others.
    expression = TtlExpression("has(self.spec.x) ? self.spec.x : null", X)
    assert expression.evaluate([60]) == 60
    celexpr.limit_evaluations(1)
    try:
        assert celexpr._SLOTS.acquire(blocking=False)  # one evaluation in flight
        with pytest.raises(celexpr.CelBusy, match="1 CEL evaluations are running, the most at once"):
            expression.evaluate([120])
        assert expression.evaluate([60]) == 60  # a remembered result needs no slot
        celexpr._SLOTS.release()
        assert expression.evaluate([120]) == 120
        assert celexpr._SLOTS.acquire(blocking=False)  # its slot was given back
        celexpr._SLOTS.release()
    finally:
        celexpr.limit_evaluations(None)


def test_a_value_built_heavier_than_the_inputs_is_charged_as_built_through_dyn():
    # dyn(l + l) weighs what `+` built, not the inputs' bound: its comparison's estimate holds.
    expression = TtlExpression(
        "dyn(self.spec.l + self.spec.l) == dyn(self.spec.l + self.spec.l) ? 1 : null", inputs("spec.l")
    )
    expression.evaluate([[0] * 30_000])  # 60 KiB of JSON: l + l weighs 60,001, more than any input
    assert expression.last_steps <= expression.estimate


def test_a_remembered_error_is_short_whatever_value_it_quotes():
    # cel-python's messages may quote the value; the cache counts what it keeps of it.
    expression = TtlExpression("self.spec.x + 1", X)
    with pytest.raises(CelEvalError) as caught:
        expression.evaluate(["a" * 60_000])
    assert len(str(caught.value)) <= celexpr.MAX_MESSAGE
    assert expression.cache.used == len('["' + "a" * 60_000 + '"]') + ResultCache.ENTRY_BYTES + len(str(caught.value))


def _random_expression(rng: random.Random, depth: int, names: tuple[str, ...]) -> str:
    """A random boolean expression over `self.spec.l` (a list of at most 6 items), `self.spec.s`,
    `self.spec.x` and the macros' variables in `names`: comparisons, searches, `+`, conditionals."""

    def value(d: int) -> str:
        choices = ["self.spec.l", "self.spec.s", "self.spec.x", "[1, 'a', [2]]", "'abc'", "3", *names]
        if d > 0:
            choices += [
                f"({value(d - 1)} + {value(d - 1)})",
                f"self.spec.l.map(v{d}, {value(d - 1)})",
                f"self.spec.l.filter(v{d}, {cond(d - 1, names + (f'v{d}',))})",
                f"({cond(d - 1)} ? {value(d - 1)} : {value(d - 1)})",
                f"dyn({value(d - 1)})",
            ]
        return rng.choice(choices)

    def cond(d: int, scope: tuple[str, ...] = names) -> str:
        nonlocal names
        saved, names = names, scope
        try:
            op = rng.choice(["==", "!=", "in", "<", "contains", "exists", "size", "has", "&&"])
            if op == "contains":
                return f"string({value(d)}).contains(string({value(d)}))"
            if op == "exists":
                return f"self.spec.l.exists(e{d}, {cond(max(d - 1, 0), names + (f'e{d}',))})"
            if op == "size":
                return f"size({value(d)}) > 2"
            if op == "has":
                return "has(self.spec.x)"
            if op == "&&":
                return f"({cond(max(d - 1, 0))} && {cond(max(d - 1, 0))})"
            return f"{value(d)} {op} {value(d)}"
        finally:
            names = saved

    return cond(depth)


def test_no_random_expression_counts_more_steps_than_its_estimate():
    # The cost model's one promise: whatever the expression and the inputs, an evaluation counts no
    # more steps than the load-time estimate (comparisons charged by weight on both sides).
    rng = random.Random(2026)
    given = inputs(("spec.l", 6), "spec.s", "spec.x")
    checked = 0
    for _ in range(120):
        text = f"{_random_expression(rng, rng.randrange(1, 4), ())} ? 1 : null"
        try:
            expression = TtlExpression(text, given)
        except CelCheckError:
            continue
        for _ in range(3):
            item = lambda: rng.choice(  # noqa: E731
                [
                    1,
                    "x" * rng.randrange(2_000),
                    list(range(rng.randrange(1_500))),
                    {"k": list(range(rng.randrange(500)))},
                ]
            )
            values = [
                [item() for _ in range(rng.randrange(7))],
                "s" * rng.randrange(10_000),
                rng.choice([None, 5, [1, 2], "y" * 3_000]),
            ]
            expression._run(values)
            assert expression.last_steps <= expression.estimate, (text, expression.last_steps, expression.estimate)
            checked += 1
    assert checked > 100


def test_an_outer_items_comparisons_inside_an_inner_comprehension_count_once_per_inner_item():
    # `a` is compared once per `b`: across the outer list, the list's weight times the inner size.
    expression = TtlExpression(
        "self.spec.l.exists(a, self.spec.l.exists(b, a != self.spec.x)) ? 1 : null", inputs(("spec.l", 2), "spec.x")
    )
    # 3,000 items (18 KiB): heavy enough that the weights dominate, light enough that the evaluation
    # stays far under the CPU backstop on a loaded machine (10,000 took 1.3 s of CPU there, and was stopped).
    heavy = [0] * 3_000
    expression.evaluate([[heavy, heavy], heavy])  # every comparison false, none cut short
    assert expression.last_steps <= expression.estimate
    assert expression.last_steps > 4 * (3_001 // celexpr.COMPARE_UNIT)
