"""Frozen keyword-only records for the modules every plain command imports.

``dataclasses`` imports ``inspect`` (with ``ast``, ``dis``, ``tokenize``), ≈ 6 ms of a
command that takes ≈ 20 ms; :func:`record` makes what
``@dataclass(frozen=True, kw_only=True)`` makes of a class with plain fields, at the cost
of one function: an ``__init__`` taking each annotated field by keyword (a class
attribute of the same name is its default), ``__eq__`` and ``__hash__`` over the fields,
``__repr__``, and no assignment after ``__init__`` (:class:`AttributeError`). mypy reads
it as a dataclass (``dataclass_transform``). :func:`replace` is
:func:`dataclasses.replace` for it.

Nothing imported, not even ``typing``.
"""

from __future__ import annotations

__all__ = ["record", "replace"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")
else:

    def dataclass_transform(**_: object) -> object:
        return lambda function: function


_MISSING = object()


def _init(self: Any, **given: Any) -> None:
    fields: dict[str, Any] = type(self).__record_fields__
    unknown = given.keys() - fields.keys()
    if unknown:
        name = type(self).__name__
        raise TypeError(f"{name}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    for field, default in fields.items():
        value = given.get(field, default)
        if value is _MISSING:
            raise TypeError(f"{type(self).__name__}() missing keyword argument {field!r}")
        object.__setattr__(self, field, value)


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, field) for field in type(self).__record_fields__)


def _eq(self: Any, other: object) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return bool(_values(self) == _values(other))


def _hash(self: Any) -> int:
    return hash(_values(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{field}={getattr(self, field)!r}" for field in self.__record_fields__)
    return f"{type(self).__qualname__}({shown})"


def _frozen(self: Any, name: str, value: object) -> None:
    raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")


def _undeletable(self: Any, name: str) -> None:
    raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")


@dataclass_transform(kw_only_default=True, frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """Make ``cls`` a frozen keyword-only record of its annotated fields (``ClassVar``
    annotations excepted), in the order they are written."""
    fields: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            default = vars(klass).get(name, _MISSING)
            fields[name] = default
    for name in fields:
        if name in vars(cls):
            delattr(cls, name)
    for attribute, value in (
        ("__record_fields__", fields),
        ("__init__", _init),
        ("__eq__", _eq),
        ("__hash__", _hash),
        ("__repr__", _repr),
        ("__setattr__", _frozen),
        ("__delattr__", _undeletable),
    ):
        setattr(cls, attribute, value)
    return cls


def replace(instance: _T, **changes: Any) -> _T:
    """A copy of the record ``instance`` with ``changes`` (fields by name)."""
    fields: dict[str, Any] = type(instance).__record_fields__  # type: ignore[attr-defined]
    values = {field: getattr(instance, field) for field in fields}
    return type(instance)(**{**values, **changes})
