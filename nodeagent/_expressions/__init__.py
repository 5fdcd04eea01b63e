"""Callers' ClassAd expressions, evaluated within a budget in killable worker processes.

* :mod:`._evaluator`: the :class:`~._evaluator.Evaluator` a daemon holds: sends each
  request to a worker and kills the worker when the budget runs out (422
  ``expression.too_costly``).
* :mod:`._worker`: the worker process (``python -m nodeagent._expressions._worker``),
  standard library, orjson and :mod:`slots` only.

Importing this package imports nothing: the worker starts through it.
"""
