"""jobttl's benchmark: every hot path against a real baseline program, in the same run.

Run it with ``make bench`` (or ``.venv/bin/python -m bench [--quick] [--rows ...]``); see
``bench/__main__.py`` for what each row measures and README.md ("Performance") for a run.
Benchmarks are not tests: nothing here runs in ``make test``.
"""
